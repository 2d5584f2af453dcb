-- The order builds were recorded in: two recorded in the same millisecond
-- have equal finished_at, and "the newest version" must still be one of
-- them every time (it decides what an unpinned assignment runs).
ALTER TABLE builds ADD COLUMN seq BIGINT NOT NULL DEFAULT 0;
UPDATE builds SET seq = (
    SELECT COUNT(*) FROM builds b2
    WHERE b2.finished_at < builds.finished_at
       OR (b2.finished_at = builds.finished_at AND b2.id <= builds.id)
);
CREATE INDEX builds_newest ON builds (module, finished_at, seq);

-- Which controller is active, when several share one store. One row, made
-- here: a controller taking the lease moves the epoch, and every write a
-- controller makes first checks that the epoch is still the one it took,
-- so a deposed controller whose session outlived its lease (frozen, cut
-- off) writes nothing more. `holder` and `http` name it to `mesh status`.
CREATE TABLE controller_lease (
    id     BIGINT PRIMARY KEY CHECK (id = 1),
    epoch  BIGINT NOT NULL,
    holder TEXT NOT NULL,
    http   TEXT,
    since  BIGINT NOT NULL
);
INSERT INTO controller_lease (id, epoch, holder, http, since) VALUES (1, 0, '', NULL, 0);
-- Under which lease each report was recorded: none for a report recorded
-- by no controller (a store written directly).
ALTER TABLE reports ADD COLUMN epoch BIGINT;

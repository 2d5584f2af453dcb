-- The order assignments were made in, as a counter: a seat's first holder
-- is the one assigned first, and two assignments in the same millisecond
-- (a script, a fleet) tied on created_at and were then ordered by node
-- name, so the second assigned could be named the first holder. Rows made
-- before keep their time as their place.
ALTER TABLE assignments ADD COLUMN seq BIGINT NOT NULL DEFAULT 0;
UPDATE assignments SET seq = created_at;

-- The users file of a clustered bus as the active controller composed it:
-- the controller on every other machine writes it for its own server, so
-- each server serves the same file. Public keys and permissions only, no
-- secret. `revision` moves with every composition shared.
CREATE TABLE users_file_shared (
    id        BIGINT PRIMARY KEY CHECK (id = 1),
    revision  BIGINT NOT NULL,
    text      TEXT NOT NULL,
    shared_at BIGINT NOT NULL
);

-- The newest records revision every node's declaration has been composed
-- from, written by the controller after each pass of the records (one that
-- found a node's declaration unchanged counts: its newest one stands). A
-- command that changed a record waits for it to reach the revision its
-- change produced before reading the node's newest declaration: `mesh
-- assign --version V --wait` then waits for the declaration carrying V,
-- never for the one before it. Not a revision source: writing it changes
-- no principal.
CREATE TABLE declared_through (
    id               BIGINT PRIMARY KEY CHECK (id = 1),
    records_revision BIGINT NOT NULL,
    declared_at      BIGINT NOT NULL
);

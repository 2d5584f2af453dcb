-- The newest records revision a composition the broker serves was made
-- from, written by the controller once a composition's canary is admitted
-- (or the composition left the file as it was). A command that changed a
-- record waits for it to reach the revision its change produced: `mesh
-- person add` returns once the person can connect. Not a revision source:
-- writing it changes no principal.
CREATE TABLE composition_live (
    id               BIGINT PRIMARY KEY CHECK (id = 1),
    records_revision BIGINT NOT NULL,
    live_at          BIGINT NOT NULL
);

-- The store's identity: one random id, given at this migration. Secrets are
-- written beside a store in a directory marked with it, so a second store
-- pointed at the same directory is refused instead of overwriting the
-- first store's secrets. An existing store gets its id when brought forward.
CREATE TABLE mesh_identity (
    id TEXT PRIMARY KEY
);
INSERT INTO mesh_identity (id) VALUES ('{{store_id}}');

-- A host's X25519 (XKey) sealing public key, recorded at enrolment with its
-- NKey: the controller seals a node's secrets to it.
ALTER TABLE nodes ADD COLUMN xkey TEXT CHECK (xkey IS NULL OR SUBSTR(xkey, 1, 1) = 'X');

-- One number that moves whenever a record authority or the bus objects are
-- derived from changes, whoever wrote it (a CLI, the controller, a restore):
-- the controller watches it instead of trusting every writer to tell it.
-- Moved by triggers, so no write path can forget; last-seen, reports and
-- declarations do not move it (they change no principal).
CREATE TABLE records_revision (
    id       BIGINT PRIMARY KEY CHECK (id = 1),
    revision BIGINT NOT NULL
);
INSERT INTO records_revision (id, revision) VALUES (1, 0);

{{revision_triggers}}

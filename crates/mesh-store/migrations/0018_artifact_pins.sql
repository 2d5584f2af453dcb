-- Artifacts in the bus (the object store ARTIFACTS): each recorded with the
-- chunk token (nuid) a host is granted to read it by, and each assignment
-- pinned to a version of its module, so the node runs the bytes the
-- operator chose and not whatever was put last.
ALTER TABLE artifacts ADD COLUMN nuid TEXT;
ALTER TABLE assignments ADD COLUMN version TEXT;
-- A version's artifacts change what a pinned module's declaration names
-- and what its host may read: a kind of input of its own.
INSERT INTO records_revisions (kind, revision) VALUES ('builds', 0);
{{revision_triggers:artifacts}}
{{kind_triggers:builds}}

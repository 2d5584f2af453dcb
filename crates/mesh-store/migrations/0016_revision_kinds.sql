-- A revision per kind of input, beside the one that moves with all of
-- them: the controller recomputes only what depends on what changed.
-- Recording a module's key recomposes the users file, never every node's
-- declaration; an address or a secret declares again, never reloads the
-- broker. Moved by triggers, as records_revision is.
CREATE TABLE records_revisions (
    kind     TEXT PRIMARY KEY,
    revision BIGINT NOT NULL
);
INSERT INTO records_revisions (kind, revision) VALUES
    ('nodes', 0), ('tokens', 0), ('credentials', 0), ('persons', 0),
    ('catalogue', 0), ('assignments', 0), ('secrets', 0), ('bus', 0);
{{kind_triggers}}

-- A person's role as an operator (viewer, operator, admin); none: the
-- person calls tools only. A change of it moves the records revision (the
-- persons table's triggers count any update), so the role's grants are
-- composed at once.
ALTER TABLE persons ADD COLUMN role TEXT;

-- The audit trail: one row per change to the records and per refusal of
-- a permitted person, appended and never changed. Arguments are JSON
-- without secret values (their names only). A request's id is recorded
-- once: a request retried after its answer was lost is recognised.
CREATE TABLE audit (
    id          {{id}},
    at          BIGINT NOT NULL,
    who         TEXT NOT NULL,
    operation   TEXT NOT NULL,
    arguments   TEXT NOT NULL,
    outcome     TEXT NOT NULL,
    revision    BIGINT,
    request_id  TEXT UNIQUE
);
CREATE INDEX audit_at ON audit (at);
{{append_only:audit}}

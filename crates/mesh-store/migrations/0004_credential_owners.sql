-- Credentials tied to what they belong to, so the database itself deletes a
-- person's credential with the person and a module's with its assignment.
-- Before this a mint checked the person or assignment and then inserted; on
-- PostgreSQL (READ COMMITTED) a removal could commit in between and leave a
-- credential whose secret would be valid again once the name came back.
--
-- Rebuilt rather than altered: SQLite cannot add a foreign key to an existing
-- table. Nothing references credentials, so the rebuild is safe with SQLite's
-- foreign_keys ON (the store runs migrations with it on): DROP TABLE deletes
-- no row another table needs, and the rename rewrites no other table.
--
-- person: the person a kind 'person' credential belongs to (NULL for every
-- machine). (node, module): a module's credential belongs to that assignment;
-- module is NULL for a host's credential, which MATCH SIMPLE does not check.
-- No cascade on node alone, as before: forgetting a node deletes (and lists)
-- its credentials explicitly, and a path that forgot to is refused. A module's
-- credential goes with its assignment, which goes with its node.
-- The checks leave no credential outside the keys: a person credential always
-- names its person, a module always its node.
CREATE TABLE credentials_new (
    principal   TEXT PRIMARY KEY,
    kind        TEXT NOT NULL CHECK (kind IN ('machine', 'person')),
    bcrypt_hash TEXT NOT NULL,
    node        TEXT REFERENCES nodes (name),
    module      TEXT,
    person      TEXT REFERENCES persons (name) ON DELETE CASCADE,
    created_at  BIGINT NOT NULL,
    FOREIGN KEY (node, module) REFERENCES assignments (node, module) ON DELETE CASCADE,
    CHECK ((kind = 'person') = (person IS NOT NULL)),
    CHECK (module IS NULL OR node IS NOT NULL)
);

-- Orphans are dropped, not copied: a person credential whose person is gone
-- (its principal is 'person_' || name), a module credential whose assignment
-- is gone, anything naming a node that is gone. They authorise nothing (what a
-- principal may do is derived from the records, not from the credential), and
-- keeping one would make its stale secret valid again the day the person or
-- assignment is added back.
INSERT INTO credentials_new (principal, kind, bcrypt_hash, node, module, person, created_at)
SELECT c.principal, c.kind, c.bcrypt_hash, c.node, c.module,
       CASE WHEN c.kind = 'person' THEN SUBSTR(c.principal, 8) END,
       c.created_at
FROM credentials c
WHERE (c.kind <> 'person' OR (
          SUBSTR(c.principal, 1, 7) = 'person_'
          AND EXISTS (SELECT 1 FROM persons p WHERE p.name = SUBSTR(c.principal, 8))))
  AND (c.module IS NULL OR EXISTS (
          SELECT 1 FROM assignments a WHERE a.node = c.node AND a.module = c.module))
  AND (c.node IS NULL OR EXISTS (SELECT 1 FROM nodes n WHERE n.name = c.node));

DROP TABLE credentials;
ALTER TABLE credentials_new RENAME TO credentials;
CREATE INDEX credentials_node ON credentials (node);
CREATE INDEX credentials_person ON credentials (person);

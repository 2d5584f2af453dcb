-- A person may sign in with an NKey (DESIGN §5: `mesh person key` makes one
-- on the person's machine, `mesh person add --nkey` records its public key)
-- instead of a password. Kept beside credentials rather than in it: that
-- table's checks tie a person to a bcrypt hash, and rebuilding it would
-- drop its revision triggers. Forgetting a person forgets the key.
CREATE TABLE person_keys (
    person     TEXT PRIMARY KEY REFERENCES persons (name) ON DELETE CASCADE,
    nkey       TEXT NOT NULL CHECK (SUBSTR(nkey, 1, 1) = 'U'),
    created_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX person_keys_nkey ON person_keys (nkey);
{{revision_triggers:person_keys}}

-- Machine credentials become NKey user public keys (DESIGN §5): a credential
-- is either the public key a machine signs the broker's nonce with, or the
-- bcrypt hash of a person's password. The checks make the split structural:
-- a machine row holds a key and no hash, a person row a hash and no key, so
-- no code path can put a password on a machine.
--
-- Rebuilt rather than altered, as in 0004 (SQLite cannot add a CHECK to an
-- existing table); nothing references either table.
CREATE TABLE credentials_new (
    principal   TEXT PRIMARY KEY,
    kind        TEXT NOT NULL CHECK (kind IN ('machine', 'person')),
    nkey        TEXT,
    bcrypt_hash TEXT,
    node        TEXT REFERENCES nodes (name),
    module      TEXT,
    person      TEXT REFERENCES persons (name) ON DELETE CASCADE,
    created_at  BIGINT NOT NULL,
    FOREIGN KEY (node, module) REFERENCES assignments (node, module) ON DELETE CASCADE,
    CHECK ((kind = 'person') = (person IS NOT NULL)),
    CHECK (module IS NULL OR node IS NOT NULL),
    CHECK ((kind = 'machine') = (nkey IS NOT NULL)),
    CHECK ((kind = 'person') = (bcrypt_hash IS NOT NULL)),
    CHECK (nkey IS NULL OR SUBSTR(nkey, 1, 1) = 'U')
);

-- Persons keep their hashes. A machine's bcrypt hash is dropped: no public
-- key can be derived from it, and its principal is then named and left out
-- of the users file until `mesh fleet load --remint` (or the host) records a
-- key — the ordinary state with an obvious remedy, rather than a password
-- kept on a machine.
INSERT INTO credentials_new (principal, kind, bcrypt_hash, node, module, person, created_at)
SELECT principal, kind, bcrypt_hash, node, module, person, created_at
FROM credentials
WHERE kind = 'person';

DROP TABLE credentials;
ALTER TABLE credentials_new RENAME TO credentials;
CREATE INDEX credentials_node ON credentials (node);
CREATE INDEX credentials_person ON credentials (person);

-- A token records its enrolment principal's NKey public key; the seed went
-- to whoever the token was issued to. The spend matches (node, key): a
-- reissued token has a new key, so the old one matches nothing.
CREATE TABLE enrolment_tokens_new (
    enrolment_key TEXT PRIMARY KEY CHECK (SUBSTR(enrolment_key, 1, 1) = 'U'),
    node          TEXT NOT NULL REFERENCES nodes (name) ON DELETE CASCADE,
    issued_at     BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    spent_at      BIGINT
);

-- Old tokens are not carried: an unspent one carries a hex secret, not a
-- seed, so its node could never authenticate with it (reissue it); a spent
-- one admits nothing and only told a replay apart from an unknown token.
DROP TABLE enrolment_tokens;
ALTER TABLE enrolment_tokens_new RENAME TO enrolment_tokens;
CREATE INDEX enrolment_tokens_node ON enrolment_tokens (node);

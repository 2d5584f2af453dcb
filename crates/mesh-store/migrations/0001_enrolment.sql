-- Nodes, enrolment tokens, credentials, persons.
-- Portable SQL: TEXT and BIGINT only (timestamps are unix milliseconds), so the
-- same file runs on SQLite and PostgreSQL.

CREATE TABLE nodes (
    name         TEXT PRIMARY KEY,
    public_key   TEXT,
    created_at   BIGINT NOT NULL,
    enrolled_at  BIGINT,
    last_seen_at BIGINT
);

CREATE TABLE node_ports (
    node TEXT NOT NULL REFERENCES nodes (name) ON DELETE CASCADE,
    port BIGINT NOT NULL CHECK (port BETWEEN 1 AND 65535),
    PRIMARY KEY (node, port)
);

-- secret_hash is SHA-256 of a 256-bit random secret; the plaintext is never kept.
-- secret_hash (SHA-256) is what the spend matches; bus_hash (bcrypt) is the
-- enrolment user's password hash in the users file while the token is live.
CREATE TABLE enrolment_tokens (
    secret_hash TEXT PRIMARY KEY,
    bus_hash    TEXT NOT NULL,
    node        TEXT NOT NULL REFERENCES nodes (name) ON DELETE CASCADE,
    issued_at   BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    spent_at    BIGINT
);
CREATE INDEX enrolment_tokens_node ON enrolment_tokens (node);

-- node/module say whose credential this is, so forgetting a node or
-- unassigning a module finds them without parsing principal names. No
-- cascade on node: forgetting a node deletes them explicitly, and a path that
-- forgot to would be refused instead of silently leaving a way onto the bus.
CREATE TABLE credentials (
    principal   TEXT PRIMARY KEY,
    kind        TEXT NOT NULL CHECK (kind IN ('machine', 'person')),
    bcrypt_hash TEXT NOT NULL,
    node        TEXT REFERENCES nodes (name),
    module      TEXT,
    created_at  BIGINT NOT NULL
);
CREATE INDEX credentials_node ON credentials (node);

CREATE TABLE persons (
    name       TEXT PRIMARY KEY,
    all_tools  BIGINT NOT NULL CHECK (all_tools IN (0, 1)),
    created_at BIGINT NOT NULL
);

CREATE TABLE person_tools (
    person TEXT NOT NULL REFERENCES persons (name) ON DELETE CASCADE,
    tool   TEXT NOT NULL,
    PRIMARY KEY (person, tool)
);

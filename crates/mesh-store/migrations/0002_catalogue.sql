-- The catalogue: modules with their manifests, versions, seats, aliases, and
-- which module runs on which node.

CREATE TABLE modules (
    name            TEXT PRIMARY KEY,
    manifest_source TEXT NOT NULL,
    manifest_digest TEXT NOT NULL,
    registered_at   BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);

CREATE TABLE module_versions (
    module      TEXT NOT NULL REFERENCES modules (name) ON DELETE CASCADE,
    rev         TEXT NOT NULL,
    build_id    TEXT,
    recorded_at BIGINT NOT NULL,
    PRIMARY KEY (module, rev)
);

-- declared_by NULL: a role, declared by the mesh itself.
CREATE TABLE seats (
    name        TEXT PRIMARY KEY,
    declared_by TEXT REFERENCES modules (name) ON DELETE CASCADE,
    scope       TEXT NOT NULL CHECK (scope IN ('node', 'mesh')),
    protocol    TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);

CREATE TABLE seat_aliases (
    alias TEXT PRIMARY KEY,
    seat  TEXT NOT NULL REFERENCES seats (name) ON DELETE CASCADE
);

-- No cascade on module: a module still assigned somewhere cannot be removed.
CREATE TABLE assignments (
    node       TEXT NOT NULL REFERENCES nodes (name) ON DELETE CASCADE,
    module     TEXT NOT NULL REFERENCES modules (name),
    created_at BIGINT NOT NULL,
    PRIMARY KEY (node, module)
);

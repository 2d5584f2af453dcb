-- What happens at run time: declarations, reports, builds and their artifacts.
-- {{id}} is the one dialect difference: an auto-assigned BIGINT primary key.

CREATE TABLE declarations (
    node       TEXT NOT NULL REFERENCES nodes (name) ON DELETE CASCADE,
    version    BIGINT NOT NULL,
    digest     TEXT NOT NULL,
    body       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (node, version)
);

CREATE TABLE reports (
    id                  {{id}},
    node                TEXT NOT NULL REFERENCES nodes (name) ON DELETE CASCADE,
    declaration_version BIGINT NOT NULL,
    received_at         BIGINT NOT NULL
);
CREATE INDEX reports_node ON reports (node, id);

CREATE TABLE report_outcomes (
    report_id BIGINT NOT NULL REFERENCES reports (id) ON DELETE CASCADE,
    module    TEXT NOT NULL,
    state     TEXT NOT NULL CHECK (state IN ('running', 'failed')),
    reason    TEXT,
    PRIMARY KEY (report_id, module)
);

-- id is the request id the asker chose; module is NULL for a failed build.
CREATE TABLE builds (
    id          TEXT PRIMARY KEY,
    module      TEXT,
    rev         TEXT,
    state       TEXT NOT NULL CHECK (state IN ('succeeded', 'failed')),
    failure     TEXT,
    finished_at BIGINT NOT NULL
);

CREATE TABLE build_inputs (
    build_id TEXT NOT NULL REFERENCES builds (id) ON DELETE CASCADE,
    position BIGINT NOT NULL,
    input    TEXT NOT NULL,
    PRIMARY KEY (build_id, position)
);

CREATE TABLE artifacts (
    build_id TEXT NOT NULL REFERENCES builds (id) ON DELETE CASCADE,
    name     TEXT NOT NULL,
    digest   TEXT NOT NULL,
    path     TEXT NOT NULL,
    size     BIGINT NOT NULL CHECK (size >= 0),
    PRIMARY KEY (build_id, name)
);
CREATE INDEX artifacts_digest ON artifacts (digest);

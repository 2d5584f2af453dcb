-- Each module's health and pinned version as its host reported them
-- (DESIGN "health and deploys"): a deployment waits on them. `healthy_for_ms`
-- is how long it had passed when the host sent the report, counted from
-- `received_at` on the controller's clock, never the host's.
ALTER TABLE report_outcomes ADD COLUMN pinned TEXT;
ALTER TABLE report_outcomes ADD COLUMN health TEXT
    CHECK (health IS NULL OR health IN ('starting', 'healthy', 'unhealthy'));
ALTER TABLE report_outcomes ADD COLUMN health_reason TEXT;
ALTER TABLE report_outcomes ADD COLUMN healthy_for_ms BIGINT;

-- Deployments: one module's pin moved over its nodes in batches. `record`
-- is the deployment as `mesh-core` defines it (spec, each node's version
-- before, state), JSON; `active` while it runs or is paused. One active
-- deployment per module, held by the store itself.
CREATE TABLE deployments (
    id         {{id}},
    module     TEXT NOT NULL,
    record     TEXT NOT NULL,
    active     INTEGER NOT NULL CHECK (active IN (0, 1)),
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX deployments_one_active ON deployments (module) WHERE active = 1;

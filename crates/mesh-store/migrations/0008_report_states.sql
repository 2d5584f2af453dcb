-- Reports carry every state a host reports a module in (starting and
-- stopped besides running and failed) and how often it was restarted; a
-- report may say the host refused what it was sent, and why.
CREATE TABLE report_outcomes_new (
    report_id BIGINT NOT NULL REFERENCES reports (id) ON DELETE CASCADE,
    module    TEXT NOT NULL,
    state     TEXT NOT NULL CHECK (state IN ('starting', 'running', 'failed', 'stopped')),
    reason    TEXT,
    restarts  BIGINT NOT NULL DEFAULT 0 CHECK (restarts >= 0),
    PRIMARY KEY (report_id, module)
);
INSERT INTO report_outcomes_new (report_id, module, state, reason)
SELECT report_id, module, state, reason FROM report_outcomes;
DROP TABLE report_outcomes;
ALTER TABLE report_outcomes_new RENAME TO report_outcomes;

ALTER TABLE reports ADD COLUMN refused TEXT;

-- A report is recorded once: each carries the id its host gave it, and a
-- redelivery of one already recorded (a controller killed between commit
-- and ack) finds it there. One declaration gets several reports (after
-- applying, then at each change of a module's state), so the identity is
-- the report's own id, not its sequence. Reports from before have none.
ALTER TABLE reports ADD COLUMN report_id TEXT;
CREATE UNIQUE INDEX reports_node_report_id ON reports (node, report_id);

-- Assigned modules the controller leaves out of their node's declaration,
-- and why (a placeholder that cannot be filled, a registered manifest that
-- no longer derives, a broker holder with no users file): the node's other
-- modules are still declared. Written by the controller after each pass
-- over the nodes; read where an operator looks (`mesh status`, `mesh assign
-- --wait`). Not a revision source: it is derived from the records.
CREATE TABLE left_out (
    node   TEXT NOT NULL REFERENCES nodes (name) ON DELETE CASCADE,
    module TEXT NOT NULL,
    reason TEXT NOT NULL,
    since  BIGINT NOT NULL,
    PRIMARY KEY (node, module)
);

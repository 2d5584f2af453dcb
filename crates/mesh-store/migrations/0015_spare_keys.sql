-- Module keys a host made ahead (public halves), as it last announced them
-- at enrolment or in a report: a module newly declared to the node is
-- given one, recorded as its credential before its declaration is
-- published, so the broker admits it before it starts. Not a revision
-- source: nothing is derived from a spare until it is given.
CREATE TABLE spare_keys (
    node TEXT NOT NULL REFERENCES nodes (name) ON DELETE CASCADE,
    nkey TEXT NOT NULL UNIQUE CHECK (SUBSTR(nkey, 1, 1) = 'U'),
    PRIMARY KEY (node, nkey)
);

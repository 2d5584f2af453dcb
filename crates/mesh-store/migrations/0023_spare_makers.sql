-- Whether a node's host makes spare module keys (it announced some, at
-- enrolment or in a report). A module its node has no spare left for waits
-- for the host's next spares when the host makes them; a host that makes
-- none is not waited for (it makes the module's key itself). Without this,
-- a node whose spares were all just given looked like one that makes none,
-- and a module assigned then was declared keyless and refused once.
ALTER TABLE nodes ADD COLUMN makes_spares BOOLEAN NOT NULL DEFAULT FALSE;
UPDATE nodes SET makes_spares = TRUE WHERE name IN (SELECT node FROM spare_keys);

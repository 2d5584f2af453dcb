-- Secrets: each value sealed to the controller's XKey (an X25519 box from a
-- key made for it, `sender`), never the plaintext. A new value is a change
-- of the records: the modules that use it are declared again.
CREATE TABLE secrets (
    name   TEXT PRIMARY KEY,
    sealed TEXT NOT NULL,
    sender TEXT NOT NULL CHECK (SUBSTR(sender, 1, 1) = 'X'),
    set_at BIGINT NOT NULL
);
{{revision_triggers:secrets}}

-- Where other nodes reach a node (`mesh node add --address`, a host's
-- `--advertise`): what `${seat:S:PORT}` is filled with.
ALTER TABLE nodes ADD COLUMN address TEXT;
{{revision_trigger_columns:nodes:address}}

-- A port a node gives a seat's holder on it, over the manifest's number.
CREATE TABLE node_seat_ports (
    node TEXT NOT NULL REFERENCES nodes (name) ON DELETE CASCADE,
    seat TEXT NOT NULL,
    port BIGINT NOT NULL CHECK (port BETWEEN 1 AND 65535),
    PRIMARY KEY (node, seat)
);
{{revision_triggers:node_seat_ports}}

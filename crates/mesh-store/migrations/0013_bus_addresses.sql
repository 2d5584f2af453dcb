-- The addresses nodes reach the broker at, as `mesh broker set-address`
-- recorded them (newline-separated URLs): every declaration carries them,
-- so a host follows a broker that moves without enrolling again. None
-- recorded: the genesis's own. A revision source: declarations change.
CREATE TABLE bus_addresses (
    id     BIGINT PRIMARY KEY CHECK (id = 1),
    urls   TEXT NOT NULL,
    set_at BIGINT NOT NULL
);
{{revision_triggers:bus_addresses}}

-- A mesh's move onto another bus (DESIGN "rollout"): confirmed by
-- `mesh rollout --confirm` in the same change as the bus addresses it
-- flips to (which move the revision: every node is declared them), and
-- `moved_at` once the controller drained the old bus and moved itself. A
-- controller's term connects to `to_urls` from then on; a standby that
-- takes over mid-move finds it here and carries on.
CREATE TABLE bus_moves (
    id           BIGINT PRIMARY KEY CHECK (id = 1),
    to_urls      TEXT NOT NULL,
    confirmed_at BIGINT NOT NULL,
    moved_at     BIGINT
);

-- When the old bus of a move was retired (DESIGN "rollout"): once every
-- enrolled node reported on the new bus, the controller removed the
-- mesh's users from RabbitMQ; none while it waits for a node.
ALTER TABLE bus_moves ADD COLUMN retired_at BIGINT;

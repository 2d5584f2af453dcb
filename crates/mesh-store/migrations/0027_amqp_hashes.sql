-- The RabbitMQ password hash each machine key announced (DESIGN "the bus
-- seam"), by the key's public half: a host announces its own and its
-- modules' and spares' with them, the controller its own and each token's
-- enrolment key's. A hash belongs to a key, so a spare given to a module
-- carries it along. A mesh on AMQP admits a principal with the hash of its
-- recorded key; a new or changed hash recomposes the users, as a key does.
CREATE TABLE amqp_hashes (
    nkey        TEXT PRIMARY KEY,
    hash        TEXT NOT NULL,
    recorded_at BIGINT NOT NULL
);
{{revision_triggers:amqp_hashes}}
{{kind_triggers:amqp_hashes}}

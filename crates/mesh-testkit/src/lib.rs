//! mesh-testkit: spawns real nats-server and PostgreSQL instances for tests.

//! mesh-testkit: real servers for mesh's integration tests.
//!
//! Every test that touches the bus or the store runs the real thing: a
//! `nats-server` of its own (free port, temp store, killed on drop), a
//! PostgreSQL cluster per test binary with a fresh database per test, and a
//! RabbitMQ for the tests of a mesh on AMQP. Nothing
//! here talks to a server that happens to be running on the machine.
//!
//! The binaries come from the README's commands (`scripts/test` installs them);
//! a missing binary fails naming that command.

pub mod amqp_mesh;
pub mod broker;
pub mod bus;
pub mod cluster;
mod error;
mod locate;
pub mod machines;
pub mod nats;
pub mod postgres;
mod process;
pub mod rabbitmq;
pub mod tls;

pub use amqp_mesh::AmqpMesh;
pub use broker::Broker;
pub use bus::PermissionedBus;
pub use cluster::{Cluster, free_port_run};
pub use error::TestkitError;
pub use locate::{INSTALL_HINT, nats_server_binary, postgres_bin_dir, rabbitmq_server_binary};
pub use machines::{Machine, Machines, MachinesError};
pub use nats::{NatsServer, NatsServerBuilder};
pub use postgres::{PgCluster, TestDatabase, fresh_database, shared_cluster};
pub use process::pid_alive;
pub use rabbitmq::RabbitMq;

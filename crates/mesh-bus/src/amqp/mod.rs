//! The AMQP side of the bus (RabbitMQ): connecting as a principal, the
//! management API the controller makes and changes users through, and the
//! mesh's exchange and queues. What a user may do and which queues exist is
//! `mesh-core`'s ([`mesh_core::authority::amqp`]); this carries it out.

pub mod broker;
mod connect;
pub mod management;
pub mod topology;
pub mod users;

pub use connect::{AmqpConfig, AmqpConnectError, Trust, connect};
pub use management::{Management, ManagementError};

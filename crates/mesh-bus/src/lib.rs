//! mesh-bus: the bus sides of mesh (NATS, and AMQP in [`amqp`]). It carries out what `mesh-core` decided —
//! connecting as a principal (trusting a CA, or pinning one certificate:
//! [`tls`]), asserting the JetStream objects, storing and reading artifacts
//! ([`artifacts`]) — and is the seam a second bus would sit behind.

pub mod amqp;
pub mod artifacts;
pub mod closing;
pub mod connect;
pub mod objects;
pub mod reconnect;
pub mod refusals;
pub mod renamed;
pub mod seam;
pub mod tls;

pub use closing::{CloseError, Closed, drain_and_close};
pub use connect::{
    BusConfig, ClientCredential, ConnectError, Secret, connect, connect_hearing, connect_with,
};
pub use objects::{AssertError, ServerError, assert_objects};
pub use reconnect::Reconnects;
pub use refusals::{Denied, Refusal, Refusals};
pub use tls::{CertPin, PinError, PinMismatch, fingerprint_of_pem_file, pin_mismatch};

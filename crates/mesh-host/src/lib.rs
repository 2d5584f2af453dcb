//! mesh-host: the host agent's logic (DESIGN §6): enrol once with a token,
//! then connect with its own key, bind its own consumer, take declarations,
//! and heartbeat. Applying declarations comes later.

pub mod apply;
pub mod artifacts;
pub mod backoff;
mod dial;
pub mod driver;
pub mod enrol;
pub mod health;
pub mod logs;
pub mod moved;
pub mod run;
mod run_amqp;
pub mod secrets;
pub mod spare;
pub mod state;

pub use enrol::{EnrolError, EnrolOptions, enrol};
pub use moved::{MovedError, point_at};
pub use run::{HostError, HostOptions, run};
pub use state::{HostKeys, HostState, StateError};

//! mesh-controller: the controller daemon's logic (single writer of records and of
//! JetStream definitions). Grows with the controller issue.

pub mod artifacts;
pub mod broker_address;
pub mod builds;
mod chain;
pub mod composer;
mod counters;
pub mod daemon;
pub mod genesis;
pub mod http;
mod memory;
pub mod safe_write;

pub use composer::Snapshot;
pub use composer::{
    ComposeError, Composer, ComposerConfig, ComposerStatus, Outcome, RecordSource, Reloader,
    Trigger,
};
pub use counters::{Counters, CountersView};
pub use daemon::{ControllerOptions, DaemonError};
pub use genesis::{Genesis, GenesisError, GenesisOptions};

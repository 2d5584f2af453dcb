//! mesh-controller: the controller daemon's logic (single writer of records and of
//! JetStream definitions). Grows with the controller issue.

pub mod composer;
pub mod genesis;
pub mod safe_write;

pub use composer::{
    ComposeError, Composer, ComposerConfig, ComposerStatus, Outcome, RecordSource, Reloader,
    Trigger,
};
pub use genesis::{Genesis, GenesisError, GenesisOptions};

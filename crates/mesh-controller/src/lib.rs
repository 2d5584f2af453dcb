//! mesh-controller: the controller daemon's logic (single writer of records and of
//! JetStream definitions). Grows with the controller issue.

pub mod genesis;
pub mod safe_write;

pub use genesis::{Genesis, GenesisError, GenesisOptions};

//! mesh-core: every decision mesh makes, computed as data.
//!
//! No tokio, no NATS client, no database driver may enter this crate (CI checks
//! `cargo tree -p mesh-core -e normal`): the I/O crates carry out what is
//! decided here, so every decision can be unit-tested without a server.
//!
//! # The reconcile shape
//!
//! Every daemon decision has one shape: a function here takes a snapshot of
//! the records ([`records`]) and what was observed (on the bus, in the
//! process table) and returns a plan — a `Vec` of serde steps, printable and
//! asserted on in unit tests — or a typed refusal no step could mend. The I/O
//! crate that observed has one executor that matches each step and carries
//! it out, deciding nothing; live tests assert on its effects. The first
//! instance is the JetStream assert: [`jetstream::plan`] from the wanted
//! [`jetstream::Objects`] and an [`jetstream::Observed`], executed by
//! `mesh_bus::objects`.

pub mod artifact;
pub mod artifact_fetch;
pub mod authority;
pub mod build;
pub mod bus;
pub mod catalogue;
pub mod change;
pub mod container;
pub mod declaration;
pub mod deploy;
pub mod diagnostic;
pub mod digest;
pub mod duration;
pub mod enrolment;
pub mod event;
pub mod fleet;
pub mod jetstream;
pub mod liveness;
pub mod logs;
pub mod manifest;
pub mod names;
pub mod operation;
pub mod placeholders;
pub mod records;
pub mod report;
pub mod revisions;
pub mod rollout;
pub mod sealed;
pub mod secret;
pub mod spare_keys;
pub mod store_window;
pub mod subjects;
#[cfg(test)]
mod testing;
pub mod token;
pub mod tool;
pub mod users_file;

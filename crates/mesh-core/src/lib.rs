//! mesh-core: every decision mesh makes, computed as data.
//!
//! No tokio, no NATS client, no database driver may enter this crate (CI checks
//! `cargo tree -p mesh-core -e normal`): the I/O crates carry out what is
//! decided here, so every decision can be unit-tested without a server.

pub mod authority;
pub mod catalogue;
pub mod diagnostic;
pub mod jetstream;
pub mod manifest;
pub mod names;
pub mod placeholders;
pub mod records;
pub mod secret;
pub mod subjects;
pub mod users_file;

//! mesh-sdk: what a module links to. It connects as the module's own
//! principal ([`Module::connect`]), emits and consumes events
//! ([`Module::emit`], [`Module::events`]), serves and calls tools
//! ([`Module::serve`], [`Module::call`]), and submits and takes seat work
//! ([`Module::submit`], [`Module::work`], [`Module::work_for_node`]). The wire
//! formats are public: the README's "What a module says and hears" is the
//! whole contract for a module in another language.
//!
//! # The environment a module is started with
//!
//! A host's process driver starts every module with these variables (the
//! contract; a module in another language reads the same ones):
//!
//! | variable | value |
//! |---|---|
//! | `MESH_BUS_URLS` | comma-separated broker addresses of one bus, tried in order: `tls://host:port` (NATS) or `amqps://host:port` (RabbitMQ); the addresses say which bus the mesh runs on |
//! | `MESH_BUS_PIN` | lowercase hex SHA-256 of the broker certificate's DER bytes: the module trusts exactly that certificate, as its host does (there is no CA file on a node) |
//! | `MESH_NKEY_FILE` | path of the module's NKey user seed file (`SU…`, mode 0600, made by its host); the seed never travels in the environment. On RabbitMQ the module's password is made from it ([`mesh_core::authority::amqp::password_of`]) |
//! | `MESH_INBOX_PREFIX` | the module's private inbox prefix, `_INBOX.module_<node>_<module>`: replies (a JetStream publish's acknowledgement among them) are granted there and nowhere else |
//! | `MESH_NODE` | the node's name |
//! | `MESH_MODULE` | the module's name |
//! | `MESH_READY_FILE` | where [`Module::ready`] writes that the module is ready (its `[health]` says `sdk = true`); the host removes it before each start. Optional |
//!
//! [`Module::connect`] reads them ([`ModuleEnv::from_env`]); a missing or
//! invalid one is an error naming the variable and what to set.
//!
//! # Events
//!
//! [`Module::emit`] publishes an [`EventEnvelope`] as JSON on
//! `mesh.mod.<module>.event.<event>` and returns once the bus has it: on
//! NATS the `EVENTS` stream stored it; on RabbitMQ the consumers' queues
//! took it (an event nobody consumes has no queue to wait in, and is not
//! kept). The bus lets a module publish only the events its manifest
//! declares under `[events] emits`; any other is refused by the server,
//! and `emit` says so, naming the event.
//!
//! # The bus
//!
//! Everything goes through [`mesh_bus::seam::Bus`] ([`Module::bus`]), so a
//! module runs on either bus unchanged. Where the two differ: on RabbitMQ
//! every instance serving a tool hears each call (the caller takes the
//! first answer), there is no ack timer (a delivery is held until settled,
//! [`Work::progress`] does nothing), and [`Work::hand_back`] holds the work
//! in the module's process until its delay has passed.

mod bind;
mod env;
mod error;
mod events;
mod module;
mod refusal;
mod tools;
mod work;

pub use env::*;
pub use error::SdkError;
pub use events::{Event, Events};
pub use mesh_core::event;
pub use module::Module;
pub use refusal::{Denied, ServerErrors};
pub use tools::{DEFAULT_CALL_TIMEOUT, Serving, ToolAddress, call};
pub use work::{PROGRESS_EVERY, SeatAddress, Work, WorkQueue};

/// A name the SDK was given, checked.
pub(crate) fn name(what: &'static str, value: &str) -> Result<mesh_core::names::Name, SdkError> {
    mesh_core::names::Name::new(value).map_err(|source| SdkError::BadName {
        what,
        value: value.to_string(),
        source,
    })
}

/// An error and its causes on one line: a module's last log line is what
/// its host reports, so it must carry the whole reason. A cause whose text
/// is already there is not said twice.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = c.source();
    }
    out
}

#[cfg(test)]
mod tests;

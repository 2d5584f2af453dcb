//! What the SDK reports, worded for the operator reading a module's log.

use std::path::PathBuf;
use std::time::Duration;

use mesh_bus::seam::{SeamConnectError, SeamError};
use mesh_core::event::EventError;
use mesh_core::names::{Name, NameError};

/// What went wrong, worded for the operator who reads a module's last log
/// line.
#[derive(Debug, thiserror::Error)]
pub enum SdkError {
    #[error("{var} is not set; {hint}")]
    Missing {
        var: &'static str,
        hint: &'static str,
    },
    #[error("{var} is invalid: {reason}; {hint}")]
    Invalid {
        var: &'static str,
        reason: String,
        hint: &'static str,
    },
    #[error("could not read the NKey seed file {path} (MESH_NKEY_FILE)")]
    ReadSeed {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the NKey seed file {path} (MESH_NKEY_FILE) may be read by others (mode {mode:03o}); it must be mode 0600"
    )]
    SeedMode { path: PathBuf, mode: u32 },
    #[error("could not write the ready file {path} (MESH_READY_FILE)")]
    Ready {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the file {path} (MESH_NKEY_FILE) does not hold an NKey user seed (SU…)")]
    BadSeed { path: PathBuf },
    #[error("could not connect to the bus as {principal} at {urls}")]
    Connect {
        principal: String,
        urls: String,
        // Boxed: the connect errors of both buses are large beside the rest.
        #[source]
        source: Box<SeamConnectError>,
    },
    #[error("{event:?} is not a valid event name")]
    BadEventName {
        event: String,
        #[source]
        source: NameError,
    },
    #[error("event {event:?} cannot be sent")]
    Envelope {
        event: String,
        #[source]
        source: EventError,
    },
    #[error(
        "the bus refused event {event:?} of module {module} ({subject}): the module's manifest must declare it under [events] emits"
    )]
    Refused {
        event: String,
        module: Name,
        subject: String,
    },
    #[error(
        "event {event:?} of module {module} was not acknowledged within {timeout:?} ({subject}): the module's manifest must declare it under [events] emits (a refused publish goes unanswered), and the EVENTS stream must exist"
    )]
    NoAck {
        event: String,
        module: Name,
        subject: String,
        timeout: Duration,
    },
    #[error("event {event:?} of module {module} was not stored ({subject})")]
    Publish {
        event: String,
        module: Name,
        subject: String,
        #[source]
        source: SeamError,
    },
    #[error("{value:?} is not a valid {what} name")]
    BadName {
        what: &'static str,
        value: String,
        #[source]
        source: NameError,
    },
    #[error("module {module} has no consumer {consumer} on {stream} to take from: {hint}")]
    NoConsumer {
        module: Name,
        consumer: String,
        stream: String,
        hint: &'static str,
    },
    #[error("the bus refused module {module} binding consumer {consumer} ({subject}): {hint}")]
    BindRefused {
        module: Name,
        consumer: String,
        subject: String,
        hint: &'static str,
    },
    #[error("could not bind consumer {consumer}: {reason}")]
    Bind { consumer: String, reason: String },
    #[error("a message on {subject} was terminated: {reason}")]
    Malformed { subject: String, reason: String },
    #[error("could not {what} a delivery on {subject}: {reason}")]
    Ack {
        what: &'static str,
        subject: String,
        reason: String,
    },
    #[error(
        "the bus refused module {module} serving {subject}: the manifest must declare the tool under [tools] serves, or hold the seat whose tool it is"
    )]
    ServeRefused { module: Name, subject: String },
    #[error("could not serve {subject}: {reason}")]
    Serve { subject: String, reason: String },
    #[error("{principal} may not call tool {tool} ({subject}): {hint}")]
    CallRefused {
        principal: String,
        tool: String,
        subject: String,
        hint: &'static str,
    },
    #[error(
        "nothing serves tool {tool} ({subject}): assign a module that serves it, and check it is running"
    )]
    NoServer { tool: String, subject: String },
    #[error("tool {tool} did not answer within {timeout:?} ({subject})")]
    CallTimeout {
        tool: String,
        subject: String,
        timeout: Duration,
    },
    #[error("tool {tool} answered with an error: {message}")]
    ToolFailed { tool: String, message: String },
    #[error("tool {tool} ({subject}) failed: {reason}")]
    Call {
        tool: String,
        subject: String,
        reason: String,
    },
    #[error(
        "the bus refused {kind} work for seat {seat} from module {module} ({subject}): the manifest must name the seat under [uses] seats, and the seat must accept {kind}"
    )]
    SubmitRefused {
        module: Name,
        seat: Name,
        kind: Name,
        subject: String,
    },
    #[error(
        "{kind} work for seat {seat} was not stored within {timeout:?} ({subject}): the seat must accept {kind} (its SEAT_{seat} stream exists once a module declaring it is registered), and the manifest must name the seat under [uses] seats (a refused publish goes unanswered)"
    )]
    SubmitNoAck {
        seat: Name,
        kind: Name,
        subject: String,
        timeout: Duration,
    },
    #[error("{kind} work for seat {seat} was not stored ({subject}): {reason}")]
    Submit {
        seat: Name,
        kind: Name,
        subject: String,
        reason: String,
    },
}

/// Whether the bus gave up waiting for its confirmation: on NATS, the
/// stream's acknowledgement that never came (a refused publish goes
/// unanswered).
pub(crate) fn timed_out(e: &SeamError) -> bool {
    use async_nats::jetstream::context::{PublishError, PublishErrorKind};
    match e {
        SeamError::NotConfirmed { .. } => true,
        SeamError::Nats { source, .. } => source
            .downcast_ref::<PublishError>()
            .is_some_and(|p| p.kind() == PublishErrorKind::TimedOut),
        _ => false,
    }
}

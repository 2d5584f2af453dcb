//! The bus seam (DESIGN "the bus seam"): what the daemons need of a bus,
//! one type per role with a NATS and an AMQP side, each tested against its
//! own server (`tests/seam_live.rs` runs one body on both). What a principal
//! may do and which objects exist stay `mesh-core`'s; here they are carried
//! out.
//!
//! | role | NATS | AMQP (RabbitMQ) |
//! |---|---|---|
//! | [`Bus::publish_stored`] | JetStream publish, awaited ack | publish to `mesh`, publisher confirm; mandatory, so no queue taking it is an error |
//! | [`Bus::publish`] (heartbeats) | core publish, flushed | publish to `mesh`, publisher confirm |
//! | [`Bus::consume`] | bind the push consumer | consume `mesh.queue.<consumer>` with a prefetch |
//! | [`Bus::subscribe`] | core subscription | a server-named queue bound by the subject's key |
//! | [`Bus::subscribe_shared`] | queue group | the same as [`Bus::subscribe`]: every subscriber hears each message |
//! | [`Bus::consumer_exists`] | consumer info | passive declaration of the consumer's queue |
//! | [`Bus::request`], [`Bus::respond`] | request/reply under the asker's inbox; allow_responses | the answer published to the asker's inbox key with the request's unguessable correlation id, which alone the asker takes |
//! | [`Settle`], [`Delivery::in_progress`] | ack, nak with delay, term; progress | ack; held in this process (bounded by the prefetch) and delivered again, counted here; rejected; nothing (no ack timer) |

mod amqp_side;
mod connect;
mod delivery;
mod nats_side;

use std::time::Duration;

use mesh_core::bus::BusKind;
use mesh_core::jetstream::ConsumerSpec;

pub use amqp_side::AmqpSide;
pub use connect::{SeamConnectError, amqp_config, announce, kind_of};
pub use delivery::{Deliveries, Delivery, Message, Messages, Reply, Settle};
pub use nats_side::NatsSide;

/// Why the bus did not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum SeamError {
    #[error("the bus refused to {action}: {reason}")]
    Refused { action: String, reason: String },
    #[error(
        "no queue takes {subject}: nothing of the mesh consumes it (is the consumer asserted?)"
    )]
    Unroutable { subject: String },
    #[error("no one serves {subject}")]
    NoResponders { subject: String },
    #[error("no answer on {subject} within {within:?}")]
    NoAnswer { subject: String, within: Duration },
    #[error("a message on {subject} is not a request: it names no address to answer")]
    NotARequest { subject: String },
    #[error("the bus did not confirm {action} within {within:?}")]
    NotConfirmed { action: String, within: Duration },
    #[error("could not {action}")]
    Nats {
        action: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("could not {action}")]
    Amqp {
        action: String,
        #[source]
        source: Box<lapin::Error>,
    },
}

impl SeamError {
    /// Whether the bus refused this principal the operation: AMQP's 403
    /// (`ACCESS_REFUSED`, which leads the broker's words), on the operation
    /// itself. NATS says a refusal on the connection instead, never here.
    pub fn is_access_refused(&self) -> bool {
        matches!(self, SeamError::Refused { reason, .. } if reason.starts_with("ACCESS_REFUSED"))
    }

    pub(crate) fn nats(
        action: impl Into<String>,
    ) -> impl FnOnce(Box<dyn std::error::Error + Send + Sync>) -> SeamError {
        let action = action.into();
        move |source| SeamError::Nats { action, source }
    }

    /// A lapin error: a broker's refusal (403 and the like, which close the
    /// channel) keeps the broker's own words.
    pub(crate) fn amqp(action: impl Into<String>) -> impl FnOnce(lapin::Error) -> SeamError {
        let action = action.into();
        move |source| match source.kind() {
            lapin::ErrorKind::ProtocolError(e) => SeamError::Refused {
                action,
                reason: e.get_message().to_string(),
            },
            _ => SeamError::Amqp {
                action,
                source: Box::new(source),
            },
        }
    }
}

/// How long a stored publish may wait for its confirmation.
pub const CONFIRM_WITHIN: Duration = Duration::from_secs(10);

/// One principal's connection to the mesh's bus.
pub enum Bus {
    Nats(NatsSide),
    Amqp(AmqpSide),
}

impl Bus {
    /// The NATS side, on a mesh whose bus is NATS.
    pub fn nats(&self) -> Option<&NatsSide> {
        match self {
            Bus::Nats(n) => Some(n),
            Bus::Amqp(_) => None,
        }
    }

    pub fn kind(&self) -> BusKind {
        match self {
            Bus::Nats(_) => BusKind::Nats,
            Bus::Amqp(_) => BusKind::Amqp,
        }
    }

    /// A message the bus keeps until it is consumed (declarations, reports,
    /// events, work): returns once the bus has it.
    pub async fn publish_stored(&self, subject: &str, payload: &[u8]) -> Result<(), SeamError> {
        match self {
            Bus::Nats(n) => n.publish_stored(subject, payload).await,
            Bus::Amqp(a) => a.publish(subject, payload, true).await,
        }
    }

    /// A message nobody keeps (heartbeats): handed to the bus, or an error.
    pub async fn publish(&self, subject: &str, payload: &[u8]) -> Result<(), SeamError> {
        match self {
            Bus::Nats(n) => n.publish(subject, payload).await,
            Bus::Amqp(a) => a.publish(subject, payload, false).await,
        }
    }

    /// The deliveries of one of the mesh's consumers, at most `prefetch`
    /// unsettled at a time.
    pub async fn consume(&self, c: &ConsumerSpec, prefetch: u16) -> Result<Deliveries, SeamError> {
        match self {
            Bus::Nats(n) => n.consume(c).await,
            Bus::Amqp(a) => a.consume(c, prefetch).await,
        }
    }

    /// Asks on `subject` and waits for the one answer.
    pub async fn request(
        &self,
        subject: &str,
        payload: &[u8],
        within: Duration,
    ) -> Result<Vec<u8>, SeamError> {
        match self {
            Bus::Nats(n) => n.request(subject, payload, within).await,
            Bus::Amqp(a) => a.request(subject, payload, within).await,
        }
    }

    /// Answers a request heard on a subscription.
    pub async fn respond(&self, to: &Message, payload: &[u8]) -> Result<(), SeamError> {
        let not_a_request = || SeamError::NotARequest {
            subject: to.subject.clone(),
        };
        match (self, &to.reply) {
            (Bus::Nats(n), Some(Reply::Nats(subject))) => n.publish(subject, payload).await,
            (Bus::Amqp(a), Some(Reply::Amqp { to, correlation })) => {
                a.answer(to, correlation, payload).await
            }
            _ => Err(not_a_request()),
        }
    }

    /// Closes the connection: what it subscribed to ends with it.
    pub async fn close(self) {
        match self {
            Bus::Nats(n) => {
                let _ = n.client().drain().await;
            }
            Bus::Amqp(a) => {
                let _ = a.connection().close(200, "closing".into()).await;
            }
        }
    }

    /// Resolves once the connection is no longer open and will not be
    /// again by itself: an AMQP one failed or closed by the broker (a
    /// broker stopping, a user deleted), looked at four times a second.
    /// Never on NATS, whose client reconnects.
    pub async fn lost(&self) {
        let Bus::Amqp(a) = self else {
            return std::future::pending().await;
        };
        let mut every = tokio::time::interval(std::time::Duration::from_millis(250));
        loop {
            every.tick().await;
            if !a.connection().status().connected() {
                return;
            }
        }
    }

    /// Every message on `subject` (a pattern) from now on.
    pub async fn subscribe(&self, subject: &str) -> Result<Messages, SeamError> {
        match self {
            Bus::Nats(n) => n.subscribe(subject, None).await,
            Bus::Amqp(a) => a.subscribe(subject).await,
        }
    }

    /// [`Bus::subscribe`] beside the other subscribers of `group` (a tool's
    /// instances). On NATS a queue group: one of them hears each message.
    /// On AMQP each has its own queue, so each hears every message (a
    /// shared queue would be a named one, which only the controller
    /// configures); an asker takes the first answer under its id.
    pub async fn subscribe_shared(
        &self,
        subject: &str,
        group: &str,
    ) -> Result<Messages, SeamError> {
        match self {
            Bus::Nats(n) => n.subscribe(subject, Some(group)).await,
            Bus::Amqp(a) => a.subscribe(subject).await,
        }
    }

    /// Whether the mesh's consumer `c` exists (the controller makes them),
    /// so that binding one that does not is said as such. Asked of the bus
    /// on both: consumer info on NATS, a passive declaration of its queue on
    /// AMQP (which asks no permission).
    pub async fn consumer_exists(&self, c: &ConsumerSpec) -> Result<bool, SeamError> {
        match self {
            Bus::Nats(n) => n.consumer_exists(c).await,
            Bus::Amqp(a) => a.consumer_exists(c).await,
        }
    }
}

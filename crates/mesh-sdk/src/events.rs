//! Events a module consumes: from its own consumer on `EVENTS`, created by
//! the controller with every filter the manifest's `[events] consumes`
//! implies, shared by the module's instances through its deliver group.

use mesh_bus::seam::{Delivery, Settle};
use mesh_core::event::{self, EventEnvelope};
use mesh_core::subjects::{self, STREAM_EVENTS};

use crate::bind::{Bound, bind};
use crate::{Module, SdkError};

/// The module's stream of events, oldest first: a consumer created after
/// events were published still receives them (a stream is a log).
pub struct Events {
    bound: Bound,
}

/// One event delivered; acknowledge it once handled, or it comes again:
/// on NATS after the consumer's ack wait (30 s), on AMQP once this
/// connection's consumer is gone (RabbitMQ has no ack timer).
pub struct Event {
    /// The subject it was published on (`mesh.mod.<m>.event.<e>` or
    /// `mesh.seat.<s>.event.<e>`).
    pub subject: String,
    /// The event's name: the subject's last token.
    pub name: String,
    pub envelope: EventEnvelope,
    /// Taken when acknowledged: settling consumes a delivery.
    delivery: std::sync::Mutex<Option<Delivery>>,
}

impl Module {
    /// Binds this module's consumer on `EVENTS`.
    pub async fn events(&self) -> Result<Events, SdkError> {
        let consumer = subjects::consumer::module(self.module());
        let bound = bind(
            self,
            STREAM_EVENTS,
            &consumer,
            "the manifest declares no [events] consumes, or the module is not registered and assigned",
        )
        .await?;
        Ok(Events { bound })
    }
}

impl Events {
    /// The next event. A delivery that is not an envelope, or whose
    /// envelope names another sender than its subject proves (another
    /// module than `mesh.mod.<module>`, another node than a node-scoped
    /// seat's `node.<node>`), is terminated (never redelivered) and
    /// returned as [`SdkError::Malformed`]; the stream goes on after it.
    /// `None` once the connection is closed.
    pub async fn next(&mut self) -> Option<Result<Event, SdkError>> {
        let delivery = match self.bound.next().await? {
            Ok(d) => d,
            Err(e) => return Some(Err(e)),
        };
        let subject = delivery.subject.clone();
        let envelope = event::parse(&delivery.payload).map_err(|e| e.to_string());
        let forged = envelope
            .as_ref()
            .ok()
            .and_then(|e| event::sender::contradicts(&subject, e));
        match (envelope, forged) {
            (Ok(_), Some(why)) => Some(Err(terminate(delivery, subject, why).await)),
            (Ok(envelope), None) => Some(Ok(Event {
                name: subject.rsplit('.').next().unwrap_or_default().to_string(),
                subject,
                envelope,
                delivery: std::sync::Mutex::new(Some(delivery)),
            })),
            (Err(e), _) => Some(Err(terminate(delivery, subject, e).await)),
        }
    }
}

/// Terminates a delivery that can never be handled, so it is not
/// redelivered forever, and says why.
pub(crate) async fn terminate(delivery: Delivery, subject: String, reason: String) -> SdkError {
    match delivery.settle(Settle::Terminate).await {
        Ok(()) => SdkError::Malformed { subject, reason },
        Err(e) => SdkError::Ack {
            what: "terminate",
            subject,
            reason: format!("{reason}; and terminating it failed: {}", crate::chain(&e)),
        },
    }
}

impl Event {
    /// Acknowledges the event, confirmed by the server on NATS (AMQP
    /// confirms no acknowledgement): once this returns, it will not come
    /// again. Acknowledging it again does nothing.
    pub async fn ack(&self) -> Result<(), SdkError> {
        let Some(delivery) = self.delivery.lock().unwrap().take() else {
            return Ok(());
        };
        delivery.ack_confirmed().await.map_err(|e| SdkError::Ack {
            what: "acknowledge",
            subject: self.subject.clone(),
            reason: crate::chain(&e),
        })
    }
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("consumer", &self.bound.consumer)
            .finish()
    }
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event")
            .field("subject", &self.subject)
            .field("envelope", &self.envelope)
            .finish()
    }
}

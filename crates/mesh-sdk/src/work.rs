//! Seat work: `submit` puts work on a seat's work-queue stream (`SEAT_<seat>`),
//! where it waits for a holder; `work` takes it as the seat's holder. Work
//! travels in the same envelope as events (id, submitting module and node,
//! time, payload).
//!
//! A holder acknowledges work it did, hands back work it cannot do now
//! (it comes round again after a delay), or terminates work that can never
//! be done. On NATS the worker consumer's ack wait is 30 s; long work keeps
//! its claim with progress acknowledgements ([`Work::keep_alive`]). On AMQP
//! work is held until settled (RabbitMQ has no ack timer to restart).

use std::time::Duration;

use mesh_bus::seam::{Delivery, SeamError, Settle};
use mesh_core::event::{self, EventEnvelope};
use mesh_core::jetstream::DEFAULT_ACK_WAIT_SECS;
use mesh_core::names::Name;
use mesh_core::subjects;

use crate::bind::{Bound, bind};
use crate::events::terminate;
use crate::refusal::Denied;
use crate::{Module, SdkError};

/// How often [`Work::keep_alive`] extends a claim: a third of the worker
/// consumer's ack wait, so one lost acknowledgement does not lose the work.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(DEFAULT_ACK_WAIT_SECS / 3);

/// Where work goes: a mesh-scoped seat, or one node's holder of a
/// node-scoped seat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeatAddress {
    Mesh(Name),
    Node { seat: Name, node: Name },
}

impl SeatAddress {
    pub fn mesh(seat: &str) -> Result<SeatAddress, SdkError> {
        Ok(SeatAddress::Mesh(crate::name("seat", seat)?))
    }

    pub fn node(seat: &str, node: &str) -> Result<SeatAddress, SdkError> {
        Ok(SeatAddress::Node {
            seat: crate::name("seat", seat)?,
            node: crate::name("node", node)?,
        })
    }

    pub fn seat(&self) -> &Name {
        match self {
            SeatAddress::Mesh(seat) | SeatAddress::Node { seat, .. } => seat,
        }
    }

    /// The subject `kind` work is published on.
    pub fn work_subject(&self, kind: &Name) -> String {
        match self {
            SeatAddress::Mesh(seat) => subjects::seat_work(seat, kind),
            SeatAddress::Node { seat, node } => subjects::seat_node_work(seat, node, kind),
        }
    }
}

/// The work a holder takes, oldest first.
pub struct WorkQueue {
    bound: Bound,
}

/// One piece of work; settle it with [`Work::ack`], [`Work::hand_back`] or
/// [`Work::term`]. Dropped unsettled, it comes round again after the ack
/// wait.
pub struct Work {
    /// The kind: the subject's last token.
    pub kind: String,
    pub subject: String,
    pub envelope: EventEnvelope,
    /// How many times it has been delivered (1 the first time).
    pub delivered: i64,
    delivery: Delivery,
}

impl Module {
    /// Submits `kind` work with `payload` to a seat this module uses, and
    /// returns the work's id once the seat's stream has stored it. Work for
    /// a seat nobody holds yet waits there.
    pub async fn submit(
        &self,
        seat: &SeatAddress,
        kind: &str,
        payload: serde_json::Value,
    ) -> Result<String, SdkError> {
        let kind = crate::name("work kind", kind)?;
        let subject = seat.work_subject(&kind);
        let envelope = self.envelope(payload);
        let fail = |reason: String| SdkError::Submit {
            seat: seat.seat().clone(),
            kind: kind.clone(),
            subject: subject.clone(),
            reason,
        };
        let bytes = envelope.to_json().map_err(|e| fail(e.to_string()))?;
        let refused = self.refusal(Denied::Publish, &subject);
        let refused_now = || SdkError::SubmitRefused {
            module: self.module().clone(),
            seat: seat.seat().clone(),
            kind: kind.clone(),
            subject: subject.clone(),
        };
        let no_ack = || SdkError::SubmitNoAck {
            seat: seat.seat().clone(),
            kind: kind.clone(),
            subject: subject.clone(),
            timeout: self.ack_timeout(),
        };
        let stored = self.bus().publish_stored(&subject, &bytes);
        tokio::select! {
            () = refused => Err(refused_now()),
            r = tokio::time::timeout(self.ack_timeout(), stored) => match r {
                Ok(Ok(())) => Ok(envelope.id),
                Ok(Err(e)) if e.is_access_refused() => Err(refused_now()),
                Ok(Err(e)) if crate::error::timed_out(&e) => Err(no_ack()),
                // On AMQP, work no worker queue takes (the seat's holder's
                // queue is made when the seat is registered) says so here.
                Ok(Err(e)) => Err(fail(crate::chain(&e))),
                Err(_) => Err(no_ack()),
            },
        }
    }

    /// Takes the work of mesh-scoped seat `seat`, which this module holds.
    pub async fn work(&self, seat: &str) -> Result<WorkQueue, SdkError> {
        let seat = crate::name("seat", seat)?;
        self.take(&seat, subjects::consumer::seat_worker(&seat))
            .await
    }

    /// Takes the work for this node of node-scoped seat `seat`, which this
    /// module holds: never another node's.
    pub async fn work_for_node(&self, seat: &str) -> Result<WorkQueue, SdkError> {
        let seat = crate::name("seat", seat)?;
        let consumer = subjects::consumer::seat_node_worker(&seat, self.node());
        self.take(&seat, consumer).await
    }

    async fn take(&self, seat: &Name, consumer: String) -> Result<WorkQueue, SdkError> {
        let bound = bind(
            self,
            &subjects::seat_stream(seat),
            &consumer,
            "the seat accepts no work, or is of the other scope (work for a mesh-scoped seat, work_for_node for a node-scoped one), or no module holding it is assigned here",
        )
        .await?;
        Ok(WorkQueue { bound })
    }
}

impl WorkQueue {
    /// The next piece of work. A delivery that is not an envelope is
    /// terminated and returned as [`SdkError::Malformed`].
    pub async fn next(&mut self) -> Option<Result<Work, SdkError>> {
        let delivery = match self.bound.next().await? {
            Ok(d) => d,
            Err(e) => return Some(Err(e)),
        };
        let subject = delivery.subject.clone();
        let delivered = i64::try_from(delivery.deliveries).unwrap_or(i64::MAX);
        match event::parse(&delivery.payload) {
            Ok(envelope) => Some(Ok(Work {
                kind: subject.rsplit('.').next().unwrap_or_default().to_string(),
                subject,
                envelope,
                delivered,
                delivery,
            })),
            Err(e) => Some(Err(terminate(delivery, subject, e.to_string()).await)),
        }
    }
}

impl Work {
    /// Done: confirmed by the server on NATS, so once this returns the work
    /// is gone from the queue (AMQP confirms no acknowledgement).
    pub async fn ack(self) -> Result<(), SdkError> {
        let subject = self.subject.clone();
        settled("acknowledge", subject, self.delivery.ack_confirmed().await)
    }

    /// Not now: the work comes round again after `delay` (to this holder
    /// or, if it has moved, to the next).
    pub async fn hand_back(self, delay: Duration) -> Result<(), SdkError> {
        self.settle("hand back", Settle::Retry { after: delay })
            .await
    }

    /// Never: the work is dropped and not redelivered.
    pub async fn term(self) -> Result<(), SdkError> {
        self.settle("terminate", Settle::Terminate).await
    }

    /// Still working: restarts the ack wait (nothing to restart on AMQP).
    pub async fn progress(&self) -> Result<(), SdkError> {
        let r = self.delivery.in_progress().await;
        settled("extend", self.subject.clone(), r)
    }

    async fn settle(self, what: &'static str, how: Settle) -> Result<(), SdkError> {
        let subject = self.subject.clone();
        settled(what, subject, self.delivery.settle(how).await)
    }

    /// Runs `work` while extending the claim every [`PROGRESS_EVERY`], so
    /// work longer than the ack wait is not handed to another holder
    /// meanwhile.
    pub async fn keep_alive<F: std::future::Future>(&self, work: F) -> F::Output {
        self.keep_alive_every(PROGRESS_EVERY, work).await
    }

    /// [`Work::keep_alive`] at another period (a consumer with a shorter
    /// ack wait).
    pub async fn keep_alive_every<F: std::future::Future>(
        &self,
        every: Duration,
        work: F,
    ) -> F::Output {
        tokio::pin!(work);
        let mut tick = tokio::time::interval(every);
        tick.tick().await;
        loop {
            tokio::select! {
                out = &mut work => return out,
                _ = tick.tick() => {
                    // A lost progress ack costs at most a redelivery; the
                    // work itself goes on.
                    let _ = self.progress().await;
                }
            }
        }
    }
}

fn settled(what: &'static str, subject: String, r: Result<(), SeamError>) -> Result<(), SdkError> {
    r.map_err(|e| SdkError::Ack {
        what,
        subject,
        reason: crate::chain(&e),
    })
}

impl std::fmt::Debug for WorkQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkQueue")
            .field("consumer", &self.bound.consumer)
            .finish()
    }
}

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Work")
            .field("subject", &self.subject)
            .field("delivered", &self.delivered)
            .field("envelope", &self.envelope)
            .finish()
    }
}

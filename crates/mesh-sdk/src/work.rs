//! Seat work: `submit` puts work on a seat's work-queue stream (`SEAT_<seat>`),
//! where it waits for a holder; `work` takes it as the seat's holder. Work
//! travels in the same envelope as events (id, submitting module and node,
//! time, payload).
//!
//! A holder acknowledges work it did, hands back work it cannot do now
//! (a nak with a delay: it comes round again), or terminates work that can
//! never be done. The worker consumer's ack wait is 30 s; long work keeps
//! its claim with progress acknowledgements ([`Work::keep_alive`]).

use std::time::Duration;

use async_nats::jetstream::AckKind;
use async_nats::jetstream::context::PublishErrorKind;
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
    message: async_nats::jetstream::Message,
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
        let stored = async {
            let ack = self.js().publish(subject.clone(), bytes.into()).await?;
            ack.await
        };
        tokio::select! {
            () = refused => Err(SdkError::SubmitRefused {
                module: self.module().clone(),
                seat: seat.seat().clone(),
                kind: kind.clone(),
                subject: subject.clone(),
            }),
            r = tokio::time::timeout(self.ack_timeout(), stored) => match r {
                Ok(Ok(_)) => Ok(envelope.id),
                Ok(Err(e)) if e.kind() != PublishErrorKind::TimedOut => Err(fail(crate::chain(&e))),
                Ok(Err(_)) | Err(_) => Err(SdkError::SubmitNoAck {
                    seat: seat.seat().clone(),
                    kind: kind.clone(),
                    subject: subject.clone(),
                    timeout: self.ack_timeout(),
                }),
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
        let message = match self.bound.next().await? {
            Ok(m) => m,
            Err(e) => return Some(Err(e)),
        };
        let subject = message.subject.to_string();
        let delivered = message.info().map(|i| i.delivered).unwrap_or(1);
        match event::parse(&message.payload) {
            Ok(envelope) => Some(Ok(Work {
                kind: subject.rsplit('.').next().unwrap_or_default().to_string(),
                subject,
                envelope,
                delivered,
                message,
            })),
            Err(e) => Some(Err(terminate(&message, subject, e.to_string()).await)),
        }
    }
}

impl Work {
    /// Done: confirmed by the server, so once this returns the work is gone
    /// from the queue.
    pub async fn ack(self) -> Result<(), SdkError> {
        let r = self.message.double_ack().await;
        self.settled("acknowledge", r)
    }

    /// Not now: the work comes round again after `delay` (to this holder
    /// or, if it has moved, to the next).
    pub async fn hand_back(self, delay: Duration) -> Result<(), SdkError> {
        let r = self.message.ack_with(AckKind::Nak(Some(delay))).await;
        self.settled("hand back", r)
    }

    /// Never: the work is dropped and not redelivered.
    pub async fn term(self) -> Result<(), SdkError> {
        let r = self.message.ack_with(AckKind::Term).await;
        self.settled("terminate", r)
    }

    /// Still working: restarts the ack wait.
    pub async fn progress(&self) -> Result<(), SdkError> {
        let r = self.message.ack_with(AckKind::Progress).await;
        self.settled("extend", r)
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

    fn settled(
        &self,
        what: &'static str,
        r: Result<(), async_nats::Error>,
    ) -> Result<(), SdkError> {
        r.map_err(|e| SdkError::Ack {
            what,
            subject: self.subject.clone(),
            reason: e.to_string(),
        })
    }
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

//! A delivery and how it is settled, one type for both buses: what a bus
//! lacks natively is done here (AMQP has no delayed redelivery, no delivery
//! count and no in-progress frame).

use std::time::Duration;

use futures::StreamExt as _;
use lapin::options::{BasicAckOptions, BasicRejectOptions};
use tokio::sync::mpsc;

use super::SeamError;

/// What becomes of a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Done with: the bus forgets it.
    Ack,
    /// Deliver it again, not before `after`. AMQP has no delayed redelivery:
    /// the delivery is held here, unacknowledged (so bounded by the
    /// prefetch), and handed back once `after` has passed.
    Retry { after: Duration },
    /// Never deliver it again (malformed: requeued, it would come back for
    /// ever).
    Terminate,
}

/// A delivery of one of the mesh's consumers.
pub struct Delivery {
    pub subject: String,
    pub payload: Vec<u8>,
    /// Delivered before and not acknowledged.
    pub redelivered: bool,
    /// How many times it has been delivered, this time included.
    pub deliveries: u64,
    settler: Settler,
}

enum Settler {
    // Boxed: a JetStream message is large beside an acker.
    Nats(Box<async_nats::jetstream::Message>),
    /// The acker, and where a held delivery comes back from.
    Amqp {
        acker: lapin::Acker,
        held: mpsc::UnboundedSender<Delivery>,
    },
}

impl Delivery {
    pub(crate) fn nats(m: async_nats::jetstream::Message) -> Delivery {
        let deliveries = m.info().map(|i| i.delivered.max(1) as u64).unwrap_or(1);
        Delivery {
            subject: m.subject.to_string(),
            payload: m.payload.to_vec(),
            redelivered: deliveries > 1,
            deliveries,
            settler: Settler::Nats(Box::new(m)),
        }
    }

    fn amqp(d: lapin::message::Delivery, held: mpsc::UnboundedSender<Delivery>) -> Delivery {
        Delivery {
            subject: d.routing_key.to_string(),
            payload: d.data,
            redelivered: d.redelivered,
            // RabbitMQ counts no deliveries (a classic queue); one it hands
            // out again after a broken channel is at least a second.
            deliveries: if d.redelivered { 2 } else { 1 },
            settler: Settler::Amqp {
                acker: d.acker,
                held,
            },
        }
    }

    pub async fn settle(self, how: Settle) -> Result<(), SeamError> {
        let action = || format!("settle a delivery of {} ({how:?})", self.subject);
        match &self.settler {
            Settler::Nats(m) => {
                use async_nats::jetstream::AckKind;
                let kind = match how {
                    Settle::Ack => AckKind::Ack,
                    Settle::Retry { after } => AckKind::Nak(Some(after)),
                    Settle::Terminate => AckKind::Term,
                };
                m.ack_with(kind).await.map_err(SeamError::nats(action()))
            }
            Settler::Amqp { acker, held } => match how {
                Settle::Ack => acker
                    .ack(BasicAckOptions::default())
                    .await
                    .map(drop)
                    .map_err(SeamError::amqp(action())),
                Settle::Terminate => acker
                    .reject(BasicRejectOptions { requeue: false })
                    .await
                    .map(drop)
                    .map_err(SeamError::amqp(action())),
                Settle::Retry { after } => {
                    // Held here, unacknowledged (the prefetch bounds how
                    // many), and delivered again from this process; if it
                    // stops first, the broker requeues it.
                    let held = held.clone();
                    let again = Delivery {
                        redelivered: true,
                        deliveries: self.deliveries + 1,
                        ..self
                    };
                    tokio::spawn(async move {
                        tokio::time::sleep(after).await;
                        let _ = held.send(again);
                    });
                    Ok(())
                }
            },
        }
    }

    /// Acknowledged, and on NATS the server's confirmation awaited (a
    /// double ack: it never comes for a message the stream no longer holds,
    /// so a caller bounds the wait). AMQP 0-9-1 confirms no ack.
    pub async fn ack_confirmed(self) -> Result<(), SeamError> {
        match &self.settler {
            Settler::Nats(m) => m.double_ack().await.map_err(SeamError::nats(format!(
                "acknowledge a delivery of {}",
                self.subject
            ))),
            Settler::Amqp { .. } => self.settle(Settle::Ack).await,
        }
    }

    /// Still being worked on: NATS restarts its ack timer; RabbitMQ has none
    /// to restart (its consumer timeout is the broker's setting).
    pub async fn in_progress(&self) -> Result<(), SeamError> {
        match &self.settler {
            Settler::Nats(m) => m
                .ack_with(async_nats::jetstream::AckKind::Progress)
                .await
                .map_err(SeamError::nats(format!(
                    "say a delivery of {} is in progress",
                    self.subject
                ))),
            Settler::Amqp { .. } => Ok(()),
        }
    }
}

/// The deliveries of one consumer.
pub enum Deliveries {
    Nats(Box<async_nats::jetstream::consumer::push::Messages>),
    Amqp {
        consumer: lapin::Consumer,
        held_tx: mpsc::UnboundedSender<Delivery>,
        held_rx: mpsc::UnboundedReceiver<Delivery>,
    },
}

impl Deliveries {
    pub(crate) fn amqp(consumer: lapin::Consumer) -> Deliveries {
        let (held_tx, held_rx) = mpsc::unbounded_channel();
        Deliveries::Amqp {
            consumer,
            held_tx,
            held_rx,
        }
    }

    /// The next delivery; `None` once the bus ended the stream (bind again).
    pub async fn next(&mut self) -> Option<Result<Delivery, SeamError>> {
        match self {
            Deliveries::Nats(m) => {
                Some(
                    m.next()
                        .await?
                        .map(Delivery::nats)
                        .map_err(|e| SeamError::Nats {
                            action: "take a delivery".into(),
                            source: Box::new(e),
                        }),
                )
            }
            Deliveries::Amqp {
                consumer,
                held_tx,
                held_rx,
            } => tokio::select! {
                Some(again) = held_rx.recv() => Some(Ok(again)),
                d = consumer.next() => Some(
                    d?.map(|d| Delivery::amqp(d, held_tx.clone()))
                        .map_err(SeamError::amqp("take a delivery")),
                ),
            },
        }
    }
}

/// A message of a subscription: nothing to settle.
#[derive(Debug, Clone)]
pub struct Message {
    pub subject: String,
    pub payload: Vec<u8>,
    /// Where a request wants its answer ([`super::Bus::respond`]).
    pub reply: Option<Reply>,
    /// On AMQP, the id an answer is taken under.
    pub(crate) correlation: Option<String>,
}

/// The address of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The asker's reply subject (allow_responses admits one answer there).
    Nats(String),
    /// The asker's inbox key and the id it takes an answer under.
    Amqp { to: String, correlation: String },
}

/// The messages of a subscription.
pub enum Messages {
    Nats(async_nats::Subscriber),
    Amqp(lapin::Consumer),
}

impl Messages {
    pub async fn next(&mut self) -> Option<Result<Message, SeamError>> {
        match self {
            Messages::Nats(s) => s.next().await.map(|m| {
                Ok(Message {
                    subject: m.subject.to_string(),
                    payload: m.payload.to_vec(),
                    reply: m.reply.map(|r| Reply::Nats(r.to_string())),
                    correlation: None,
                })
            }),
            Messages::Amqp(c) => Some(
                c.next()
                    .await?
                    .map(|d| {
                        let p = &d.properties;
                        let reply = p.reply_to().as_ref().zip(p.correlation_id().as_ref()).map(
                            |(to, id)| Reply::Amqp {
                                to: to.to_string(),
                                correlation: id.to_string(),
                            },
                        );
                        Message {
                            subject: d.routing_key.to_string(),
                            payload: d.data,
                            reply,
                            correlation: p.correlation_id().as_ref().map(|c| c.to_string()),
                        }
                    })
                    .map_err(SeamError::amqp("take a message")),
            ),
        }
    }
}

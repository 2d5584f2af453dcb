//! The seam's AMQP side: every publish goes to the mesh's one topic exchange
//! on a confirming channel; a consumer's deliveries come from its queue; a
//! subscription is a server-named queue of this connection's, bound by the
//! subject's key (what `amqp::render` grants).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection};
use mesh_core::authority::amqp::{self, EXCHANGE};
use mesh_core::jetstream::ConsumerSpec;

use tokio::sync::oneshot;

use super::{CONFIRM_WITHIN, Deliveries, Messages, SeamError};

/// 128 random bits, hex: an inbox's and an answer's id, which no one else
/// can guess (an answerer may write into any inbox on AMQP; the asker takes
/// only this id).
fn random_token() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

pub struct AmqpSide {
    conn: Arc<Connection>,
    principal: String,
    /// `_INBOX.<principal>` unless told otherwise (an enrolment's is
    /// `_INBOX.enrol.<node>`).
    inbox_prefix: String,
    /// Confirming; a refusal closes a channel, so it is opened again.
    publisher: tokio::sync::Mutex<Option<Channel>>,
    inbox: tokio::sync::OnceCell<Inbox>,
}

/// This connection's inbox: a queue bound under the principal's inbox key,
/// and the askers waiting for an answer, by the id each sent.
struct Inbox {
    prefix: String,
    waiting: Arc<Mutex<HashMap<String, oneshot::Sender<Vec<u8>>>>>,
    next: AtomicU64,
}

impl AmqpSide {
    /// `principal`: whose connection it is (its inbox is `_INBOX.<principal>`).
    pub fn new(conn: Connection, principal: &str) -> AmqpSide {
        AmqpSide {
            conn: Arc::new(conn),
            principal: principal.to_string(),
            inbox_prefix: mesh_core::subjects::inbox_prefix(principal),
            publisher: tokio::sync::Mutex::new(None),
            inbox: tokio::sync::OnceCell::new(),
        }
    }

    /// Asks under `prefix` instead of the principal's own inbox.
    pub fn with_inbox_prefix(mut self, prefix: &str) -> AmqpSide {
        self.inbox_prefix = prefix.to_string();
        self
    }

    pub fn principal(&self) -> &str {
        &self.principal
    }

    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// The connection, shared: for whoever opens channels of its own on it
    /// (the controller declaring the mesh's queues).
    pub fn shared_connection(&self) -> Arc<Connection> {
        self.conn.clone()
    }

    async fn channel(&self, action: &str) -> Result<Channel, SeamError> {
        self.conn
            .create_channel()
            .await
            .map_err(SeamError::amqp(format!("open a channel to {action}")))
    }

    /// Published and confirmed. `stored`: mandatory, so a message no queue
    /// takes comes back and is an error, not a silent loss.
    pub(super) async fn publish(
        &self,
        subject: &str,
        payload: &[u8],
        stored: bool,
    ) -> Result<(), SeamError> {
        // Persistent: a kept message survives a broker restart.
        let props = BasicProperties::default().with_delivery_mode(if stored { 2 } else { 1 });
        self.publish_with(subject, payload, stored, props).await
    }

    async fn publish_with(
        &self,
        subject: &str,
        payload: &[u8],
        mandatory: bool,
        props: BasicProperties,
    ) -> Result<(), SeamError> {
        let action = || format!("publish on {subject}");
        let mut slot = self.publisher.lock().await;
        let ch = match slot.as_ref().filter(|c| c.status().connected()) {
            Some(c) => c.clone(),
            None => {
                let c = self.channel(&action()).await?;
                c.confirm_select(ConfirmSelectOptions::default())
                    .await
                    .map_err(SeamError::amqp(action()))?;
                *slot = Some(c.clone());
                c
            }
        };
        let confirm = ch
            .basic_publish(
                EXCHANGE.into(),
                subject.into(),
                BasicPublishOptions {
                    mandatory,
                    ..BasicPublishOptions::default()
                },
                payload,
                props,
            )
            .await
            .map_err(SeamError::amqp(action()))?;
        drop(slot);
        let confirmation = match tokio::time::timeout(CONFIRM_WITHIN, confirm).await {
            Ok(r) => r.map_err(SeamError::amqp(action()))?,
            Err(_) => {
                return Err(SeamError::NotConfirmed {
                    action: action(),
                    within: CONFIRM_WITHIN,
                });
            }
        };
        let acked = confirmation.is_ack();
        if confirmation.take_message().is_some() {
            return Err(SeamError::Unroutable {
                subject: subject.to_string(),
            });
        }
        if !acked {
            return Err(SeamError::Refused {
                action: action(),
                reason: "the broker did not take it (nack)".into(),
            });
        }
        Ok(())
    }

    async fn inbox(&self) -> Result<&Inbox, SeamError> {
        self.inbox
            .get_or_try_init(|| async {
                let prefix = format!("{}.{}", self.inbox_prefix, random_token());
                let mut answers = self.subscribe(&format!("{prefix}.*")).await?;
                let waiting: Arc<Mutex<HashMap<String, oneshot::Sender<Vec<u8>>>>> = Arc::default();
                let route = waiting.clone();
                tokio::spawn(async move {
                    while let Some(Ok(m)) = answers.next().await {
                        // Only the answer to an id this side sent is taken:
                        // anything else in the inbox is dropped.
                        let asker = m
                            .correlation
                            .as_ref()
                            .and_then(|id| route.lock().unwrap().remove(id));
                        if let Some(tx) = asker {
                            let _ = tx.send(m.payload);
                        }
                    }
                });
                Ok(Inbox {
                    prefix,
                    waiting,
                    next: AtomicU64::new(0),
                })
            })
            .await
    }

    pub(super) async fn request(
        &self,
        subject: &str,
        payload: &[u8],
        within: Duration,
    ) -> Result<Vec<u8>, SeamError> {
        let inbox = self.inbox().await?;
        let id = random_token();
        let n = inbox.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        inbox.waiting.lock().unwrap().insert(id.clone(), tx);
        let props = BasicProperties::default()
            .with_reply_to(format!("{}.{n}", inbox.prefix).into())
            .with_correlation_id(id.as_str().into())
            // A request no one took in time is not answered late.
            .with_expiration(within.as_millis().to_string().into());
        let asked = match self.publish_with(subject, payload, true, props).await {
            Err(SeamError::Unroutable { .. }) => Err(SeamError::NoResponders {
                subject: subject.to_string(),
            }),
            other => other,
        };
        let answer = match asked {
            Ok(()) => match tokio::time::timeout(within, rx).await {
                Ok(Ok(a)) => Ok(a),
                _ => Err(SeamError::NoAnswer {
                    subject: subject.to_string(),
                    within,
                }),
            },
            Err(e) => Err(e),
        };
        inbox.waiting.lock().unwrap().remove(&id);
        answer
    }

    pub(super) async fn answer(
        &self,
        to: &str,
        correlation: &str,
        payload: &[u8],
    ) -> Result<(), SeamError> {
        let props = BasicProperties::default().with_correlation_id(correlation.into());
        self.publish_with(to, payload, false, props).await
    }

    pub(super) async fn consume(
        &self,
        c: &ConsumerSpec,
        prefetch: u16,
    ) -> Result<Deliveries, SeamError> {
        let queue = amqp::queue(c);
        let action = format!("consume {queue}");
        let ch = self.channel(&action).await?;
        ch.basic_qos(prefetch, BasicQosOptions::default())
            .await
            .map_err(SeamError::amqp(action.clone()))?;
        let consumer = ch
            .basic_consume(
                queue.as_str().into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(SeamError::amqp(action))?;
        Ok(Deliveries::amqp(consumer))
    }

    pub(super) async fn consumer_exists(&self, c: &ConsumerSpec) -> Result<bool, SeamError> {
        let queue = amqp::queue(c);
        let action = format!("look up {queue}");
        // Its own channel: a missing queue is a 404, which closes it.
        let ch = self.channel(&action).await?;
        let declared = ch
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await;
        match declared {
            Ok(_) => {
                let _ = ch.close(200, "looked up".into()).await;
                Ok(true)
            }
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(SeamError::amqp(action)(e)),
        }
    }

    pub(super) async fn subscribe(&self, subject: &str) -> Result<Messages, SeamError> {
        let action = format!("subscribe to {subject}");
        let ch = self.channel(&action).await?;
        let q = ch
            .queue_declare(
                "".into(),
                QueueDeclareOptions {
                    exclusive: true,
                    auto_delete: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(SeamError::amqp(action.clone()))?;
        ch.queue_bind(
            q.name().clone(),
            EXCHANGE.into(),
            amqp::binding_key(subject).as_str().into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(SeamError::amqp(action.clone()))?;
        let consumer = ch
            .basic_consume(
                q.name().clone(),
                "".into(),
                BasicConsumeOptions {
                    no_ack: true,
                    ..BasicConsumeOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(SeamError::amqp(action))?;
        Ok(Messages::Amqp(consumer))
    }
}

/// The broker's 404: the object named does not exist.
fn is_not_found(e: &lapin::Error) -> bool {
    use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
    matches!(e.kind(), lapin::ErrorKind::ProtocolError(p)
        if *p.kind() == AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND))
}

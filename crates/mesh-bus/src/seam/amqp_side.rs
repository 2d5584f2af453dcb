//! The seam's AMQP side: every publish goes to the mesh's one topic exchange
//! on a confirming channel; a consumer's deliveries come from its queue; a
//! subscription is a server-named queue of this connection's, bound by the
//! subject's key (what `amqp::render` grants).

use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection};
use mesh_core::authority::amqp::{self, EXCHANGE};
use mesh_core::jetstream::ConsumerSpec;

use super::{CONFIRM_WITHIN, Deliveries, Messages, SeamError};

pub struct AmqpSide {
    conn: Connection,
    /// Confirming; a refusal closes a channel, so it is opened again.
    publisher: tokio::sync::Mutex<Option<Channel>>,
}

impl AmqpSide {
    pub fn new(conn: Connection) -> AmqpSide {
        AmqpSide {
            conn,
            publisher: tokio::sync::Mutex::new(None),
        }
    }

    pub fn connection(&self) -> &Connection {
        &self.conn
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
                    mandatory: stored,
                    ..BasicPublishOptions::default()
                },
                payload,
                // Persistent: a kept message survives a broker restart.
                BasicProperties::default().with_delivery_mode(if stored { 2 } else { 1 }),
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
        Ok(Deliveries::Amqp(consumer))
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

//! The mesh's exchange and queues on RabbitMQ, declared by the controller
//! (the one principal that may configure) as [`mesh_core::authority::amqp`]
//! renders them. Declaring is idempotent: the same arguments again are
//! accepted, different ones are refused by the server (406), naming the queue.

use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Channel, ExchangeKind};
use mesh_core::authority::amqp::{EXCHANGE, QueueSpec};

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("could not declare the exchange {EXCHANGE}")]
    Exchange(#[source] lapin::Error),
    #[error("could not declare queue {queue}")]
    Queue {
        queue: String,
        #[source]
        source: lapin::Error,
    },
    #[error("could not bind queue {queue} to {key}")]
    Bind {
        queue: String,
        key: String,
        #[source]
        source: lapin::Error,
    },
}

/// The arguments a queue is declared with, from its spec.
pub fn arguments(q: &QueueSpec) -> FieldTable {
    let mut t = FieldTable::default();
    // Classic, said explicitly: a server defaulting to quorum queues would
    // dead-letter after its delivery limit, which the store window owns.
    t.insert(
        ShortString::from("x-queue-type"),
        AMQPValue::LongString("classic".into()),
    );
    if let Some(n) = q.max_length {
        t.insert(ShortString::from("x-max-length"), AMQPValue::LongLongInt(n));
        t.insert(
            ShortString::from("x-overflow"),
            AMQPValue::LongString("drop-head".into()),
        );
    }
    if let Some(secs) = q.max_age_secs {
        let ms = i64::try_from(secs.saturating_mul(1000)).unwrap_or(i64::MAX);
        t.insert(
            ShortString::from("x-message-ttl"),
            AMQPValue::LongLongInt(ms),
        );
    }
    t
}

/// Declares the exchange, then each queue and its bindings.
pub async fn declare(channel: &Channel, queues: &[QueueSpec]) -> Result<(), TopologyError> {
    channel
        .exchange_declare(
            EXCHANGE.into(),
            ExchangeKind::Topic,
            ExchangeDeclareOptions {
                durable: true,
                ..ExchangeDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .map_err(TopologyError::Exchange)?;
    for q in queues {
        channel
            .queue_declare(
                q.name.as_str().into(),
                QueueDeclareOptions {
                    durable: true,
                    ..QueueDeclareOptions::default()
                },
                arguments(q),
            )
            .await
            .map_err(|source| TopologyError::Queue {
                queue: q.name.clone(),
                source,
            })?;
        for key in &q.bindings {
            channel
                .queue_bind(
                    q.name.as_str().into(),
                    EXCHANGE.into(),
                    key.as_str().into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await
                .map_err(|source| TopologyError::Bind {
                    queue: q.name.clone(),
                    key: key.clone(),
                    source,
                })?;
        }
    }
    Ok(())
}

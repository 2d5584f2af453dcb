//! The seam's NATS side: JetStream for what is kept, core NATS for the rest.

use async_nats::Client;
use async_nats::jetstream::{self, consumer::push};
use mesh_core::jetstream::ConsumerSpec;

use super::{CONFIRM_WITHIN, Deliveries, Messages, SeamError};

pub struct NatsSide {
    client: Client,
    js: jetstream::Context,
}

impl NatsSide {
    pub fn new(client: Client) -> NatsSide {
        let js = jetstream::new(client.clone());
        NatsSide { client, js }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// JetStream on this connection: what only NATS has (streams read
    /// back, the object store).
    pub fn js(&self) -> &jetstream::Context {
        &self.js
    }

    pub(super) async fn consumer_exists(&self, c: &ConsumerSpec) -> Result<bool, SeamError> {
        use async_nats::jetstream::ErrorCode;
        use async_nats::jetstream::stream::ConsumerErrorKind;
        let asked = self
            .js
            .get_consumer_from_stream::<push::Config, _, _>(&c.name, &c.stream)
            .await;
        match asked {
            Ok(_) => Ok(true),
            // A consumer cannot outlive its stream: a missing stream is a
            // missing consumer too.
            Err(e)
                if matches!(e.kind(), ConsumerErrorKind::JetStream(j)
                    if [ErrorCode::CONSUMER_NOT_FOUND, ErrorCode::STREAM_NOT_FOUND]
                        .contains(&j.error_code())) =>
            {
                Ok(false)
            }
            Err(e) => Err(SeamError::nats(format!(
                "look up consumer {} on {}",
                c.name, c.stream
            ))(Box::new(e))),
        }
    }

    pub(super) async fn publish_stored(
        &self,
        subject: &str,
        payload: &[u8],
    ) -> Result<(), SeamError> {
        let action = || format!("store a message on {subject}");
        let ack = self
            .js
            .publish(subject.to_string(), payload.to_vec().into())
            .await
            .map_err(|e| SeamError::nats(action())(Box::new(e)))?;
        match tokio::time::timeout(CONFIRM_WITHIN, ack).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(SeamError::nats(action())(Box::new(e))),
            Err(_) => Err(SeamError::NotConfirmed {
                action: action(),
                within: CONFIRM_WITHIN,
            }),
        }
    }

    /// Handed to the client, which writes it out at once (no flush waited
    /// for: a heartbeat while the broker is away must not stall its loop).
    pub(super) async fn publish(&self, subject: &str, payload: &[u8]) -> Result<(), SeamError> {
        self.client
            .publish(subject.to_string(), payload.to_vec().into())
            .await
            .map_err(|e| SeamError::nats(format!("publish on {subject}"))(Box::new(e)))
    }

    pub(super) async fn request(
        &self,
        subject: &str,
        payload: &[u8],
        within: std::time::Duration,
    ) -> Result<Vec<u8>, SeamError> {
        use async_nats::RequestErrorKind;
        let asked = self
            .client
            .send_request(
                subject.to_string(),
                async_nats::Request::new()
                    .payload(payload.to_vec().into())
                    .timeout(Some(within)),
            )
            .await;
        match asked {
            Ok(m) => Ok(m.payload.to_vec()),
            Err(e) => match e.kind() {
                RequestErrorKind::NoResponders => Err(SeamError::NoResponders {
                    subject: subject.to_string(),
                }),
                RequestErrorKind::TimedOut => Err(SeamError::NoAnswer {
                    subject: subject.to_string(),
                    within,
                }),
                _ => Err(SeamError::nats(format!("ask on {subject}"))(Box::new(e))),
            },
        }
    }

    pub(super) async fn consume(&self, c: &ConsumerSpec) -> Result<Deliveries, SeamError> {
        let action = || format!("bind consumer {} on {}", c.name, c.stream);
        let consumer = self
            .js
            .get_consumer_from_stream::<push::Config, _, _>(&c.name, &c.stream)
            .await
            .map_err(|e| SeamError::nats(action())(Box::new(e)))?;
        let messages = consumer
            .messages()
            .await
            .map_err(|e| SeamError::nats(action())(Box::new(e)))?;
        Ok(Deliveries::Nats(Box::new(messages)))
    }

    pub(super) async fn subscribe(
        &self,
        subject: &str,
        group: Option<&str>,
    ) -> Result<Messages, SeamError> {
        let action = || format!("subscribe to {subject}");
        let subscribed = match group {
            Some(g) => {
                self.client
                    .queue_subscribe(subject.to_string(), g.to_string())
                    .await
            }
            None => self.client.subscribe(subject.to_string()).await,
        };
        let s = subscribed.map_err(|e| SeamError::nats(action())(Box::new(e)))?;
        // Written to the server before this returns; it takes the SUB in
        // order with this connection's later messages, but another
        // connection's publish may come first (async-nats's flush does not
        // wait for the server). AMQP's bind-ok does.
        self.client
            .flush()
            .await
            .map_err(|e| SeamError::nats(action())(Box::new(e)))?;
        Ok(Messages::Nats(s))
    }
}

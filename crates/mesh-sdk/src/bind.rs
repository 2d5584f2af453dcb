//! Binding a durable push consumer the controller made: the one way events
//! and seat work reach a module.

use async_nats::jetstream::consumer::push;
use futures::StreamExt as _;
use mesh_core::subjects;

use crate::refusal::Denied;
use crate::{Module, SdkError};

/// A bound consumer's deliveries.
pub(crate) struct Bound {
    pub consumer: String,
    messages: push::Messages,
}

impl Bound {
    pub async fn next(&mut self) -> Option<Result<async_nats::jetstream::Message, SdkError>> {
        let consumer = &self.consumer;
        self.messages.next().await.map(|r| {
            r.map_err(|e| SdkError::Bind {
                consumer: consumer.clone(),
                reason: e.to_string(),
            })
        })
    }
}

/// Binds `consumer` of `stream` by name with the consumer's own
/// configuration: its filters, its deliver group. A narrower filter asked
/// for here would be refused by the server ("subject does not match
/// consumer"), and one subscriber outside the group would take every
/// delivery alone.
pub(crate) async fn bind(
    module: &Module,
    stream: &str,
    consumer: &str,
    missing_hint: &'static str,
) -> Result<Bound, SdkError> {
    let info = subjects::js_consumer_info(stream, consumer);
    let refused = module.refusal(Denied::Publish, &info);
    let looked_up = module
        .js()
        .get_consumer_from_stream::<push::Config, _, _>(consumer, stream);
    let found = tokio::select! {
        () = refused => {
            return Err(SdkError::BindRefused {
                module: module.module().clone(),
                consumer: consumer.to_string(),
                subject: info,
                hint: "the manifest must declare what this consumer takes (consumes, or a seat it holds), and the module must be assigned to this node",
            })
        }
        r = looked_up => r,
    };
    let c = match found {
        Ok(c) => c,
        Err(e) if e.to_string().to_lowercase().contains("consumer not found") => {
            return Err(SdkError::NoConsumer {
                module: module.module().clone(),
                consumer: consumer.to_string(),
                stream: stream.to_string(),
                hint: missing_hint,
            });
        }
        Err(e) => {
            return Err(SdkError::Bind {
                consumer: consumer.to_string(),
                reason: crate::chain(&e),
            });
        }
    };
    let messages = c.messages().await.map_err(|e| SdkError::Bind {
        consumer: consumer.to_string(),
        reason: crate::chain(&e),
    })?;
    Ok(Bound {
        consumer: consumer.to_string(),
        messages,
    })
}

//! Binding a consumer the controller made: the one way events and seat work
//! reach a module.

use mesh_bus::seam::{Deliveries, Delivery};
use mesh_core::jetstream::ConsumerSpec;

use crate::refusal::Denied;
use crate::{Module, SdkError};

/// How many deliveries a module holds unsettled at a time on AMQP (work it
/// handed back among them); NATS's consumer says its own.
const PREFETCH: u16 = 32;

/// A bound consumer's deliveries.
pub(crate) struct Bound {
    pub consumer: String,
    deliveries: Deliveries,
}

impl Bound {
    pub async fn next(&mut self) -> Option<Result<Delivery, SdkError>> {
        let consumer = &self.consumer;
        self.deliveries.next().await.map(|r| {
            r.map_err(|e| SdkError::Bind {
                consumer: consumer.clone(),
                reason: crate::chain(&e),
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
    let spec = ConsumerSpec::to_bind(stream, consumer);
    let info = spec.info_subject();
    let refused_now = || SdkError::BindRefused {
        module: module.module().clone(),
        consumer: consumer.to_string(),
        subject: info.clone(),
        hint: "the manifest must declare what this consumer takes (consumes, or a seat it holds), and the module must be assigned to this node",
    };
    let refused = module.refusal(Denied::Publish, &info);
    let bound = async {
        if !module.bus().consumer_exists(&spec).await? {
            return Ok(None);
        }
        module.bus().consume(&spec, PREFETCH).await.map(Some)
    };
    let found = tokio::select! {
        () = refused => return Err(refused_now()),
        r = bound => r,
    };
    match found {
        Ok(Some(deliveries)) => Ok(Bound {
            consumer: consumer.to_string(),
            deliveries,
        }),
        Ok(None) => Err(SdkError::NoConsumer {
            module: module.module().clone(),
            consumer: consumer.to_string(),
            stream: stream.to_string(),
            hint: missing_hint,
        }),
        // AMQP refuses reading another's queue on the operation itself.
        Err(e) if e.is_access_refused() => Err(refused_now()),
        Err(e) => Err(SdkError::Bind {
            consumer: consumer.to_string(),
            reason: crate::chain(&e),
        }),
    }
}

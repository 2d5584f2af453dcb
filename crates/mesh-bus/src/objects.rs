//! Asserting the JetStream objects on the server: observe what it holds,
//! let `mesh_core::jetstream::plan` decide, execute each step as it is. On
//! every controller start, streams before consumers: a mesh restored from a
//! backup has records and no objects, and a node whose consumer is missing
//! hears nothing while everything else about it looks correct.

use std::time::Duration;

use async_nats::jetstream::consumer::{self, AckPolicy, DeliverPolicy};
use async_nats::jetstream::context::{
    ConsumerInfoError, ConsumerInfoErrorKind, CreateStreamError, GetStreamError, GetStreamErrorKind,
};
use async_nats::jetstream::stream::{self, ConsumerError, ConsumerUpdateError, RetentionPolicy};
use async_nats::jetstream::{Context, ErrorCode};
use mesh_core::jetstream::{
    ConsumerSpec, ObjectStep, Objects, Observed, ObservedConsumer, ObservedStream, PlanError,
    Retention, StreamSpec, plan,
};

/// Why an assert did not complete. [`AssertError::Refused`] is an answer
/// (retrying changes nothing until an operator acts); [`AssertError::Server`]
/// is a call that failed and may succeed later.
#[derive(Debug, thiserror::Error)]
pub enum AssertError {
    #[error(transparent)]
    Refused(#[from] PlanError),
    #[error("could not {action} {object}")]
    Server {
        action: &'static str,
        object: String,
        #[source]
        source: ServerError,
    },
}

/// The server call that failed, typed as the client reports it.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    GetStream(#[from] GetStreamError),
    #[error(transparent)]
    StreamInfo(#[from] async_nats::jetstream::context::RequestError),
    #[error(transparent)]
    // Creating and updating a stream fail with one error type.
    StreamWrite(#[from] CreateStreamError),
    #[error(transparent)]
    ConsumerInfo(#[from] ConsumerInfoError),
    #[error(transparent)]
    Consumer(#[from] ConsumerError),
    #[error(transparent)]
    ConsumerUpdate(#[from] ConsumerUpdateError),
}

fn server_err<E: Into<ServerError>>(
    action: &'static str,
    object: String,
) -> impl FnOnce(E) -> AssertError {
    move |e| AssertError::Server {
        action,
        object,
        source: e.into(),
    }
}

/// Observes, plans and executes: the steps it carried out, in order (none
/// when the server already agreed).
pub async fn assert_objects(
    js: &Context,
    objects: &Objects,
) -> Result<Vec<ObjectStep>, AssertError> {
    let observed = observe(js, objects).await?;
    let steps = plan(objects, &observed)?;
    for step in &steps {
        execute(js, step).await?;
    }
    Ok(steps)
}

pub(crate) fn is_not_found(e: &GetStreamError) -> bool {
    matches!(e.kind(), GetStreamErrorKind::JetStream(ref j)
        if j.error_code() == ErrorCode::STREAM_NOT_FOUND)
}

/// Reads what the server holds of every stream and consumer `objects` names.
pub async fn observe(js: &Context, objects: &Objects) -> Result<Observed, AssertError> {
    let mut observed = Observed::default();
    let mut names: Vec<&str> = objects.streams.iter().map(|s| s.name.as_str()).collect();
    names.extend(objects.consumers.iter().map(|c| c.stream.as_str()));
    names.sort_unstable();
    names.dedup();
    for name in names {
        let label = format!("stream {name}");
        let mut stream = match js.get_stream(name).await {
            Ok(s) => s,
            Err(e) if is_not_found(&e) => continue,
            Err(e) => return Err(server_err("read", label)(e)),
        };
        let info = stream.info().await.map_err(server_err("read", label))?;
        let c = &info.config;
        observed.streams.insert(
            name.to_string(),
            ObservedStream {
                subjects: c.subjects.clone(),
                retention: match c.retention {
                    RetentionPolicy::Limits => Some(Retention::Limits),
                    RetentionPolicy::WorkQueue => Some(Retention::WorkQueue),
                    RetentionPolicy::Interest => None,
                },
                max_msgs_per_subject: (c.max_messages_per_subject >= 0)
                    .then_some(c.max_messages_per_subject),
                max_age_secs: (!c.max_age.is_zero()).then_some(c.max_age.as_secs()),
                replicas: c.num_replicas.max(1),
            },
        );
    }
    for spec in &objects.consumers {
        if !observed.streams.contains_key(&spec.stream) {
            continue;
        }
        let label = format!("consumer {} on {}", spec.name, spec.stream);
        let stream = js
            .get_stream_no_info(&spec.stream)
            .await
            .map_err(server_err("reach the stream of", label.clone()))?;
        let info = match stream.consumer_info(&spec.name).await {
            Ok(info) => info,
            Err(e)
                if matches!(
                    e.kind(),
                    ConsumerInfoErrorKind::NotFound | ConsumerInfoErrorKind::StreamNotFound
                ) =>
            {
                continue;
            }
            Err(e) => return Err(server_err("read", label)(e)),
        };
        let c = &info.config;
        let mut filters = c.filter_subjects.clone();
        if !c.filter_subject.is_empty() {
            filters.push(c.filter_subject.clone());
        }
        observed.consumers.insert(
            (spec.stream.clone(), spec.name.clone()),
            ObservedConsumer {
                deliver_subject: c.deliver_subject.clone(),
                deliver_group: c.deliver_group.clone(),
                filter_subjects: filters,
                ack_wait_secs: c.ack_wait.as_secs(),
                max_deliver: (c.max_deliver > 0).then_some(c.max_deliver),
                explicit_ack: c.ack_policy == AckPolicy::Explicit,
            },
        );
    }
    Ok(observed)
}

/// Carries out one step exactly as planned.
pub async fn execute(js: &Context, step: &ObjectStep) -> Result<(), AssertError> {
    let label = step.object();
    match step {
        ObjectStep::CreateStream { spec } => {
            js.create_stream(stream_config(spec))
                .await
                .map_err(server_err("create", label))?;
        }
        ObjectStep::UpdateStream { spec, .. } => {
            js.update_stream(stream_config(spec))
                .await
                .map_err(server_err("update", label))?;
        }
        ObjectStep::CreateConsumer { spec } | ObjectStep::UpdateConsumer { spec, .. } => {
            let stream = js
                .get_stream_no_info(&spec.stream)
                .await
                .map_err(server_err("reach the stream of", label.clone()))?;
            let config = consumer_config(spec);
            if step.is_create() {
                stream
                    .create_consumer(config)
                    .await
                    .map_err(server_err("create", label))?;
            } else {
                stream
                    .update_consumer(config)
                    .await
                    .map_err(server_err("update", label))?;
            }
        }
    }
    Ok(())
}

fn stream_config(s: &StreamSpec) -> stream::Config {
    stream::Config {
        name: s.name.clone(),
        subjects: s.subjects.clone(),
        retention: match s.retention {
            Retention::Limits => RetentionPolicy::Limits,
            Retention::WorkQueue => RetentionPolicy::WorkQueue,
        },
        max_messages_per_subject: s.max_msgs_per_subject.unwrap_or(-1),
        max_age: std::time::Duration::from_secs(s.max_age_secs.unwrap_or(0)),
        num_replicas: s.replicas.max(1),
        ..Default::default()
    }
}

fn consumer_config(c: &ConsumerSpec) -> consumer::push::Config {
    let (filter_subject, filter_subjects) = match c.filter_subjects.as_slice() {
        // One filter goes in filter_subject; the server refuses both set.
        [one] => (one.clone(), Vec::new()),
        many => (String::new(), many.to_vec()),
    };
    consumer::push::Config {
        durable_name: Some(c.name.clone()),
        deliver_subject: c.deliver_subject.clone(),
        deliver_group: c.deliver_group.clone(),
        filter_subject,
        filter_subjects,
        ack_policy: AckPolicy::Explicit,
        deliver_policy: DeliverPolicy::All,
        ack_wait: Duration::from_secs(c.ack_wait_secs),
        max_deliver: c.max_deliver.unwrap_or(-1),
        ..Default::default()
    }
}

//! Asserting the JetStream objects `mesh-core` derived: create what is
//! missing, update what differs, leave alone what matches — streams before
//! consumers, on every controller start. A mesh restored from a backup has
//! records and no objects; a node whose consumer is missing hears nothing
//! while everything else about it looks correct.

use std::time::Duration;

use async_nats::jetstream::consumer::{self, AckPolicy, DeliverPolicy};
use async_nats::jetstream::context::{ConsumerInfoErrorKind, GetStreamErrorKind};
use async_nats::jetstream::stream::{self, RetentionPolicy};
use async_nats::jetstream::{Context, ErrorCode};
use mesh_core::jetstream::{ConsumerSpec, Objects, Retention, StreamSpec};

/// What an assert did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AssertReport {
    pub created: Vec<String>,
    pub updated: Vec<String>,
    pub unchanged: Vec<String>,
}

impl AssertReport {
    /// Whether the assert changed nothing on the server.
    pub fn changed_nothing(&self) -> bool {
        self.created.is_empty() && self.updated.is_empty()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AssertError {
    #[error(
        "consumer {consumer} cannot be asserted: its stream {stream} does not exist; assert the stream first (was it deleted?)"
    )]
    MissingStream { consumer: String, stream: String },
    #[error(
        "stream {stream} exists with {found} retention but the mesh needs {wanted}; the server cannot switch a stream to or from work-queue retention, so delete it and let the controller recreate it"
    )]
    RetentionMismatch {
        stream: String,
        found: String,
        wanted: String,
    },
    #[error("could not {action} {object}")]
    Server {
        action: &'static str,
        object: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

fn server_err<E: std::error::Error + Send + Sync + 'static>(
    action: &'static str,
    object: &str,
) -> impl FnOnce(E) -> AssertError {
    let object = object.to_string();
    move |e| AssertError::Server {
        action,
        object,
        source: Box::new(e),
    }
}

/// Asserts every stream, then every consumer.
pub async fn assert_objects(js: &Context, objects: &Objects) -> Result<AssertReport, AssertError> {
    let mut report = AssertReport::default();
    for s in &objects.streams {
        assert_stream(js, s, &mut report).await?;
    }
    for c in &objects.consumers {
        assert_consumer(js, c, &mut report).await?;
    }
    Ok(report)
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
        ..Default::default()
    }
}

async fn assert_stream(
    js: &Context,
    spec: &StreamSpec,
    report: &mut AssertReport,
) -> Result<(), AssertError> {
    let wanted = stream_config(spec);
    let label = format!("stream {}", spec.name);
    match js.get_stream(&spec.name).await {
        Ok(mut stream) => {
            let info = stream
                .info()
                .await
                .map_err(server_err("read", &label))?
                .clone();
            let found = &info.config;
            if found.retention != wanted.retention {
                return Err(AssertError::RetentionMismatch {
                    stream: spec.name.clone(),
                    found: format!("{:?}", found.retention),
                    wanted: format!("{:?}", wanted.retention),
                });
            }
            let same = found.subjects == wanted.subjects
                && found.max_messages_per_subject == wanted.max_messages_per_subject;
            if same {
                report.unchanged.push(label);
            } else {
                let mut update = found.clone();
                update.subjects = wanted.subjects;
                update.max_messages_per_subject = wanted.max_messages_per_subject;
                js.update_stream(update)
                    .await
                    .map_err(server_err("update", &label))?;
                report.updated.push(label);
            }
        }
        Err(e)
            if matches!(e.kind(), GetStreamErrorKind::JetStream(ref j)
                if j.error_code() == ErrorCode::STREAM_NOT_FOUND) =>
        {
            js.create_stream(wanted)
                .await
                .map_err(server_err("create", &label))?;
            report.created.push(label);
        }
        Err(e) => return Err(server_err("read", &label)(e)),
    }
    Ok(())
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

/// Both filter fields as one sorted list: the server may report one filter in
/// either field.
fn all_filters(one: &str, many: &[String]) -> Vec<String> {
    let mut all: Vec<String> = many.to_vec();
    if !one.is_empty() {
        all.push(one.to_string());
    }
    all.sort();
    all
}

/// The fields mesh decides; the server fills in the rest.
fn same_consumer(found: &consumer::Config, wanted: &consumer::push::Config) -> bool {
    found.deliver_subject.as_deref() == Some(wanted.deliver_subject.as_str())
        && found.deliver_group == wanted.deliver_group
        && all_filters(&found.filter_subject, &found.filter_subjects)
            == all_filters(&wanted.filter_subject, &wanted.filter_subjects)
        && found.ack_wait == wanted.ack_wait
        && found.max_deliver == wanted.max_deliver
        && found.ack_policy == wanted.ack_policy
}

async fn assert_consumer(
    js: &Context,
    spec: &ConsumerSpec,
    report: &mut AssertReport,
) -> Result<(), AssertError> {
    let label = format!("consumer {} on {}", spec.name, spec.stream);
    let missing_stream = || AssertError::MissingStream {
        consumer: spec.name.clone(),
        stream: spec.stream.clone(),
    };
    let stream = match js.get_stream_no_info(&spec.stream).await {
        Ok(s) => s,
        Err(e) => return Err(server_err("reach the stream of", &label)(e)),
    };
    let wanted = consumer_config(spec);
    match stream.consumer_info(&spec.name).await {
        Ok(info) => {
            if same_consumer(&info.config, &wanted) {
                report.unchanged.push(label);
            } else {
                stream
                    .update_consumer(wanted)
                    .await
                    .map_err(server_err("update", &label))?;
                report.updated.push(label);
            }
        }
        Err(e) if e.kind() == ConsumerInfoErrorKind::StreamNotFound => {
            return Err(missing_stream());
        }
        Err(e) if e.kind() == ConsumerInfoErrorKind::NotFound => {
            stream
                .create_consumer(wanted)
                .await
                .map_err(server_err("create", &label))?;
            report.created.push(label);
        }
        Err(e) => return Err(server_err("read", &label)(e)),
    }
    Ok(())
}

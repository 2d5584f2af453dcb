//! Asserting the artifact store's streams: observe both, let
//! `mesh_core::jetstream::artifact_store::plan_store` decide, execute each
//! step as it is. Run at every controller start (a wiped JetStream
//! directory comes back with its store; an older store is changed in place,
//! its objects kept) and before a command's first put.

use async_nats::jetstream::context::{CreateStreamError, GetStreamError, GetStreamErrorKind};
use async_nats::jetstream::stream::{self, DiscardPolicy, Source, StorageType};
use async_nats::jetstream::{self, ErrorCode};
use futures::StreamExt as _;
use mesh_core::jetstream::artifact_store::{
    ObservedStore, ObservedStoreStream, StoreRefusal, StoreStep, StoreStream, plan_store,
};
use mesh_core::subjects::artifact::{ALL_META, METAS_STREAM, STREAM};

use super::{is_refused_as, metas_of};

/// What [`ensure_bucket`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ensured {
    /// There was no store: it was made.
    Created,
    /// It was as it must be.
    Present,
    /// It was changed in place by these steps, its objects kept.
    Changed(Vec<StoreStep>),
}

#[derive(Debug, thiserror::Error)]
pub enum BucketError {
    #[error("could not read stream {stream}")]
    Read {
        stream: &'static str,
        #[source]
        source: ReadError,
    },
    #[error("could not {step}")]
    Write {
        /// The step, as [`StoreStep::describe`] says it.
        step: String,
        #[source]
        source: CreateStreamError,
    },
    #[error("could not copy the metas of {STREAM} into {METAS_STREAM}")]
    Copy(#[source] super::ListError),
    #[error("could not write the meta of {name} into {METAS_STREAM}")]
    CopyOne {
        name: String,
        #[source]
        source: async_nats::jetstream::context::PublishError,
    },
    #[error(transparent)]
    Refused(#[from] StoreRefusal),
}

/// Reading a stream failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Get(#[from] GetStreamError),
    #[error(transparent)]
    Info(#[from] async_nats::jetstream::stream::InfoError),
}

/// For the controller: the store made or brought in place, keeping
/// `replicas` copies on a clustered bus (a store made with fewer, by a
/// command before the controller's start or before the cluster grew, is
/// scaled in place).
pub async fn ensure_bucket_with(
    js: &jetstream::Context,
    replicas: usize,
) -> Result<Ensured, BucketError> {
    ensure(js, replicas, true).await
}

/// [`ensure_bucket_with`] on a single server.
pub async fn ensure_bucket(js: &jetstream::Context) -> Result<Ensured, BucketError> {
    ensure(js, 1, true).await
}

/// For a command: what is missing made with `replicas` copies; what exists
/// is left as it is — how the store is kept is its controller's to decide,
/// and a command that scaled it to its own idea took a clustered bus's
/// copies away.
pub async fn ensure_bucket_made_with(
    js: &jetstream::Context,
    replicas: usize,
) -> Result<Ensured, BucketError> {
    ensure(js, replicas, false).await
}

async fn ensure(
    js: &jetstream::Context,
    replicas: usize,
    controller: bool,
) -> Result<Ensured, BucketError> {
    let observed = ObservedStore {
        bucket: observe(js, STREAM).await?,
        metas: observe(js, METAS_STREAM).await?,
    };
    let steps = plan_store(&observed, replicas, controller)?;
    for step in &steps {
        execute(js, step).await?;
    }
    Ok(if observed.bucket.is_none() {
        Ensured::Created
    } else if steps.is_empty() {
        Ensured::Present
    } else {
        Ensured::Changed(steps)
    })
}

async fn observe(
    js: &jetstream::Context,
    name: &'static str,
) -> Result<Option<ObservedStoreStream>, BucketError> {
    let read = |source: ReadError| BucketError::Read {
        stream: name,
        source,
    };
    let stream = match js.get_stream(name).await {
        Ok(s) => s,
        Err(e)
            if matches!(e.kind(), GetStreamErrorKind::JetStream(ref j)
                if j.error_code() == ErrorCode::STREAM_NOT_FOUND) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(read(e.into())),
    };
    let c = stream.cached_info().config.clone();
    let mut subjects = stream
        .info_with_subjects(ALL_META)
        .await
        .map_err(|e| read(e.into()))?;
    let mut meta_subjects = 0u64;
    while let Some(next) = subjects.next().await {
        next.map_err(|e| read(e.into()))?;
        meta_subjects += 1;
    }
    Ok(Some(ObservedStoreStream {
        config: StoreStream {
            name: name.into(),
            subjects: c.subjects.clone(),
            sources: c.sources.iter().flatten().map(|s| s.name.clone()).collect(),
            max_msgs_per_subject: (c.max_messages_per_subject > 0)
                .then_some(c.max_messages_per_subject),
            discard_new_per_subject: c.discard_new_per_subject,
            allow_rollup: c.allow_rollup,
            allow_direct: c.allow_direct,
            replicas: c.num_replicas,
        },
        meta_subjects,
        sealed: c.sealed,
    }))
}

/// `spec`'s fields over `base` (the stream as found, or defaults): the
/// server's other fields are left as they are.
fn config(spec: &StoreStream, base: stream::Config) -> stream::Config {
    stream::Config {
        name: spec.name.clone(),
        subjects: spec.subjects.clone(),
        sources: (!spec.sources.is_empty()).then(|| {
            spec.sources
                .iter()
                .map(|name| Source {
                    name: name.clone(),
                    ..Default::default()
                })
                .collect()
        }),
        max_messages_per_subject: spec.max_msgs_per_subject.unwrap_or(-1),
        discard_new_per_subject: spec.discard_new_per_subject,
        // Discard-new per subject needs discard new; the bucket keeps the
        // object store's own (a full store refuses, never drops an object).
        discard: DiscardPolicy::New,
        allow_rollup: spec.allow_rollup,
        allow_direct: spec.allow_direct,
        num_replicas: spec.replicas,
        ..base
    }
}

async fn execute(js: &jetstream::Context, step: &StoreStep) -> Result<(), BucketError> {
    let write = |source| BucketError::Write {
        step: step.describe(),
        source,
    };
    match step {
        StoreStep::Create { spec } => {
            let base = stream::Config {
                storage: StorageType::File,
                ..Default::default()
            };
            js.create_stream(config(spec, base)).await.map_err(write)?;
        }
        StoreStep::Update { spec, .. } => {
            let name: &'static str = if spec.name == STREAM {
                STREAM
            } else {
                METAS_STREAM
            };
            let found = js.get_stream(name).await.map_err(|e| BucketError::Read {
                stream: name,
                source: e.into(),
            })?;
            let base = found.cached_info().config.clone();
            js.update_stream(config(spec, base)).await.map_err(write)?;
        }
        StoreStep::CopyMetas => copy_metas(js).await?,
    }
    Ok(())
}

/// Writes the bucket's newest meta of each name into the metas stream, as
/// it is (a deleted object's too: its name stays spent). A name already
/// there is refused by the server and skipped.
async fn copy_metas(js: &jetstream::Context) -> Result<(), BucketError> {
    let mut metas = metas_of(js).await.map_err(BucketError::Copy)?;
    while let Some((subject, payload)) = metas.next().await.map_err(BucketError::Copy)? {
        let acked = match js.publish(subject.clone(), payload.into()).await {
            Ok(ack) => ack.await,
            Err(e) => Err(e),
        };
        match acked {
            Ok(_) => {}
            Err(e) if is_refused_as(&e, ErrorCode::STREAM_STORE_FAILED) => {}
            Err(source) => {
                return Err(BucketError::CopyOne {
                    name: subject,
                    source,
                });
            }
        }
    }
    Ok(())
}

//! `artifact-put` for a person: their upload's chunks read from `UPLOADS`
//! (the subject names them, so none but theirs is read), written to a
//! file of this controller's, checked against the size and digest they
//! gave, put in the artifact store as the CLI puts a file, and the upload
//! purged whatever the outcome.

use std::io::Write as _;
use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
use futures::StreamExt as _;
use mesh_core::names::Name;
use mesh_core::operation::wire::{ArtifactPutArgs, Reply};
use mesh_core::subjects;
use sha2::{Digest as _, Sha256};

use super::{changed, refused};
use crate::artifacts::{ArtifactError, put_file};
use crate::daemon::{Ctx, error_chain};

/// How long the chunks may take to arrive from the stream.
const READ_WITHIN: Duration = Duration::from_secs(600);

pub(super) async fn artifact_put(ctx: &Ctx, person: &Name, a: &ArtifactPutArgs) -> Reply {
    if !subjects::upload_id_ok(&a.upload) {
        return Reply::Refused {
            reason: format!(
                "upload {:?} is no upload id (32 lowercase hex digits)",
                a.upload
            ),
        };
    }
    let Some(js) = ctx.js().cloned() else {
        return Reply::Refused {
            reason: "a mesh on RabbitMQ keeps no artifacts yet: run modules whose command the node has, or images pinned by digest".into(),
        };
    };
    let subject = subjects::upload(person, &a.upload);
    let received = match received(&js, &ctx.opts.dir, &subject, a).await {
        Ok(file) => file,
        Err(reason) => {
            purge(&js, &subject).await;
            return Reply::Refused { reason };
        }
    };
    let put = put_file(
        &ctx.store,
        async { Ok::<_, std::convert::Infallible>(js.clone()) },
        &a.module,
        &a.name,
        received.path(),
        a.version.as_deref(),
        ctx.opts.controller.replicas,
    )
    .await;
    purge(&js, &subject).await;
    match put {
        Ok(p) => {
            let how = if p.existed { "already stored; " } else { "" };
            changed(
                &ctx.store,
                format!(
                    "{how}put {} as version {} of {} ({} bytes)",
                    p.reference, p.version, a.module, p.size
                ),
            )
            .await
        }
        Err(ArtifactError::Refused(reason)) => Reply::Refused { reason },
        Err(e) => refused(e),
    }
}

/// The upload's bytes in a file of their own, once they are all there and
/// are what the asker said.
async fn received(
    js: &async_nats::jetstream::Context,
    dir: &std::path::Path,
    subject: &str,
    a: &ArtifactPutArgs,
) -> Result<tempfile::NamedTempFile, String> {
    let read = |e: &dyn std::fmt::Display| format!("reading upload {}: {e}", a.upload);
    let stream = js
        .get_stream(subjects::STREAM_UPLOADS)
        .await
        .map_err(|e| read(&error_chain(&e)))?;
    let consumer = stream
        .create_consumer(pull::Config {
            filter_subject: subject.to_string(),
            deliver_policy: DeliverPolicy::All,
            ack_policy: AckPolicy::None,
            inactive_threshold: Duration::from_secs(30),
            ..Default::default()
        })
        .await
        .map_err(|e| read(&error_chain(&e)))?;
    let pending = consumer.cached_info().num_pending;
    // Beside the mesh's state, not in a shared temporary directory: 0600,
    // on the disk the operator gave the controller.
    let mut file = tempfile::NamedTempFile::new_in(dir).map_err(|e| read(&e))?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let mut messages = consumer
        .fetch()
        .max_messages(usize::try_from(pending).unwrap_or(usize::MAX).max(1))
        .expires(READ_WITHIN)
        .messages()
        .await
        .map_err(|e| read(&error_chain(&e)))?;
    let mut seen = 0u64;
    while seen < pending {
        let Some(m) = messages.next().await else {
            break;
        };
        let m = m.map_err(|e| read(&e))?;
        hasher.update(&m.payload);
        size += m.payload.len() as u64;
        file.write_all(&m.payload).map_err(|e| read(&e))?;
        seen += 1;
        if size > a.size {
            break;
        }
    }
    file.flush().map_err(|e| read(&e))?;
    let sha256 = hex::encode(hasher.finalize());
    if size != a.size || sha256 != a.sha256 {
        return Err(format!(
            "upload {} holds {size} bytes with sha256 {sha256}, not the {} bytes with sha256 {} the request names: send it again",
            a.upload, a.size, a.sha256
        ));
    }
    Ok(file)
}

/// The upload's chunks gone from `UPLOADS`: put, or refused.
async fn purge(js: &async_nats::jetstream::Context, subject: &str) {
    let purged = match js.get_stream(subjects::STREAM_UPLOADS).await {
        Ok(stream) => stream.purge().filter(subject).await.map(|_| ()),
        Err(e) => {
            tracing::warn!(error = %error_chain(&e), "an upload was not purged");
            return;
        }
    };
    if let Err(e) = purged {
        tracing::warn!(error = %error_chain(&e), subject, "an upload was not purged");
    }
}

//! Moving the work queued under a renamed seat's old name onto the new
//! seat's subjects, as `mesh_core::jetstream::renamed` decides: each message
//! published on its new subject and confirmed stored (in `SEAT_<new>`), and
//! only then acknowledged in `SEAT_<old>`, so a failure anywhere leaves it
//! where it was (at worst queued twice, never lost). The old stream goes
//! once nothing waits in it.

use std::time::Duration;

use async_nats::jetstream::Context;
use async_nats::jetstream::consumer::{AckPolicy, pull};
use futures::StreamExt as _;
use mesh_core::jetstream::renamed::Renamed;

use crate::objects::is_not_found;

/// How many messages one fetch asks for.
const BATCH: usize = 100;
/// How long a fetch waits for the next message: the stream is not written
/// to any more (nobody is granted its subjects), so an empty fetch is the end.
const FETCH_WAIT: Duration = Duration::from_secs(1);

/// What one move did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Moved {
    /// Messages moved onto the new seat's subjects.
    pub moved: usize,
    /// Why each message that stayed could not go.
    pub left: Vec<String>,
    /// The old stream was deleted (empty).
    pub deleted: bool,
}

/// A server call of the move that failed; what was moved before it stays
/// moved, what was not stays queued.
#[derive(Debug, thiserror::Error)]
#[error("could not {action} {object}")]
pub struct MoveError {
    action: &'static str,
    object: String,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

fn failed<E: Into<Box<dyn std::error::Error + Send + Sync>>>(
    action: &'static str,
    object: &str,
) -> impl FnOnce(E) -> MoveError {
    let object = object.to_string();
    move |e| MoveError {
        action,
        object,
        source: e.into(),
    }
}

/// Moves what waits in `r`'s old stream; nothing when there is no such
/// stream.
pub async fn move_renamed(js: &Context, r: &Renamed) -> Result<Moved, MoveError> {
    let name = r.stream();
    let stream_obj = format!("stream {name}");
    let mut stream = match js.get_stream(&name).await {
        Ok(s) => s,
        Err(e) if is_not_found(&e) => return Ok(Moved::default()),
        Err(e) => return Err(failed("read", &stream_obj)(e)),
    };
    let mut out = Moved::default();
    let waiting = stream
        .info()
        .await
        .map_err(failed("read", &stream_obj))?
        .state
        .messages;
    if waiting > 0 {
        // A work-queue stream takes no second consumer over the same
        // subjects: the old seat's workers go (nobody binds them now: the
        // holder binds the new seat's).
        let mut names = stream.consumer_names();
        let mut old = Vec::new();
        while let Some(n) = names.next().await {
            old.push(n.map_err(failed("list the consumers of", &stream_obj))?);
        }
        for c in &old {
            stream
                .delete_consumer(c)
                .await
                .map_err(failed("delete consumer", &format!("{c} on {name}")))?;
        }
        // Named, so that its acknowledgements are the controller's to
        // publish (granted while the rename is recorded).
        let mover_name = r.mover();
        let mover = stream
            .create_consumer(pull::Config {
                durable_name: Some(mover_name.clone()),
                ack_policy: AckPolicy::Explicit,
                ..Default::default()
            })
            .await
            .map_err(failed("create a consumer on", &stream_obj))?;
        loop {
            let mut batch = mover
                .fetch()
                .max_messages(BATCH)
                .expires(FETCH_WAIT)
                .messages()
                .await
                .map_err(failed("read", &stream_obj))?;
            let mut any = false;
            while let Some(m) = batch.next().await {
                let m = m.map_err(failed("read", &stream_obj))?;
                any = true;
                let target = match r.target(&m.subject) {
                    Ok(t) => t,
                    Err(why) => {
                        // Not acknowledged: it stays, and is named.
                        out.left.push(why);
                        continue;
                    }
                };
                // Published again after a failure before its
                // acknowledgement, it is stored once: the new stream drops
                // a message id it has seen within its duplicate window.
                let mut headers = m.headers.clone().unwrap_or_default();
                let seq = m.info().map(|i| i.stream_sequence).unwrap_or_default();
                headers.insert("Nats-Msg-Id", format!("renamed-{}-{seq}", r.old).as_str());
                js.publish_with_headers(target.clone(), headers, m.payload.clone())
                    .await
                    .map_err(failed("publish to", &target))?
                    .await
                    .map_err(failed("store on", &target))?;
                m.double_ack()
                    .await
                    .map_err(failed("acknowledge a message of", &stream_obj))?;
                out.moved += 1;
            }
            if !any {
                break;
            }
        }
        let _ = stream.delete_consumer(&mover_name).await;
    }
    if out.left.is_empty() {
        let left = stream
            .info()
            .await
            .map_err(failed("read", &stream_obj))?
            .state
            .messages;
        if left == 0 {
            js.delete_stream(&name)
                .await
                .map_err(failed("delete", &stream_obj))?;
            out.deleted = true;
        }
    }
    Ok(out)
}

//! Work queued under a renamed seat's old name is moved onto the new
//! seat's subjects (`mesh_core::jetstream::renamed`, carried out by
//! `mesh_bus::renamed`) once the composition granting the controller those
//! subjects is live: at start, and after each pass that read a catalogue.

use std::sync::Arc;

use mesh_core::jetstream::renamed::Renamed;
use tracing::{info, warn};

use super::{Ctx, error_chain, retry_waits};

/// One move at a time: two would each want the old stream's one consumer.
static MOVING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Moves what waits under each renamed seat's old name, once the
/// composition of `generation` (the one granting the controller the new
/// subjects) is live. A move that fails is tried again a few times, then
/// at the next pass.
pub(crate) async fn move_when_live(ctx: Arc<Ctx>, renamed: Vec<Renamed>, generation: u64) {
    // On RabbitMQ a seat's work queue is named for the consumer, which a
    // rename keeps; JetStream's streams are named for the seat.
    let Some(js) = ctx.js() else { return };
    if renamed.is_empty() || ctx.composer.live(generation).await.is_err() {
        return;
    }
    let _one = MOVING.lock().await;
    for r in &renamed {
        let mut waits = retry_waits().take(6);
        loop {
            match mesh_bus::renamed::move_renamed(js, r).await {
                Ok(m) => {
                    if m.moved > 0 {
                        info!(old = %r.old, seat = %r.seat, moved = m.moved, "work queued under a renamed seat's old name moved to the seat");
                    }
                    for why in &m.left {
                        warn!(old = %r.old, seat = %r.seat, why = %why, "work queued under a renamed seat's old name left where it is");
                    }
                    if m.deleted {
                        info!(stream = %r.stream(), "the renamed seat's old stream is empty; deleted");
                    }
                    break;
                }
                Err(e) => {
                    let Some(wait) = waits.next() else {
                        warn!(old = %r.old, error = %error_chain(&e), "work under a renamed seat's old name not moved; tried again at the next change");
                        break;
                    };
                    warn!(old = %r.old, error = %error_chain(&e), retry_in = ?wait, "work under a renamed seat's old name not moved yet");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}

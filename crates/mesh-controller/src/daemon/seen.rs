//! Heartbeats: last seen kept in memory by the controller's own clock and
//! written to the store in batches (a write per heartbeat would be 2,000 a
//! second at 10,000 nodes).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_nats::Subscriber;
use futures::StreamExt as _;
use mesh_core::enrolment::Heartbeat;
use mesh_core::names::Name;
use mesh_store::Store;
use tracing::{debug, warn};

use super::{Counters, Ctx, error_chain};

#[derive(Debug, Clone, Default)]
pub(crate) struct LastSeen(Arc<Mutex<HashMap<Name, i64>>>);

impl LastSeen {
    fn saw(&self, node: Name, at: i64) {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let e = m.entry(node).or_insert(at);
        *e = (*e).max(at);
    }

    fn take(&self) -> Vec<(Name, i64)> {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.drain().collect()
    }

    /// Writes what was heard since the last flush; on failure keeps it for
    /// the next one (a newer heartbeat meanwhile wins).
    pub(crate) async fn flush(&self, store: &Store) {
        let batch = self.take();
        if batch.is_empty() {
            return;
        }
        if let Err(e) = store.nodes_seen(&batch).await {
            warn!(nodes = batch.len(), error = %error_chain(&e), "last seen not written; kept for the next flush");
            for (n, at) in batch {
                self.saw(n, at);
            }
        }
    }
}

pub(crate) async fn hear(ctx: Arc<Ctx>, mut heartbeats: Subscriber, seen: LastSeen) {
    while let Some(msg) = heartbeats.next().await {
        match Heartbeat::parse(&msg.subject, &msg.payload) {
            Ok(hb) => {
                Counters::bump(&ctx.counters.heartbeats);
                seen.saw(hb.node, mesh_store::now_ms());
            }
            Err(e) => {
                Counters::bump(&ctx.counters.terminated);
                debug!(subject = %msg.subject, reason = %e, "heartbeat ignored");
            }
        }
    }
}

pub(crate) async fn flush_every(ctx: Arc<Ctx>, seen: LastSeen) {
    let mut tick = tokio::time::interval(ctx.opts.seen_flush_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        seen.flush(&ctx.store).await;
    }
}

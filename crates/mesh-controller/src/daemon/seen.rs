//! Heartbeats: last seen kept in memory by the controller's own clock and
//! written to the store in batches (a write per heartbeat would be 2,000 a
//! second at 10,000 nodes). A node heard for the first time since this
//! controller started is written at once: until then `mesh status` calls a
//! running host "never heard from" and tells the operator to start it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use mesh_core::enrolment::Heartbeat;
use mesh_core::names::Name;
use mesh_store::Store;
use tracing::{debug, warn};

use super::{Counters, Ctx, error_chain};

#[derive(Debug, Clone, Default)]
pub(crate) struct LastSeen(Arc<Mutex<Heard>>, Arc<tokio::sync::Notify>);

#[derive(Debug, Default)]
struct Heard {
    pending: HashMap<Name, i64>,
    /// Every node heard since this controller started.
    known: HashSet<Name>,
}

impl LastSeen {
    /// Notes a heartbeat; true when the node is heard for the first time.
    fn saw(&self, node: Name, at: i64) -> bool {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let first = !m.known.contains(&node);
        if first {
            m.known.insert(node.clone());
        }
        let e = m.pending.entry(node).or_insert(at);
        *e = (*e).max(at);
        first
    }

    fn take(&self) -> Vec<(Name, i64)> {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.pending.drain().collect()
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
                let _ = self.saw(n, at);
            }
        }
    }
}

pub(crate) async fn hear(ctx: Arc<Ctx>, mut heartbeats: mesh_bus::seam::Messages, seen: LastSeen) {
    while let Some(msg) = heartbeats.next().await {
        let Ok(msg) = msg else { continue };
        match Heartbeat::parse(&msg.subject, &msg.payload) {
            Ok(hb) => {
                Counters::bump(&ctx.counters.heartbeats);
                if seen.saw(hb.node, mesh_store::now_ms()) {
                    seen.1.notify_one();
                }
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
        tokio::select! {
            _ = tick.tick() => {}
            () = seen.1.notified() => {}
        }
        seen.flush(&ctx.store).await;
    }
}

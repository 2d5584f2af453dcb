//! Following the records: the store's revision moves with every record
//! principals and objects are derived from, whoever wrote it (`mesh node
//! add`, `mesh fleet load`, an enrolment, a restore). Each move recomposes
//! the users file and re-asserts the bus objects.

use std::sync::Arc;

use tokio::sync::watch;
use tracing::{info, warn};

use super::{Ctx, error_chain};
use crate::composer::{ComposerStatus, Outcome};

/// One line per composition with the composer's counters: what an operator
/// (and the tests) read to see bursts coalesced and reloads confirmed.
pub(crate) async fn log_compositions(mut status: watch::Receiver<ComposerStatus>) {
    let mut logged = 0;
    while status.changed().await.is_ok() {
        let s = status.borrow_and_update().clone();
        if s.compositions == logged {
            continue;
        }
        logged = s.compositions;
        let (c, w, sig, live, not_live) = (s.compositions, s.writes, s.signals, s.live, s.not_live);
        match &s.last {
            Some(Outcome::Live {
                generation,
                omitted,
                ..
            }) => info!(
                compositions = c,
                writes = w,
                signals = sig,
                live,
                not_live,
                generation,
                left_out = omitted.len(),
                "composition live"
            ),
            Some(Outcome::Unchanged { generation, .. }) => info!(
                compositions = c,
                writes = w,
                signals = sig,
                live,
                not_live,
                generation,
                "composition unchanged"
            ),
            Some(Outcome::NotLive { generation, error }) => warn!(
                compositions = c, writes = w, signals = sig, live, not_live, generation,
                error = %error_chain(&**error), "composition not live"
            ),
            None => {}
        }
    }
}

/// Follows the revision from `started_at`, the one read before the records
/// the controller started from.
pub(crate) async fn follow(
    ctx: Arc<Ctx>,
    started_at: i64,
    asserted_at_start: mesh_core::jetstream::Objects,
) {
    let mut seen: Option<i64> = Some(started_at);
    // What the last assert here carried out, or found in place: a change
    // that leaves the objects as they were (a module's key, a person)
    // asks the server nothing. At 10,000 nodes an assert is 10,000
    // consumer reads; the controller's start asserts whatever it finds.
    let mut asserted = Some(asserted_at_start);
    let mut tick = tokio::time::interval(ctx.opts.poll_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let revision = match ctx.store.records_revision().await {
            Ok(r) => {
                // The store answers again: reports are tried again.
                ctx.close_window();
                r
            }
            Err(e) => {
                warn!(error = %error_chain(&e), "cannot read the records revision");
                continue;
            }
        };
        let Some(before) = seen.replace(revision) else {
            continue;
        };
        if before == revision {
            continue;
        }
        info!(revision, "records changed");
        ctx.covered.trigger(&ctx.composer, revision);
        match mesh_state::derive(&ctx.store, &ctx.opts.controller).await {
            Ok(d) if asserted.as_ref() == Some(&d.objects) => {}
            Ok(d) => match mesh_bus::assert_objects(&ctx.js, &d.objects).await {
                Ok(steps) => {
                    if !steps.is_empty() {
                        info!(steps = steps.len(), "bus objects asserted");
                    }
                    asserted = Some(d.objects);
                }
                Err(e) => {
                    warn!(error = %error_chain(&e), "bus objects not asserted; tried again at the next change");
                    // Not marked seen: the next tick tries again.
                    seen = Some(before);
                }
            },
            Err(e) => {
                warn!(error = %error_chain(&e), "the records do not derive; nothing asserted");
            }
        }
        // After the objects: a new node's consumer exists before its first
        // declaration is published.
        super::declare::declare_all(&ctx, false).await;
    }
}

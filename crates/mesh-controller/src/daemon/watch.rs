//! Following the records: the store's revision moves with every record
//! principals and objects are derived from, whoever wrote it (`mesh node
//! add`, `mesh fleet load`, an enrolment, a restore). Each burst of moves
//! is one pass doing what the kinds of records that moved ask for
//! (`mesh_core::revisions`): the users file, the bus objects, the
//! declarations.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use mesh_core::revisions;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use super::{Ctx, error_chain};
use crate::composer::{ComposerStatus, Outcome, Timing};

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

/// A burst of record changes (a catalogue registered and its modules
/// assigned, a fleet loaded) is one pass: the watcher waits until the
/// revision stands still for `quiet`, never longer than `max_delay` after
/// the first change it saw, so a steady trickle cannot postpone every pass.
pub(crate) const BURST: Timing = Timing {
    quiet: Duration::from_millis(300),
    max_delay: Duration::from_secs(2),
};

/// How often the revision is read while a burst lasts.
const BURST_POLL: Duration = Duration::from_millis(50);

/// Follows the revision from `started_at`, the one read before the records
/// the controller started from.
pub(crate) async fn follow(
    ctx: Arc<Ctx>,
    started_at: i64,
    asserted_at_start: mesh_core::jetstream::Objects,
) {
    let mut seen: Option<i64> = Some(started_at);
    // Each kind's revision as of the last pass: a pass does only what the
    // kinds that moved ask for (`revisions::work`). None until the first
    // pass, which does everything (a change may have landed between the
    // start's reads and this one).
    let mut kinds: Option<BTreeMap<String, i64>> = None;
    // From the last derivation; until one, as if held (doing too much is
    // safe: a credential then declares again, finding nothing changed).
    let mut broker_held = true;
    // What the last assert here carried out, or found in place: a change
    // that leaves the objects as they were (a module's key, a person)
    // asks the server nothing. At 10,000 nodes an assert is 10,000
    // consumer reads; the controller's start asserts whatever it finds.
    let mut asserted = Some(asserted_at_start);
    // A token's enrolment user is admitted until a composition after its
    // expiry leaves it out: nothing in the records moves when it expires.
    let mut expires = next_expiry(&ctx).await;
    // The moves of renamed seats' work under way, ending with this task
    // (never cut short by a later one: it waits its turn).
    let mut moving: Vec<super::AbortOnDrop> = Vec::new();
    let mut tick = tokio::time::interval(ctx.opts.poll_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = ctx.declare_again.notified() => {
                // Spare keys announced for modules held back: nothing in
                // the records moved, the declarations can now be made.
                super::declare::declare_all(&ctx, false).await;
                continue;
            }
        }
        let Some(mut revision) = read_revision(&ctx).await else {
            continue;
        };
        let Some(before) = seen.replace(revision) else {
            continue;
        };
        if before == revision {
            if expires.is_some_and(|at| at <= mesh_store::now_ms()) {
                info!("an enrolment token expired; composing without it");
                ctx.covered.trigger(&ctx.composer, revision);
                // The broker holder's declaration carries the file: it is
                // declared the one without the token's user too.
                if broker_held {
                    super::declare::declare_all(&ctx, false).await;
                }
                expires = next_expiry(&ctx).await;
            }
            continue;
        }
        // The burst: read again until the revision stands still.
        let first = Instant::now();
        let mut latest = first;
        loop {
            let due = crate::composer::due(first, latest, BURST);
            let now = Instant::now();
            if now >= due {
                break;
            }
            tokio::time::sleep(BURST_POLL.min(due - now)).await;
            if let Some(r) = read_revision(&ctx).await
                && r != revision
            {
                revision = r;
                latest = Instant::now();
            }
        }
        seen = Some(revision);
        let now_kinds = match ctx.store.records_revisions().await {
            Ok(k) => Some(k),
            Err(e) => {
                warn!(error = %error_chain(&e), "cannot read what kind of records changed; doing everything");
                None
            }
        };
        let changed = match (&kinds, &now_kinds) {
            (Some(b), Some(n)) => revisions::changed(b, n),
            _ => revisions::every(),
        };
        let work = revisions::work(&changed, broker_held);
        info!(
            revision,
            changed = %revisions::names(&changed),
            "records changed: {work}"
        );
        expires = next_expiry(&ctx).await;
        let mut done = true;
        let mut renamed = Vec::new();
        if work.assert_objects || work.declare {
            match mesh_state::derive(&ctx.store, &ctx.opts.controller).await {
                Ok(d) => {
                    broker_held = super::declare::broker_held(&d);
                    if work.assert_objects {
                        renamed = mesh_core::jetstream::renamed::renamed(&d.catalogue);
                    }
                    // On RabbitMQ the composition (below) declares every
                    // queue after the users it needs: a new node's queue is
                    // bound by a key the controller's own permissions allow
                    // only once composed, so asserting here first is refused.
                    let here = ctx.bus.nats().is_some();
                    if here && work.assert_objects && asserted.as_ref() != Some(&d.objects) {
                        match ctx.assert_objects(&d.objects).await {
                            Ok(()) => {
                                info!("bus objects asserted");
                                asserted = Some(d.objects.clone());
                            }
                            Err(e) => {
                                warn!(error = %error_chain(&e), "bus objects not asserted; tried again at the next change");
                                done = false;
                            }
                        }
                    }
                    // After the objects: a new node's consumer exists before
                    // its first declaration is published. The declarations
                    // wait for the composition they need (keys given first),
                    // so a fan-out is one composition and one reload.
                    if work.declare {
                        let pass = super::declare::declare_from(&ctx, &d, false).await;
                        super::declare::declared_through(&ctx, revision, pass).await;
                    }
                }
                Err(e) => {
                    warn!(error = %error_chain(&e), "the records do not derive; nothing asserted or declared");
                }
            }
        }
        if !work.declare {
            // Nothing declared derives from what moved: every node's newest
            // declaration is already the one these records call for.
            let whole = super::declare::Pass {
                published: 0,
                complete: true,
            };
            super::declare::declared_through(&ctx, revision, whole).await;
        }
        // After the declarations: a pass that published none still puts
        // the records in force (and one that did finds it done).
        let generation = if work.compose {
            ctx.covered.trigger(&ctx.composer, revision)
        } else {
            0
        };
        // After the composition granting the controller the new seats'
        // subjects: work left under a renamed seat's old name moves there.
        if !renamed.is_empty() {
            moving.retain(|m| !m.0.is_finished());
            moving.push(super::AbortOnDrop(tokio::spawn(
                super::renamed::move_when_live(ctx.clone(), renamed, generation),
            )));
        }
        if done {
            kinds = now_kinds;
        } else {
            // Not marked seen: the next tick does this pass again.
            seen = Some(before);
        }
    }
}

/// The records revision; `None` (logged) while the store does not answer.
async fn read_revision(ctx: &Ctx) -> Option<i64> {
    match ctx.store.records_revision().await {
        Ok(r) => {
            // The store answers again: reports are tried again.
            ctx.close_window();
            Some(r)
        }
        Err(e) => {
            warn!(error = %error_chain(&e), "cannot read the records revision");
            None
        }
    }
}

/// When the next live token expires (unix ms); none while none is live, or
/// while the store does not answer (the next change reads it again).
async fn next_expiry(ctx: &Ctx) -> Option<i64> {
    let tokens = match ctx.store.live_tokens().await {
        Ok(tokens) => tokens.iter().map(|t| t.expires_at).min(),
        Err(e) => {
            warn!(error = %error_chain(&e), "cannot read when the live tokens expire");
            None
        }
    };
    // A person's login leaves the users file at its expiry too.
    let logins = match ctx.store.live_logins().await {
        Ok(logins) => logins.iter().map(|l| l.expires_at).min(),
        Err(e) => {
            warn!(error = %error_chain(&e), "cannot read when the live logins expire");
            None
        }
    };
    tokens.into_iter().chain(logins).min()
}

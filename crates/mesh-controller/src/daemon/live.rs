//! Which records the broker serves, written to the store for the commands
//! that change records (`mesh person add` returns once the person can
//! connect). The records watcher notes the revision it read with each
//! composition it triggers; once the composer says a generation is live,
//! every revision noted at or below it is in force (the composition read
//! the records after that trigger), and the newest of them is recorded.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tracing::warn;

use super::{Ctx, error_chain};
use crate::composer::{Composer, ComposerStatus};

/// How soon a write the store refused is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// The revisions noted with triggers not yet confirmed live, by generation.
#[derive(Debug)]
pub(crate) struct Covered {
    noted: Mutex<BTreeMap<u64, i64>>,
}

impl Covered {
    /// Generation 0 is the composer's first composition, which reads the
    /// records after `revision` was read.
    pub(crate) fn new(revision: i64) -> Covered {
        Covered {
            noted: Mutex::new(BTreeMap::from([(0, revision)])),
        }
    }

    /// Triggers a composition of the records at `revision` (or later);
    /// returns its generation.
    pub(crate) fn trigger(&self, composer: &Composer, revision: i64) -> u64 {
        // Held across the trigger: the recorder, seeing the generation
        // live, finds it noted (never a composition done before its note).
        let mut noted = self.lock();
        let generation = composer.trigger();
        noted.insert(generation, revision);
        generation
    }

    /// The newest revision noted at or below `generation`, taken out.
    fn take(&self, generation: u64) -> Option<i64> {
        let mut noted = self.lock();
        let later = noted.split_off(&generation.saturating_add(1));
        let covered = std::mem::replace(&mut *noted, later);
        covered.into_values().max()
    }

    fn put_back(&self, generation: u64, revision: i64) {
        let mut noted = self.lock();
        let r = noted.entry(generation).or_insert(revision);
        *r = (*r).max(revision);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, i64>> {
        self.noted.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Records each live composition's revision as the composer confirms it.
pub(crate) async fn record(ctx: Arc<Ctx>, mut status: watch::Receiver<ComposerStatus>) {
    loop {
        let live = status.borrow_and_update().live_generation;
        let mut failed = false;
        if let Some(generation) = live
            && let Some(revision) = ctx.covered.take(generation)
            && let Err(e) = ctx
                .store
                .record_composition_live(revision, mesh_store::now_ms())
                .await
        {
            warn!(error = %error_chain(&e), revision, "the live composition was not recorded; tried again");
            ctx.covered.put_back(generation, revision);
            failed = true;
        }
        if failed {
            // A change of status, or the retry, whichever comes first.
            if let Ok(Err(_)) = tokio::time::timeout(RETRY, status.changed()).await {
                return;
            }
        } else if status.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_generation_covers_every_revision_noted_at_or_below_it() {
        let c = Covered::new(3);
        c.lock().insert(1, 5);
        c.lock().insert(2, 6);
        c.lock().insert(4, 9);
        assert_eq!(c.take(2), Some(6));
        assert_eq!(c.take(2), None, "taken once");
        assert_eq!(c.take(3), None);
        c.put_back(3, 7);
        assert_eq!(c.take(10), Some(9));
    }
}

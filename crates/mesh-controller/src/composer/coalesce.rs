//! When to compose: a burst of record changes makes one composition and one
//! reload, since every reload re-verifies every connected client.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// How long to wait for a burst to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// Compose once no trigger has come for this long...
    pub quiet: Duration,
    /// ...but never later than this after the first pending trigger, so a
    /// steady trickle of changes cannot postpone every composition.
    pub max_delay: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            quiet: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
        }
    }
}

/// When to compose, given the first and the latest pending trigger.
pub fn due(first: Instant, latest: Instant, timing: Timing) -> Instant {
    (latest + timing.quiet).min(first + timing.max_delay)
}

/// Waits for a trigger (or for `retry_at`, a composition that did not go
/// live asking to be tried again), then for the burst to end. Returns the
/// highest generation triggered by then, or `None` once every trigger
/// handle is gone.
///
/// A trigger that came while a composition was under way counts as pending
/// from this call on: compositions run one at a time, so it could not have
/// been composed sooner anyway.
pub async fn next_batch(
    triggers: &mut watch::Receiver<u64>,
    timing: Timing,
    retry_at: Option<Instant>,
) -> Option<u64> {
    let retry = async {
        match retry_at {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = triggers.changed() => r.ok()?,
        () = retry => {}
    }
    let first = Instant::now();
    let mut latest = first;
    loop {
        tokio::select! {
            // A trigger already waiting is counted before the deadline is
            // judged, so a burst is never split by a tie.
            biased;
            r = triggers.changed() => {
                // The last handle gone: what is pending is still composed;
                // the next call says there is nothing more.
                if r.is_err() {
                    break;
                }
                latest = Instant::now();
            }
            () = tokio::time::sleep_until(due(first, latest, timing)) => break,
        }
    }
    Some(*triggers.borrow_and_update())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn channel() -> (watch::Sender<u64>, watch::Receiver<u64>) {
        watch::channel(0)
    }

    fn bump(tx: &watch::Sender<u64>) {
        tx.send_modify(|g| *g += 1);
    }

    #[test]
    fn due_is_the_quiet_period_after_the_latest_trigger_capped_by_the_first() {
        let t = Timing::default();
        let start = Instant::now();
        assert_eq!(due(start, start, t), start + 100 * MS);
        assert_eq!(due(start, start + 500 * MS, t), start + 600 * MS);
        assert_eq!(due(start, start + 950 * MS, t), start + 1000 * MS);
        assert_eq!(due(start, start + 5000 * MS, t), start + 1000 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn a_single_trigger_is_composed_after_the_quiet_period() {
        let (tx, mut rx) = channel();
        let start = Instant::now();
        bump(&tx);
        assert_eq!(next_batch(&mut rx, Timing::default(), None).await, Some(1));
        assert_eq!(Instant::now() - start, 100 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_is_one_batch_carrying_its_last_generation() {
        let (tx, mut rx) = channel();
        let start = Instant::now();
        for _ in 0..20 {
            bump(&tx);
        }
        assert_eq!(next_batch(&mut rx, Timing::default(), None).await, Some(20));
        assert_eq!(Instant::now() - start, 100 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn a_trigger_within_the_quiet_period_extends_it() {
        let (tx, mut rx) = channel();
        let start = Instant::now();
        bump(&tx);
        let feeder = tokio::spawn(async move {
            tokio::time::sleep(60 * MS).await;
            bump(&tx);
            tx
        });
        assert_eq!(next_batch(&mut rx, Timing::default(), None).await, Some(2));
        assert_eq!(Instant::now() - start, 160 * MS);
        drop(feeder.await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_trickle_is_composed_at_the_maximum_delay() {
        let (tx, mut rx) = channel();
        let start = Instant::now();
        bump(&tx);
        let feeder = tokio::spawn(async move {
            // Every 50 ms for 3 s: never 100 ms of quiet.
            for _ in 0..60 {
                tokio::time::sleep(50 * MS).await;
                bump(&tx);
            }
            tx
        });
        let g = next_batch(&mut rx, Timing::default(), None).await.unwrap();
        assert_eq!(Instant::now() - start, 1000 * MS);
        // The triggers at 50, 100, ... 1000 ms: the one due at the deadline
        // may land on either side of it.
        assert!((20..=21).contains(&g), "{g}");
        // The rest of the trickle is the next batch, again capped.
        let second = Instant::now();
        let g2 = next_batch(&mut rx, Timing::default(), None).await.unwrap();
        assert!(g2 > g);
        // Its first trigger is the one at the deadline or the next, 50 ms on.
        let took = Instant::now() - second;
        assert!(took == 1000 * MS || took == 1050 * MS, "{took:?}");
        drop(feeder.await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_composes_without_a_trigger_and_a_trigger_does_not_wait_for_it() {
        let (tx, mut rx) = channel();
        let start = Instant::now();
        let retry = Some(start + 2000 * MS);
        assert_eq!(next_batch(&mut rx, Timing::default(), retry).await, Some(0));
        assert_eq!(Instant::now() - start, 2100 * MS);

        let start = Instant::now();
        bump(&tx);
        let retry = Some(start + 2000 * MS);
        assert_eq!(next_batch(&mut rx, Timing::default(), retry).await, Some(1));
        assert_eq!(Instant::now() - start, 100 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn no_batch_once_every_trigger_is_gone() {
        let (tx, mut rx) = channel();
        drop(tx);
        assert_eq!(next_batch(&mut rx, Timing::default(), None).await, None);
    }
}

//! Exponential backoff with full jitter: each wait is random in
//! `[0, ceiling]`, the ceiling doubling from `start` to `max`. Many hosts
//! refused by one reload (or dropped by one broker restart) then spread
//! their retries instead of arriving together.

use std::time::Duration;

use rand::Rng as _;

#[derive(Debug, Clone)]
pub struct Backoff {
    start: Duration,
    max: Duration,
    ceiling: Duration,
}

impl Backoff {
    pub fn new(start: Duration, max: Duration) -> Backoff {
        let start = start.min(max);
        Backoff {
            start,
            max,
            ceiling: start,
        }
    }

    /// The next wait: random in `[0, ceiling]`; the ceiling then doubles up
    /// to `max`.
    pub fn next_delay(&mut self) -> Duration {
        let cap = self.ceiling;
        self.ceiling = self.ceiling.saturating_mul(2).min(self.max);
        jitter(cap)
    }

    /// The bound of the next wait.
    pub fn ceiling(&self) -> Duration {
        self.ceiling
    }

    /// After a success: the next trouble starts from `start` again.
    pub fn reset(&mut self) {
        self.ceiling = self.start;
    }
}

fn jitter(cap: Duration) -> Duration {
    let nanos = cap.as_nanos().min(u64::MAX as u128) as u64;
    Duration::from_nanos(rand::rng().random_range(0..=nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_stay_within_a_ceiling_that_doubles_to_the_cap() {
        let (start, max) = (Duration::from_millis(250), Duration::from_secs(10));
        let mut b = Backoff::new(start, max);
        let mut expected = start;
        for _ in 0..12 {
            assert_eq!(b.ceiling(), expected);
            let d = b.next_delay();
            assert!(d <= expected, "{d:?} > {expected:?}");
            expected = (expected * 2).min(max);
        }
        assert_eq!(b.ceiling(), max);
        b.reset();
        assert_eq!(b.ceiling(), start);
    }

    #[test]
    fn waits_are_jittered_not_fixed() {
        let mut b = Backoff::new(Duration::from_secs(10), Duration::from_secs(10));
        let waits: std::collections::BTreeSet<Duration> = (0..50).map(|_| b.next_delay()).collect();
        // 50 draws from ten billion nanoseconds: all equal only if not random.
        assert!(waits.len() > 40, "{waits:?}");
        // Full jitter: some waits fall in the lower half.
        assert!(waits.iter().any(|d| *d < Duration::from_secs(5)));
    }
}

//! How long a long-lived client (a host, a module) waits before each
//! reconnect attempt. A broker restarted under 10,000 clients must not be
//! met by all of them at once: each waits at random over a window before
//! its first attempt after a drop, and with full jitter after that, the
//! ceiling doubling to a bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::{ConnectOptions, Event};
use rand::Rng as _;

/// Over how long the first attempts after a drop are spread.
pub const FIRST_ATTEMPT_WINDOW: Duration = Duration::from_secs(2);

/// A client's reconnect waits; clone it into the event callback, which
/// must call [`Reconnects::note`] with every event.
#[derive(Debug, Clone)]
pub struct Reconnects {
    ever_connected: Arc<AtomicBool>,
    start: Duration,
    max: Duration,
    window: Duration,
}

impl Reconnects {
    pub fn new(start: Duration, max: Duration) -> Reconnects {
        Reconnects {
            ever_connected: Arc::new(AtomicBool::new(false)),
            start,
            max,
            window: FIRST_ATTEMPT_WINDOW,
        }
    }

    /// Sets the client's reconnect delay to [`Reconnects::wait`].
    pub fn apply(&self, opts: ConnectOptions) -> ConnectOptions {
        let me = self.clone();
        opts.reconnect_delay_callback(move |attempt| me.wait(attempt))
    }

    /// Hears a connection event: once connected, a later attempt is a
    /// reconnection.
    pub fn note(&self, event: &Event) {
        if matches!(event, Event::Connected) {
            self.ever_connected.store(true, Ordering::Relaxed);
        }
    }

    /// The wait before attempt `attempt` (async-nats counts from 1, for
    /// the very first connect too).
    pub fn wait(&self, attempt: usize) -> Duration {
        let cap = wait_cap(
            attempt,
            self.ever_connected.load(Ordering::Relaxed),
            self.start,
            self.max,
            self.window,
        );
        let nanos = cap.as_nanos().min(u64::MAX as u128) as u64;
        Duration::from_nanos(rand::rng().random_range(0..=nanos))
    }
}

/// The bound of the wait before `attempt`: none before a client's very
/// first connect (its caller's own loop spaces those); the window before
/// the first attempt after a drop; then `start` doubling to `max`.
pub fn wait_cap(
    attempt: usize,
    ever_connected: bool,
    start: Duration,
    max: Duration,
    window: Duration,
) -> Duration {
    if !ever_connected {
        return Duration::ZERO;
    }
    if attempt <= 1 {
        return window;
    }
    let shift = (attempt - 1).min(20) as u32;
    start.saturating_mul(1u32 << shift).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_attempt_after_a_drop_is_spread_then_the_ceiling_doubles() {
        let (s, m, w) = (
            Duration::from_millis(250),
            Duration::from_secs(10),
            Duration::from_secs(2),
        );
        assert_eq!(wait_cap(1, false, s, m, w), Duration::ZERO, "first connect");
        assert_eq!(wait_cap(1, true, s, m, w), w);
        assert_eq!(wait_cap(2, true, s, m, w), Duration::from_millis(500));
        assert_eq!(wait_cap(3, true, s, m, w), Duration::from_secs(1));
        assert_eq!(wait_cap(30, true, s, m, w), m);
        let r = Reconnects::new(s, m);
        assert_eq!(r.wait(1), Duration::ZERO);
        r.note(&Event::Connected);
        let waits: Vec<Duration> = (0..50).map(|_| r.wait(1)).collect();
        assert!(waits.iter().all(|d| *d <= w));
        assert!(waits.iter().any(|d| *d != waits[0]), "jittered");
    }
}

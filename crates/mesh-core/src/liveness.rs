//! Whether a node is alive (DESIGN §6): heartbeats every 5 s make it
//! `ready`; 3 missed make it `stale`, 12 missed `down`. Decided from last
//! seen and now alone, so every listing and the controller agree.

use std::time::Duration;

use serde::Serialize;

/// How often a host heartbeats.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);
/// Missed heartbeats after which a node is stale.
pub const STALE_AFTER_MISSED: u32 = 3;
/// Missed heartbeats after which a node is down.
pub const DOWN_AFTER_MISSED: u32 = 12;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Liveness {
    /// Never heard from.
    Unseen,
    Ready,
    Stale,
    Down,
}

impl Liveness {
    pub fn as_str(self) -> &'static str {
        match self {
            Liveness::Unseen => "unseen",
            Liveness::Ready => "ready",
            Liveness::Stale => "stale",
            Liveness::Down => "down",
        }
    }
}

/// The liveness of a node last seen at `last_seen_ms` (unix ms), at `now_ms`.
/// A last seen in the future (clocks apart) counts as just seen.
pub fn liveness(last_seen_ms: Option<u64>, now_ms: u64, every: Duration) -> Liveness {
    let Some(seen) = last_seen_ms else {
        return Liveness::Unseen;
    };
    let every_ms = u64::try_from(every.as_millis()).unwrap_or(u64::MAX).max(1);
    let quiet = now_ms.saturating_sub(seen);
    if quiet >= every_ms.saturating_mul(u64::from(DOWN_AFTER_MISSED)) {
        Liveness::Down
    } else if quiet >= every_ms.saturating_mul(u64::from(STALE_AFTER_MISSED)) {
        Liveness::Stale
    } else {
        Liveness::Ready
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_liveness_reads_as_it_is_written() {
        for l in [
            Liveness::Unseen,
            Liveness::Ready,
            Liveness::Stale,
            Liveness::Down,
        ] {
            assert_eq!(serde_json::to_value(l).unwrap(), l.as_str());
        }
    }

    #[test]
    fn three_missed_is_stale_twelve_down() {
        let e = Duration::from_secs(5);
        assert_eq!(liveness(None, 100, e), Liveness::Unseen);
        assert_eq!(liveness(Some(100_000), 100_000, e), Liveness::Ready);
        assert_eq!(liveness(Some(100_000), 114_999, e), Liveness::Ready);
        assert_eq!(liveness(Some(100_000), 115_000, e), Liveness::Stale);
        assert_eq!(liveness(Some(100_000), 159_999, e), Liveness::Stale);
        assert_eq!(liveness(Some(100_000), 160_000, e), Liveness::Down);
        // A clock ahead of ours is not a node gone.
        assert_eq!(liveness(Some(200_000), 100_000, e), Liveness::Ready);
        assert_eq!(liveness(Some(0), u64::MAX, Duration::ZERO), Liveness::Down);
    }
}

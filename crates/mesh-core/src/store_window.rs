//! The store window (DESIGN §6): while the store cannot take a report, the
//! report stays in CONTROL — nak'd with a delay, so the server keeps it,
//! not this process — and the controller keeps only when the window
//! opened. Past the bound, a report is let go (terminated and logged).
//! Decided here from the window, now and the bound alone.

use std::time::Duration;

use serde::Serialize;

/// Default bound: how long a report may wait for the store.
pub const DEFAULT_BOUND: Duration = Duration::from_secs(3600);
/// First delay of a nak; doubled per delivery up to [`MAX_DELAY`].
pub const FIRST_DELAY: Duration = Duration::from_millis(500);
pub const MAX_DELAY: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "kebab-case")]
pub enum Decision {
    /// Hand it back to the server, to come round after `delay_ms`.
    Nak { delay_ms: u64 },
    /// The window has been open longer than the bound: let it go.
    LetGo { open_for_ms: u64 },
}

/// For a report the store could not take at `now_ms`, delivered
/// `deliveries` times: the window's opening (kept, or opened now) and what
/// to do with the report.
pub fn on_unavailable(
    opened_at_ms: Option<u64>,
    now_ms: u64,
    bound: Duration,
    deliveries: u64,
) -> (u64, Decision) {
    let opened = opened_at_ms.unwrap_or(now_ms).min(now_ms);
    let open_for = now_ms - opened;
    let bound_ms = u64::try_from(bound.as_millis()).unwrap_or(u64::MAX);
    if open_for > bound_ms {
        return (
            opened,
            Decision::LetGo {
                open_for_ms: open_for,
            },
        );
    }
    let first = u64::try_from(FIRST_DELAY.as_millis()).unwrap_or(500);
    let max = u64::try_from(MAX_DELAY.as_millis()).unwrap_or(30_000);
    let doublings = u32::try_from(deliveries.saturating_sub(1))
        .unwrap_or(u32::MAX)
        .min(16);
    let delay = first.saturating_mul(1u64 << doublings).min(max);
    // Never past the bound by more than one delay: the let-go decision is
    // taken on the next delivery after it.
    (opened, Decision::Nak { delay_ms: delay })
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: Duration = Duration::from_secs(3600);

    #[test]
    fn the_first_failure_opens_the_window_and_naks() {
        assert_eq!(
            on_unavailable(None, 1_000, H, 1),
            (1_000, Decision::Nak { delay_ms: 500 })
        );
    }

    #[test]
    fn the_window_keeps_its_opening_and_delays_grow_to_a_cap() {
        assert_eq!(
            on_unavailable(Some(1_000), 5_000, H, 2),
            (1_000, Decision::Nak { delay_ms: 1_000 })
        );
        assert_eq!(
            on_unavailable(Some(1_000), 5_000, H, 3),
            (1_000, Decision::Nak { delay_ms: 2_000 })
        );
        assert_eq!(
            on_unavailable(Some(1_000), 5_000, H, 7),
            (1_000, Decision::Nak { delay_ms: 30_000 })
        );
        assert_eq!(
            on_unavailable(Some(1_000), 5_000, H, u64::MAX),
            (1_000, Decision::Nak { delay_ms: 30_000 })
        );
        // A delivery count of 0 (never) reads as the first.
        assert_eq!(
            on_unavailable(Some(1_000), 5_000, H, 0),
            (1_000, Decision::Nak { delay_ms: 500 })
        );
    }

    #[test]
    fn past_the_bound_a_report_is_let_go_and_at_it_kept() {
        let b = Duration::from_secs(10);
        assert_eq!(
            on_unavailable(Some(0), 10_000, b, 1),
            (0, Decision::Nak { delay_ms: 500 })
        );
        assert_eq!(
            on_unavailable(Some(0), 10_001, b, 1),
            (
                0,
                Decision::LetGo {
                    open_for_ms: 10_001
                }
            )
        );
        // A window opened "in the future" (clock stepped back) is now.
        assert_eq!(
            on_unavailable(Some(50_000), 10_000, b, 1),
            (10_000, Decision::Nak { delay_ms: 500 })
        );
    }
}

//! The driver's decisions as data: how long to wait before a restart, when a
//! module counts as `failed`, and which state a fresh spawn reports. Pure
//! functions of counts and durations, so they are tested without a clock.

use std::time::Duration;

use super::{DriverOptions, ModuleState};

/// The restart policy taken from [`DriverOptions`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    pub backoff_start: Duration,
    pub backoff_max: Duration,
    pub reset_after: Duration,
    pub failed_after: u32,
}

/// What follows one exit of a module that should be running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AfterExit {
    /// Consecutive quick failures, this exit included.
    pub failures: u32,
    /// The wait before the next spawn.
    pub delay: Duration,
    /// Whether the module is now reported `failed`.
    pub failed: bool,
}

impl Schedule {
    pub fn from_options(opts: &DriverOptions) -> Schedule {
        Schedule {
            backoff_start: opts.backoff_start,
            backoff_max: opts.backoff_max,
            reset_after: opts.reset_after,
            failed_after: opts.failed_after,
        }
    }

    /// Consecutive failures counting an exit after `uptime`: a run that
    /// stayed up `reset_after` was healthy, so its exit starts a new count
    /// instead of inheriting the long wait of an old crash loop.
    pub fn failures(&self, before: u32, uptime: Duration) -> u32 {
        if uptime >= self.reset_after {
            1
        } else {
            before.saturating_add(1)
        }
    }

    /// The wait after the `failures`-th consecutive failure: `backoff_start`
    /// doubling per failure, capped at `backoff_max`.
    pub fn delay(&self, failures: u32) -> Duration {
        // A shift past 31 would overflow; the cap is reached long before.
        let shift = failures.saturating_sub(1).min(31);
        self.backoff_start
            .saturating_mul(1u32 << shift)
            .min(self.backoff_max)
    }

    /// Whether `failures` consecutive quick failures make a module `failed`.
    /// `failed_after` 0 is read as 1: a module is never `failed` before it
    /// failed once.
    pub fn is_failed(&self, failures: u32) -> bool {
        failures >= self.failed_after.max(1)
    }

    pub fn after_exit(&self, before: u32, uptime: Duration) -> AfterExit {
        let failures = self.failures(before, uptime);
        AfterExit {
            failures,
            delay: self.delay(failures),
            failed: self.is_failed(failures),
        }
    }
}

/// The state a module reports while a new process starts: a `failed` module
/// stays `failed` until a run stays up `running_after`, so a crash loop does
/// not flap between `failed` and `starting` in every report.
pub fn state_at_spawn(current: ModuleState) -> ModuleState {
    match current {
        ModuleState::Failed => ModuleState::Failed,
        _ => ModuleState::Starting,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule() -> Schedule {
        Schedule::from_options(&DriverOptions::default())
    }

    #[test]
    fn the_default_delays_double_from_one_second_to_a_minute() {
        let s = schedule();
        let delays: Vec<u64> = (1..=9).map(|f| s.delay(f).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        // Huge counts neither overflow nor pass the cap.
        assert_eq!(s.delay(u32::MAX), Duration::from_secs(60));
        assert_eq!(s.delay(0), Duration::from_secs(1));
    }

    #[test]
    fn quick_failures_accumulate_and_a_long_run_resets_the_count() {
        let s = schedule();
        let mut failures = 0;
        for expected in 1..=5 {
            failures = s.failures(failures, Duration::from_secs(2));
            assert_eq!(failures, expected);
        }
        assert_eq!(s.delay(failures), Duration::from_secs(16));
        // Up exactly `reset_after`: the next wait is the first one again.
        let after = s.after_exit(failures, Duration::from_secs(60));
        assert_eq!(
            after,
            AfterExit {
                failures: 1,
                delay: Duration::from_secs(1),
                failed: false
            }
        );
        // Just under it: still part of the loop.
        let after = s.after_exit(5, Duration::from_millis(59_999));
        assert_eq!(after.failures, 6);
        assert_eq!(after.delay, Duration::from_secs(32));
        assert_eq!(s.failures(u32::MAX, Duration::ZERO), u32::MAX);
    }

    #[test]
    fn a_module_is_failed_from_the_configured_count_of_quick_failures() {
        let s = schedule();
        assert_eq!(s.failed_after, 3);
        let states: Vec<bool> = (0..=4).map(|f| s.is_failed(f)).collect();
        assert_eq!(states, [false, false, false, true, true]);
        let mut failures = 0;
        let mut failed = Vec::new();
        for _ in 0..4 {
            let after = s.after_exit(failures, Duration::from_millis(10));
            failures = after.failures;
            failed.push(after.failed);
        }
        assert_eq!(failed, [false, false, true, true]);
        // One long run and the module is not failed on its next exit.
        assert!(!s.after_exit(failures, Duration::from_secs(61)).failed);
        let never_zero = Schedule {
            failed_after: 0,
            ..s
        };
        assert!(!never_zero.is_failed(0));
        assert!(never_zero.is_failed(1));
    }

    #[test]
    fn a_failed_module_stays_failed_while_it_restarts() {
        assert_eq!(state_at_spawn(ModuleState::Failed), ModuleState::Failed);
        for s in [
            ModuleState::Starting,
            ModuleState::Running,
            ModuleState::Stopped,
        ] {
            assert_eq!(state_at_spawn(s), ModuleState::Starting);
        }
    }

    #[test]
    fn a_start_above_the_cap_is_held_at_the_cap() {
        let s = Schedule {
            backoff_start: Duration::from_secs(90),
            ..schedule()
        };
        assert_eq!(s.delay(1), Duration::from_secs(60));
    }
}

//! What the controller has done since it started: counted by the daemon's
//! tasks, read by `/metrics` and logged at shutdown.

use std::sync::atomic::{AtomicU64, Ordering};

/// What the controller has done since it started; logged at shutdown and
/// read by tests through the log.
#[derive(Debug, Default)]
pub struct Counters {
    pub enrolled: AtomicU64,
    pub refused: AtomicU64,
    /// Messages terminated as malformed (never redelivered).
    pub terminated: AtomicU64,
    pub heartbeats: AtomicU64,
    pub reports: AtomicU64,
    /// Reports redelivered after they were recorded (acknowledged again).
    pub duplicates: AtomicU64,
    /// Reports answering an older declaration than the node's newest.
    pub superseded: AtomicU64,
    /// Reports let go after the store stayed unavailable past the bound.
    pub let_go: AtomicU64,
    /// Declarations published to NODES (again, too, at convergence).
    pub declarations: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// A copy of the counters at one moment.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CountersView {
    pub enrolled: u64,
    pub refused: u64,
    pub terminated: u64,
    pub heartbeats: u64,
    pub reports: u64,
    pub duplicates: u64,
    pub superseded: u64,
    pub let_go: u64,
    pub declarations: u64,
}

impl CountersView {
    pub fn of(c: &Counters) -> CountersView {
        CountersView {
            enrolled: c.enrolled.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            terminated: c.terminated.load(Ordering::Relaxed),
            heartbeats: c.heartbeats.load(Ordering::Relaxed),
            reports: c.reports.load(Ordering::Relaxed),
            duplicates: c.duplicates.load(Ordering::Relaxed),
            superseded: c.superseded.load(Ordering::Relaxed),
            let_go: c.let_go.load(Ordering::Relaxed),
            declarations: c.declarations.load(Ordering::Relaxed),
        }
    }
}

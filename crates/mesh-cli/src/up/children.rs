//! The children `mesh up` runs in process groups of their own (a
//! terminal's Ctrl-C does not reach them; `mesh up` stops each itself, in
//! order), and the pids a forced stop kills without waiting for the task
//! holding them.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::process::Child;

/// The pids of the children running. A reaped pid is removed: it may be
/// handed to a stranger.
pub type PidCell = Arc<Mutex<Vec<u32>>>;

fn lock(cell: &PidCell) -> MutexGuard<'_, Vec<u32>> {
    cell.lock().unwrap_or_else(|p| p.into_inner())
}

/// A child just started.
pub fn remember(cell: &PidCell, pid: Option<u32>) {
    lock(cell).extend(pid);
}

/// A child reaped.
pub fn forget(cell: &PidCell, pid: Option<u32>) {
    if let Some(pid) = pid {
        lock(cell).retain(|p| *p != pid);
    }
}

/// The pids while they run, for [`crate::shutdown::kill_and_reap`].
pub fn running(cell: &PidCell) -> Vec<u32> {
    lock(cell).clone()
}

/// `signal`, then SIGKILL after `grace`; reaped either way, so no
/// `<defunct>` is left.
pub async fn stop(child: &mut Child, signal: libc::c_int, grace: Duration) {
    if let Some(pid) = child.id().and_then(|p| libc::pid_t::try_from(p).ok()) {
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(pid, signal) };
    }
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        // kill() sends SIGKILL and waits.
        let _ = child.kill().await;
    }
}

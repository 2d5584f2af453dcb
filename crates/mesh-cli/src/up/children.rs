//! The children `mesh up` runs in process groups of their own (a
//! terminal's Ctrl-C does not reach them; `mesh up` stops each itself, in
//! order), and the pids a forced stop kills without waiting for the task
//! holding them.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::process::Child;

use crate::shutdown;

/// How a forced stop (a second Ctrl-C) ends a child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forced {
    /// SIGKILL: a process with none of its own (a broker server, the
    /// second controller).
    Kill,
    /// PostgreSQL's immediate shutdown (SIGQUIT): the postmaster ends and
    /// reaps its server processes, which a SIGKILL to it alone would leave
    /// running, orphaned. Its whole group is killed if it has not ended
    /// within [`QUIT_WITHIN`].
    Quit,
    /// SIGKILL to its whole group: a script whose program runs helpers of
    /// its own (RabbitMQ's Erlang VM).
    KillGroup,
}

/// How long an immediate shutdown may take before its group is killed.
const QUIT_WITHIN: Duration = Duration::from_secs(5);

/// The children running, each with how a forced stop ends it. A reaped
/// pid is removed: it may be handed to a stranger.
pub type PidCell = Arc<Mutex<Vec<(u32, Forced)>>>;

fn lock(cell: &PidCell) -> MutexGuard<'_, Vec<(u32, Forced)>> {
    cell.lock().unwrap_or_else(|p| p.into_inner())
}

/// A child just started.
pub fn remember(cell: &PidCell, pid: Option<u32>, forced: Forced) {
    lock(cell).extend(pid.map(|p| (p, forced)));
}

/// A child reaped.
pub fn forget(cell: &PidCell, pid: Option<u32>) {
    if let Some(pid) = pid {
        lock(cell).retain(|(p, _)| *p != pid);
    }
}

/// Every child running ended now and reaped, blocking: for a second
/// Ctrl-C, which cannot wait for the tasks holding them.
pub fn force_stop(cell: &PidCell) {
    let running = lock(cell).clone();
    for (pid, forced) in running {
        match forced {
            Forced::Kill => shutdown::kill_and_reap(pid),
            Forced::Quit => shutdown::end_group_and_reap(pid, libc::SIGQUIT, QUIT_WITHIN),
            Forced::KillGroup => {
                if let Ok(group) = libc::pid_t::try_from(pid) {
                    // SAFETY: kill(2) on the group a child of ours leads.
                    unsafe { libc::kill(-group, libc::SIGKILL) };
                }
                shutdown::reap(pid);
            }
        }
    }
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

/// [`stop`] for a child leading a group of its own: `signal` to the child,
/// then SIGKILL to the whole group (whatever it left running, and itself
/// after `grace`); reaped either way.
pub async fn stop_group(child: &mut Child, signal: libc::c_int, grace: Duration) {
    let pid = child.id().and_then(|p| libc::pid_t::try_from(p).ok());
    stop(child, signal, grace).await;
    if let Some(pid) = pid {
        // SAFETY: kill(2) on the group this child led; its leader is
        // reaped, but the group id stays ours while any member lives.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
}

//! How a daemon (`mesh up`, `mesh controller`, `mesh host`) stops, as
//! `nomad agent -dev` and `kind` users expect: the first SIGINT or SIGTERM
//! asks for an orderly stop; a second one forces it — what the daemon
//! started is killed and it exits non-zero at once, whatever the orderly
//! stop is still waiting for.

use std::time::Duration;

use tokio::sync::watch;

/// The exit status of a forced stop: 128 + SIGINT, as a shell reports it.
pub const FORCED_EXIT: i32 = 130;

/// How long the runtime may take to wind down its tasks once the daemon
/// returned (a blocking task would otherwise hold the exit up for ever).
pub const RUNTIME_WIND_DOWN: Duration = Duration::from_secs(1);

/// SIGINT and SIGTERM, counted. Cheap to clone; every clone sees the count.
#[derive(Debug, Clone)]
pub struct Signals {
    count: watch::Receiver<u32>,
}

impl Signals {
    /// Installs the handlers (from now on the two signals no longer end the
    /// process by themselves) and counts them. Inside a runtime.
    pub fn install() -> anyhow::Result<Signals> {
        use anyhow::Context as _;
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).context("handling SIGTERM")?;
        let mut int = signal(SignalKind::interrupt()).context("handling SIGINT")?;
        let (tx, count) = watch::channel(0u32);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
                tx.send_modify(|n| *n = n.saturating_add(1));
            }
        });
        Ok(Signals { count })
    }

    /// Resolves once the first signal came (at once if it already did).
    pub async fn first(&self) {
        // A runtime shutting down waits for nothing any more.
        if !self.at_least(1).await {
            std::future::pending::<()>().await;
        }
    }

    /// Whether a stop was asked for already.
    pub fn stopping(&self) -> bool {
        *self.count.borrow() >= 1
    }

    /// Whether `n` signals came; false once the runtime is shutting down
    /// (the counting task, the sender, dropped before this one).
    async fn at_least(&self, n: u32) -> bool {
        let mut count = self.count.clone();
        count.wait_for(|c| *c >= n).await.is_ok()
    }

    /// On the second signal: `kill` (what the daemon started, without
    /// grace), then the process exits with [`FORCED_EXIT`]. Runs in the
    /// background for the rest of the process.
    pub fn force_on_second(&self, kill: impl FnOnce() + Send + 'static) {
        let signals = self.clone();
        tokio::spawn(async move {
            // A daemon that ended by itself (its runtime winding down drops
            // the counter first) is no second signal: it exited 130,
            // killing its modules, instead of with its own error.
            if !signals.at_least(2).await {
                return;
            }
            crate::output::note("stopping at once (second signal)");
            kill();
            std::process::exit(FORCED_EXIT);
        });
    }
}

/// Runs a daemon's future on a fresh multi-threaded runtime, then gives the
/// runtime [`RUNTIME_WIND_DOWN`] to end what is left.
pub fn block_on<F: std::future::Future>(daemon: F) -> anyhow::Result<F::Output> {
    let rt = crate::logging::daemon_runtime()?;
    let out = rt.block_on(daemon);
    rt.shutdown_timeout(RUNTIME_WIND_DOWN);
    Ok(out)
}

/// `work` to its end, or, once `stop` resolved, for at most `limit` more:
/// `None` when it did not end in time (it is dropped).
pub async fn bounded_after<T>(
    stop: impl std::future::Future<Output = ()>,
    limit: Duration,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::pin!(work);
    tokio::select! {
        r = &mut work => return Some(r),
        () = stop => {}
    }
    tokio::time::timeout(limit, work).await.ok()
}

/// SIGKILL to `pid` and reap it, if it is a child of ours still there.
pub fn kill_and_reap(pid: u32) {
    let Some(pid) = child_pid(pid) else {
        return;
    };
    // SAFETY: kill(2) on a child of this process, not yet reaped.
    if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
        wait(pid);
    }
}

/// `signal` to `pid` (a child of ours leading its own process group), then
/// SIGKILL to its whole group if it has not ended within `within`; reaped
/// either way. Blocking.
pub fn end_group_and_reap(pid: u32, signal: libc::c_int, within: Duration) {
    let Some(pid) = child_pid(pid) else {
        return;
    };
    // SAFETY: kill(2) on a child of this process, not yet reaped.
    if unsafe { libc::kill(pid, signal) } != 0 {
        return;
    }
    let until = std::time::Instant::now() + within;
    while std::time::Instant::now() < until {
        // SAFETY: waitpid(2) on one pid, without blocking; the status
        // pointer may be null.
        match unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) } {
            0 => std::thread::sleep(Duration::from_millis(20)),
            _ => return,
        }
    }
    // SAFETY: kill(2) on the group that child leads.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    wait(pid);
}

/// Reaps `pid` once it ended (a child of ours just sent SIGKILL), so it is
/// not left a zombie; nothing if it is no child of ours (already reaped).
pub fn reap(pid: u32) {
    if let Some(pid) = child_pid(pid) {
        wait(pid);
    }
}

fn child_pid(pid: u32) -> Option<libc::pid_t> {
    libc::pid_t::try_from(pid).ok().filter(|p| *p > 1)
}

fn wait(pid: libc::pid_t) {
    // SAFETY: waitpid(2) on one pid; the status pointer may be null. It
    // fails at once (ECHILD) when the process is not our child.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
}

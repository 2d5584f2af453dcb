//! Process helpers shared by the servers: free ports, signals, waiting.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output};
use std::time::{Duration, Instant};

use crate::TestkitError;
use crate::error::io;

/// A port nothing listens on right now (the kernel's choice, so parallel
/// tests do not pick the same one).
pub(crate) fn free_port() -> Result<u16, TestkitError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(io("bind a free port"))?;
    Ok(l.local_addr().map_err(io("read a free port"))?.port())
}

pub(crate) fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) with a pid we spawned and still own (not yet reaped).
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// Sends `sig`, waits up to `grace` for the child to exit, then SIGKILLs it.
/// Always reaps, so the pid is gone afterwards.
pub(crate) fn stop_child(child: &mut Child, sig: libc::c_int, grace: Duration) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    signal(child.id(), sig);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Whether a process with this pid exists (zombies included).
pub fn pid_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Runs `cmd` to completion; a failed exit is CommandFailed naming `what`,
/// with what the command wrote to stderr, then stdout.
pub(crate) fn checked_output(cmd: &mut Command, what: &str) -> Result<Output, TestkitError> {
    let out = cmd.output().map_err(io(format!("run {what}")))?;
    if out.status.success() {
        return Ok(out);
    }
    Err(TestkitError::CommandFailed {
        command: what.into(),
        status: out.status.to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout),
    })
}

/// Polls `probe` every `poll` until it yields a value. Fails with the tail of
/// `log` when `exited` reports that the process `what` is gone, or when
/// `timeout` passes first.
pub(crate) fn wait_ready<T>(
    what: &'static str,
    timeout: Duration,
    poll: Duration,
    log: &Path,
    mut exited: impl FnMut() -> Option<ExitStatus>,
    mut probe: impl FnMut() -> Option<T>,
) -> Result<T, TestkitError> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = exited() {
            return Err(TestkitError::CommandFailed {
                command: what.into(),
                status: status.to_string(),
                stderr: tail(log, 20),
            });
        }
        if let Some(ready) = probe() {
            return Ok(ready);
        }
        if Instant::now() > deadline {
            return Err(TestkitError::NotReady {
                what,
                secs: timeout.as_secs(),
                log: log.to_path_buf(),
                tail: tail(log, 20),
            });
        }
        std::thread::sleep(poll);
    }
}

/// The last lines of a log file, for error messages.
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

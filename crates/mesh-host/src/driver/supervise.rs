//! One module's supervising task: spawn, pump output into the log, mark it
//! running once it stayed up, and on exit decide (by [`Schedule`]) how long
//! to wait and whether it is `failed`; on a stop request, terminate the group.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _};
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::time::Instant;

use super::container::{self, Image};
use super::logfile::{LogFile, last_lines};
use super::procfs::{self, PidRecord};
use super::schedule::{Schedule, state_at_spawn};
use super::{ContainerRun, ExitInfo, ModuleState, RunSpec, Shared};

/// Lines and characters of output a failure reason quotes.
const REASON_LINES: usize = 5;
const REASON_CHARS: usize = 400;

/// How long the output pumps may take to drain after the group is gone. A
/// process that left the group may hold the pipe open forever.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// How long a container's client may take to end once its container was
/// stopped by name.
const CLIENT_AFTER_STOP: Duration = Duration::from_secs(10);

/// Until the stop sender says so, or is dropped (the driver itself was
/// dropped: its modules must not keep running unsupervised).
async fn stop_requested(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

pub(super) async fn supervise(
    shared: Arc<Shared>,
    spec: RunSpec,
    dir: PathBuf,
    log: LogFile,
    mut stop: watch::Receiver<bool>,
    spawned: tokio::sync::oneshot::Sender<()>,
) -> Option<ExitInfo> {
    let mut spawned = Some(spawned);
    let schedule = Schedule::from_options(&shared.opts);
    let log = Arc::new(Mutex::new(log));
    let module = spec.module.clone();
    let mut failures = 0u32;
    let mut first = true;
    loop {
        let current = shared.state(&module).unwrap_or(ModuleState::Starting);
        let restarted = !std::mem::take(&mut first);
        lock(&log).clear_tail();
        // `summary` (the exit status, or why the spawn failed) goes to the
        // host's own log; the quoted output only to the status, as a
        // module may print what the host's log must not keep.
        let launched = tokio::select! {
            launched = launch(&spec) => launched,
            // Loading an archive may take a while; a stop does not wait.
            _ = stop_requested(&mut stop) => {
                shared.update(&module, |s| s.state = ModuleState::Stopped);
                return None;
            }
        };
        let (uptime, summary, reason) = match launched {
            Err(why) => {
                shared.update(&module, |s| {
                    s.state = state_at_spawn(current);
                    s.restarts += u32::from(restarted);
                    s.pid = None;
                });
                if let Some(tx) = spawned.take() {
                    let _ = tx.send(());
                }
                (Duration::ZERO, why.clone(), why)
            }
            Ok(mut child) => {
                let pid = child.id();
                shared.update(&module, |s| {
                    s.state = state_at_spawn(current);
                    s.restarts += u32::from(restarted);
                    s.pid = pid;
                });
                if let Some(tx) = spawned.take() {
                    let _ = tx.send(());
                }
                match pid {
                    // Only a reaped child has no id, and this one was never
                    // waited on; should it happen, it counts as an exit.
                    None => {
                        let why = "ended before it could be watched".to_string();
                        (Duration::ZERO, why.clone(), why)
                    }
                    Some(pid) => {
                        match run(&shared, &spec, &dir, &log, &mut child, pid, &mut stop).await {
                            Ran::Stopped(info) => return Some(info),
                            Ran::Exited(info, uptime) => {
                                (uptime, info.to_string(), exit_reason(info, &log))
                            }
                        }
                    }
                }
            }
        };
        let after = schedule.after_exit(failures, uptime);
        failures = after.failures;
        tracing::warn!(%module, %summary, failures, delay = ?after.delay, "module ended; restarting");
        shared.update(&module, |s| {
            s.pid = None;
            s.reason = Some(reason);
            if after.failed {
                s.state = ModuleState::Failed;
            } else if s.state != ModuleState::Failed {
                s.state = ModuleState::Starting;
            }
        });
        tokio::select! {
            _ = tokio::time::sleep(after.delay) => {}
            _ = stop_requested(&mut stop) => {
                shared.update(&module, |s| s.state = ModuleState::Stopped);
                return None;
            }
        }
    }
}

/// `exited with status 3; last lines: …`.
fn exit_reason(info: ExitInfo, log: &Mutex<LogFile>) -> String {
    let lines = last_lines(&lock(log).tail(), REASON_LINES, REASON_CHARS);
    if lines.is_empty() {
        info.to_string()
    } else {
        format!("{info}; last lines: {lines}")
    }
}

enum Ran {
    /// Stopped on request: the process and its group are gone.
    Stopped(ExitInfo),
    /// Exited by itself after this long.
    Exited(ExitInfo, Duration),
}

/// One run of a spawned process, until it exits or a stop is requested.
async fn run(
    shared: &Shared,
    spec: &RunSpec,
    dir: &Path,
    log: &Arc<Mutex<LogFile>>,
    child: &mut Child,
    pid: u32,
    stop: &mut watch::Receiver<bool>,
) -> Ran {
    let module = &spec.module;
    let started = Instant::now();
    // Without a record a host killed now would leave this process running
    // for ever; the run goes on (it is still supervised) but says so.
    match PidRecord::of(pid) {
        Some(rec) => {
            if let Err(e) = rec.write(dir) {
                tracing::error!(%module, error = %e, "could not record the pid");
            }
        }
        None => tracing::error!(%module, pid, "could not read the start time to record"),
    }
    let pumps = [
        child
            .stdout
            .take()
            .map(|r| tokio::spawn(pump(r, log.clone()))),
        child
            .stderr
            .take()
            .map(|r| tokio::spawn(pump(r, log.clone()))),
    ];
    let running_at = started + shared.opts.running_after;
    let mut marked = false;
    let mut stopping = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            _ = tokio::time::sleep_until(running_at), if !marked => {
                marked = true;
                shared.update(module, |s| {
                    s.state = ModuleState::Running;
                    s.reason = None;
                });
            }
            _ = stop_requested(stop), if !stopping => {
                stopping = true;
                break match &spec.container {
                    None => stop_child(child, pid, spec.stop_grace).await,
                    Some(c) => stop_container(child, pid, c, spec.stop_grace).await,
                };
            }
        }
    };
    let uptime = started.elapsed();
    // A client that ended by itself may leave its container running (see
    // `container`'s docs): it goes before the next run, not beside it.
    if !stopping
        && let Some(c) = &spec.container
        && let Err(e) = container::stop(&c.engine, &c.name(), Duration::ZERO).await
    {
        tracing::error!(%module, error = %e, "could not remove the container of an ended run");
    }
    // What the leader left in its group (a background child) goes with it,
    // so a restart never runs beside a previous run's processes. The pid is
    // not handed out again while the group lives, and pids are allocated
    // cyclically, so the instant after the reap cannot hit a stranger.
    let _ = procfs::signal_group(pid, libc::SIGKILL);
    if !procfs::wait_group_gone(pid, Duration::from_secs(2)).await {
        tracing::error!(%module, pid, "processes of the module's group survived SIGKILL");
    }
    for pump in pumps.into_iter().flatten() {
        let abort = pump.abort_handle();
        if tokio::time::timeout(DRAIN_LIMIT, pump).await.is_err() {
            abort.abort();
        }
    }
    if let Err(e) = procfs::remove_record(dir) {
        tracing::error!(%module, error = %e, "could not remove the pid record");
    }
    let info = match status {
        Ok(status) => ExitInfo::from_status(status),
        Err(e) => {
            tracing::error!(%module, error = %e, "could not wait for the module");
            ExitInfo {
                code: None,
                signal: None,
            }
        }
    };
    if stopping {
        shared.update(module, |s| {
            s.state = ModuleState::Stopped;
            s.pid = None;
        });
        Ran::Stopped(info)
    } else {
        Ran::Exited(info, uptime)
    }
}

/// SIGTERM to the group, SIGKILL to it once the grace passed, then reap.
async fn stop_child(
    child: &mut Child,
    pid: u32,
    grace: Duration,
) -> std::io::Result<std::process::ExitStatus> {
    let _ = procfs::signal_group(pid, libc::SIGTERM);
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            let _ = procfs::signal_group(pid, libc::SIGKILL);
            child.wait().await
        }
    }
}

/// The engine's stop by name (the grace, then its kill), then the client,
/// which ends with its container; SIGKILL to the client's group if it does
/// not within [`CLIENT_AFTER_STOP`].
async fn stop_container(
    child: &mut Child,
    pid: u32,
    c: &ContainerRun,
    grace: Duration,
) -> std::io::Result<std::process::ExitStatus> {
    if let Err(e) = container::stop(&c.engine, &c.name(), grace).await {
        tracing::error!(container = %c.name(), error = %e, "the engine could not stop the container");
    }
    match tokio::time::timeout(CLIENT_AFTER_STOP, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            let _ = procfs::signal_group(pid, libc::SIGKILL);
            child.wait().await
        }
    }
}

/// Spawns one run: the command, or for a container the engine's `run`
/// of its image (an archive loaded first, every time: the engine's store
/// may have lost it since). The error is the reason the module reports.
async fn launch(spec: &RunSpec) -> Result<Child, String> {
    let Some(c) = &spec.container else {
        let program = spec.command.first().map(String::as_str).unwrap_or("");
        return spawn(spec, &spec.command).map_err(|e| format!("could not start {program:?}: {e}"));
    };
    c.spec.check().map_err(|e| e.to_string())?;
    let image = match &c.spec.image {
        Image::Archive(path) => container::load_archive(&c.engine, path)
            .await
            .map_err(|e| format!("could not load the image archive: {e}"))?,
        Image::Reference(r) => r.clone(),
    };
    // What the image runs by itself, read now: the shim runs it after
    // adding the secret variables.
    let mut container_spec = c.spec.clone();
    if let Some(secret) = &mut container_spec.secret_env {
        secret.image = container::image_command(&c.engine, &image)
            .await
            .map_err(|e| format!("could not read what the image runs: {e}"))?;
    }
    let argv = container::run_argv(&c.engine, &container_spec, &image);
    spawn(spec, &argv).map_err(|e| format!("could not start {}: {e}", c.engine.display()))
}

fn spawn(spec: &RunSpec, argv: &[String]) -> std::io::Result<Child> {
    let Some((program, args)) = argv.split_first() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "empty command",
        ));
    };
    // A ready file left by the process before says nothing of this one.
    match std::fs::remove_file(spec.workdir.join(super::READY_FILE)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut cmd = Command::new(program);
    cmd.args(args).env_clear().envs(&spec.env);
    // The engine reads its configuration under HOME; the container gets
    // only the names it is given, never these.
    let inherited: &[&str] = if spec.container.is_some() {
        &["PATH", "HOME"]
    } else {
        &["PATH"]
    };
    for name in inherited {
        if !spec.env.contains_key(*name)
            && let Some(value) = std::env::var_os(name)
        {
            cmd.env(name, value);
        }
    }
    cmd.current_dir(&spec.workdir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so one signal reaches everything it forks.
        .process_group(0)
        // The driver stops modules itself; a dropped handle must not kill
        // a module behind the supervisor's back.
        .kill_on_drop(false);
    cmd.spawn()
}

/// Copies one output stream into the log until it closes. A log that cannot
/// be written (disk full) is reported once; the stream is still drained, or
/// the module would block on a full pipe.
async fn pump(mut from: impl AsyncRead + Unpin, log: Arc<Mutex<LogFile>>) {
    let mut buf = vec![0u8; 8192];
    let mut reported = false;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if let Err(e) = lock(&log).write(&buf[..n])
            && !std::mem::replace(&mut reported, true)
        {
            tracing::error!(error = %e, "could not write a module's log");
        }
    }
}

fn lock(log: &Mutex<LogFile>) -> std::sync::MutexGuard<'_, LogFile> {
    log.lock().unwrap_or_else(|p| p.into_inner())
}

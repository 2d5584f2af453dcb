//! The process driver (DESIGN §6 "Host"): runs each module in its own
//! process group with exactly its declared environment, writes its output to
//! a size-rotated log, restarts it with exponential backoff when it exits,
//! reports it `failed` (with its exit status and last log lines) once it
//! keeps failing, and stops it with SIGTERM to the group, then SIGKILL after
//! the grace. A driver created on a state directory first kills what a
//! previous host process left behind there.

use std::collections::BTreeMap;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mesh_core::names::Name;
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub mod container;
mod logfile;
mod procfs;
mod schedule;
mod supervise;

#[cfg(test)]
pub(crate) use logfile::LogFile;
pub use logfile::{LOG_FILE, last_lines, rotated_name, rotation_plan};
pub use procfs::{PID_FILE, PidRecord};
pub use schedule::{AfterExit, Schedule, state_at_spawn};

/// Where a module's log and pid record live, under the host's state dir.
pub const MODULES_DIR: &str = "modules";

/// What a module writes in its working directory to say it is ready
/// (`MESH_READY_FILE`); removed before each start, so a file there was
/// written by the process running now.
pub const READY_FILE: &str = ".mesh-ready";

/// What to run for one module. Debug shows the env's names only: values
/// may be secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct RunSpec {
    pub module: Name,
    /// argv; `argv[0]` is absolute or looked up on the `PATH` of `env`.
    pub command: Vec<String>,
    /// The module's whole environment: nothing of the host's is passed on,
    /// except `PATH` when this holds none (so `sh` or `env` still resolve).
    pub env: BTreeMap<String, String>,
    pub stop_grace: Duration,
    /// The module's working directory, created 0700 if missing.
    pub workdir: PathBuf,
    /// Set for a container module: the supervised process is the engine's
    /// foreground `run` (built at each spawn, after the archive is loaded),
    /// and `command` is ignored. `env` is then the engine's environment,
    /// from which it passes the container exactly `spec.env_names`.
    pub container: Option<ContainerRun>,
}

/// A container module's engine and container (DESIGN §6 "Container driver").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRun {
    pub engine: PathBuf,
    pub spec: container::ContainerSpec,
}

impl ContainerRun {
    /// `mesh-<node>-<module>-<host>`: what stops and removals address.
    pub fn name(&self) -> String {
        container::container_name(&self.spec.node, &self.spec.module, &self.spec.host)
    }
}

impl std::fmt::Debug for RunSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunSpec")
            .field("module", &self.module)
            .field("command", &self.command)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("stop_grace", &self.stop_grace)
            .field("workdir", &self.workdir)
            .field("container", &self.container)
            .finish()
    }
}

/// One name for a module's state, as the host reports it.
pub use mesh_core::report::ModuleState;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModuleStatus {
    pub module: Name,
    pub state: ModuleState,
    /// Spawns after the first one.
    pub restarts: u32,
    pub pid: Option<u32>,
    /// Why the last run ended (or could not start), e.g. `exited with
    /// status 3; last lines: …`. Cleared once a run counts as running.
    pub reason: Option<String>,
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl ExitInfo {
    pub fn from_status(status: ExitStatus) -> ExitInfo {
        use std::os::unix::process::ExitStatusExt as _;
        ExitInfo {
            code: status.code(),
            signal: status.signal(),
        }
    }
}

impl std::fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.code, self.signal) {
            (Some(code), _) => write!(f, "exited with status {code}"),
            (None, Some(sig)) => write!(f, "killed by signal {sig}"),
            (None, None) => write!(f, "ended (status unknown)"),
        }
    }
}

#[derive(Debug, Clone)]
pub struct DriverOptions {
    /// A log file is rotated before it passes this size.
    pub log_max_bytes: u64,
    /// Rotated files kept (`log.1` … `log.<keep>`).
    pub log_keep: usize,
    pub backoff_start: Duration,
    pub backoff_max: Duration,
    /// A run up this long resets the backoff and the failure count.
    pub reset_after: Duration,
    /// Consecutive quick failures before a module is `failed`.
    pub failed_after: u32,
    /// A run up this long is `running` (`starting` before).
    pub running_after: Duration,
    /// How long a leftover of a previous host gets after SIGTERM.
    pub leftover_grace: Duration,
    /// Nothing is spawned: a started module is `running` at once, and stays
    /// so until stopped. For `mesh-bench`'s simulated hosts, which measure
    /// the mesh and not the programs it runs.
    pub no_op: bool,
}

impl Default for DriverOptions {
    fn default() -> Self {
        DriverOptions {
            log_max_bytes: 1024 * 1024,
            log_keep: 3,
            backoff_start: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            reset_after: Duration::from_secs(60),
            failed_after: 3,
            running_after: Duration::from_secs(1),
            leftover_grace: Duration::from_secs(5),
            no_op: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("could not {action} {path}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("module {module} has an empty command; declare the program to run")]
    EmptyCommand { module: Name },
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> DriverError {
    let path = path.to_path_buf();
    move |source| DriverError::Io {
        action,
        path,
        source,
    }
}

/// State the driver and its supervising tasks share.
struct Shared {
    opts: DriverOptions,
    statuses: Mutex<BTreeMap<Name, ModuleStatus>>,
    changes: watch::Sender<u64>,
}

impl Shared {
    /// Changes one module's status and bumps the watch. A poisoned lock
    /// (a panic elsewhere) still holds usable statuses, so it is taken.
    fn update(&self, module: &Name, change: impl FnOnce(&mut ModuleStatus)) {
        {
            let mut statuses = self.statuses.lock().unwrap_or_else(|p| p.into_inner());
            let status = statuses
                .entry(module.clone())
                .or_insert_with(|| ModuleStatus {
                    module: module.clone(),
                    state: ModuleState::Starting,
                    restarts: 0,
                    pid: None,
                    reason: None,
                });
            change(status);
        }
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn state(&self, module: &Name) -> Option<ModuleState> {
        let statuses = self.statuses.lock().unwrap_or_else(|p| p.into_inner());
        statuses.get(module).map(|s| s.state)
    }
}

/// One module's status, read without the driver.
#[derive(Clone)]
pub struct StatusReader(Arc<Shared>);

impl StatusReader {
    pub fn get(&self, module: &Name) -> Option<ModuleStatus> {
        let statuses = self.0.statuses.lock().unwrap_or_else(|p| p.into_inner());
        statuses.get(module).cloned()
    }
}

/// One module's supervising task.
struct Task {
    spec: RunSpec,
    stop: watch::Sender<bool>,
    handle: JoinHandle<Option<ExitInfo>>,
}

/// Dropping a driver stops its modules in the background (their
/// supervisors see it go); a runtime shutting down may cut that short, and
/// then the next [`Driver::new`] on the directory kills what is left.
pub struct Driver {
    modules_dir: PathBuf,
    shared: Arc<Shared>,
    tasks: Mutex<BTreeMap<Name, Task>>,
    /// Serialises start and stop, so a start racing a stop of the same
    /// module cannot leave two supervisors running it.
    ops: tokio::sync::Mutex<()>,
}

impl Driver {
    /// `dir` is the host's state dir; module logs and pid records go under
    /// `dir/modules/<module>/`. Kills what a previous host process left
    /// running there first (see [`PidRecord::is_ours_and_alive`]).
    pub async fn new(dir: &Path, opts: DriverOptions) -> Result<Driver, DriverError> {
        let modules_dir = dir.join(MODULES_DIR);
        make_private_dir(&modules_dir)?;
        let entries = std::fs::read_dir(&modules_dir).map_err(io_err("read", &modules_dir))?;
        let mut dirs = Vec::new();
        for entry in entries {
            let path = entry.map_err(io_err("read", &modules_dir))?.path();
            if path.is_dir() {
                dirs.push(path);
            }
        }
        // All at once: each leftover may take the whole grace.
        let grace = opts.leftover_grace;
        let outcomes = futures::future::join_all(dirs.into_iter().map(|path| async move {
            let outcome = procfs::kill_leftover(&path, grace).await;
            (path, outcome)
        }))
        .await;
        for (path, outcome) in outcomes {
            match outcome {
                Ok(None) => {}
                Ok(Some(outcome)) => {
                    tracing::info!(dir = %path.display(), "pid record of a previous host: {outcome}")
                }
                Err(source) => {
                    return Err(DriverError::Io {
                        action: "clear the pid record in",
                        path,
                        source,
                    });
                }
            }
        }
        let (changes, _) = watch::channel(0);
        Ok(Driver {
            modules_dir,
            shared: Arc::new(Shared {
                opts,
                statuses: Mutex::new(BTreeMap::new()),
                changes,
            }),
            tasks: Mutex::new(BTreeMap::new()),
            ops: tokio::sync::Mutex::new(()),
        })
    }

    /// Starts `spec.module` and returns once its first spawn was tried; one
    /// already running with the same spec is left alone, one running with
    /// another spec is stopped first. A program that
    /// cannot be spawned is not an error here: the module is `failed` with
    /// the reason and retried with backoff, like one that exits.
    pub async fn start(&self, spec: RunSpec) -> Result<(), DriverError> {
        // A container may run its image's own entrypoint without arguments.
        if spec.container.is_none() && spec.command.is_empty() {
            return Err(DriverError::EmptyCommand {
                module: spec.module.clone(),
            });
        }
        if self.shared.opts.no_op {
            self.set_no_op(&spec.module, ModuleState::Running);
            return Ok(());
        }
        let _op = self.ops.lock().await;
        let current = {
            let mut tasks = self.lock_tasks();
            match tasks.get(&spec.module) {
                Some(t) if t.spec == spec && !t.handle.is_finished() => return Ok(()),
                Some(_) => tasks.remove(&spec.module),
                None => None,
            }
        };
        if let Some(task) = current {
            self.finish(&spec.module, task).await;
        }
        let dir = self.modules_dir.join(spec.module.as_str());
        make_private_dir(&dir)?;
        make_private_dir(&spec.workdir)?;
        let log = logfile::LogFile::open(
            &dir,
            self.shared.opts.log_max_bytes,
            self.shared.opts.log_keep,
        )
        .map_err(io_err("open the log in", &dir))?;
        self.shared.update(&spec.module, |s| {
            *s = ModuleStatus {
                module: spec.module.clone(),
                state: ModuleState::Starting,
                restarts: 0,
                pid: None,
                reason: None,
            }
        });
        let (stop, stop_rx) = watch::channel(false);
        let (spawned, first_spawn) = tokio::sync::oneshot::channel();
        let handle = tokio::spawn(supervise::supervise(
            self.shared.clone(),
            spec.clone(),
            dir,
            log,
            stop_rx,
            spawned,
        ));
        // Registered before the wait: a caller that gives up on `start`
        // still leaves the module supervised, and stoppable.
        self.lock_tasks()
            .insert(spec.module.clone(), Task { spec, stop, handle });
        // The first spawn is tried before `start` returns, so the pid (or
        // the reason it could not start) is there for the caller.
        let _ = first_spawn.await;
        Ok(())
    }

    /// Stops `module`: SIGTERM to its group, SIGKILL after its grace, and
    /// waits until the process is reaped and its pid record removed. `None`
    /// when no process was running (unknown module, or between restarts).
    pub async fn stop(&self, module: &Name) -> Result<Option<ExitInfo>, DriverError> {
        if self.shared.opts.no_op {
            self.set_no_op(module, ModuleState::Stopped);
            return Ok(None);
        }
        let _op = self.ops.lock().await;
        let task = self.lock_tasks().remove(module);
        match task {
            Some(task) => Ok(self.finish(module, task).await),
            None => Ok(None),
        }
    }

    /// Stops every module, all at once.
    pub async fn stop_all(&self) {
        let _op = self.ops.lock().await;
        let tasks: Vec<(Name, Task)> = std::mem::take(&mut *self.lock_tasks())
            .into_iter()
            .collect();
        futures::future::join_all(tasks.into_iter().map(|(m, t)| async move {
            self.finish(&m, t).await;
        }))
        .await;
    }

    /// A no-op driver's status change. No change is signalled: the module
    /// changes only when a declaration changes it, and the apply reports.
    fn set_no_op(&self, module: &Name, state: ModuleState) {
        let mut statuses = self
            .shared
            .statuses
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        statuses.insert(
            module.clone(),
            ModuleStatus {
                module: module.clone(),
                state,
                restarts: 0,
                pid: None,
                reason: None,
            },
        );
    }

    /// One status per module this driver started (stopped ones included).
    pub fn status(&self) -> Vec<ModuleStatus> {
        let statuses = self
            .shared
            .statuses
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        statuses.values().cloned().collect()
    }

    /// Bumps on every change of a status.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.shared.changes.subscribe()
    }

    /// Reads statuses from elsewhere (a health checker), as they change.
    pub fn reader(&self) -> StatusReader {
        StatusReader(self.shared.clone())
    }

    /// The pid (and process group) of `module`'s running process.
    pub fn pid(&self, module: &Name) -> Option<u32> {
        let statuses = self
            .shared
            .statuses
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        statuses.get(module).and_then(|s| s.pid)
    }

    fn lock_tasks(&self) -> std::sync::MutexGuard<'_, BTreeMap<Name, Task>> {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Tells a supervisor to stop and waits for it. A supervisor that died
    /// (it should not) still leaves the module marked stopped.
    async fn finish(&self, module: &Name, task: Task) -> Option<ExitInfo> {
        let _ = task.stop.send(true);
        match task.handle.await {
            Ok(info) => info,
            Err(e) => {
                tracing::error!(%module, error = %e, "module supervisor ended abnormally");
                self.shared.update(module, |s| {
                    s.state = ModuleState::Stopped;
                    s.pid = None;
                });
                None
            }
        }
    }
}

/// Kills (SIGKILL, no grace) every module group a driver on the host state
/// dir `dir` recorded and is still running; returns their pids. For a host
/// forced to exit at once; an orderly stop is [`Driver::stop_all`].
pub fn kill_recorded(dir: &Path) -> Vec<u32> {
    procfs::kill_recorded(&dir.join(MODULES_DIR))
}

/// Creates `dir` (and parents) 0700: it holds a module's log and files.
fn make_private_dir(dir: &Path) -> Result<(), DriverError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_err("create", dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_serialise_as_the_report_spells_them() {
        let states = [
            ModuleState::Starting,
            ModuleState::Running,
            ModuleState::Failed,
            ModuleState::Stopped,
        ];
        let json = serde_json::to_string(&states).unwrap();
        assert_eq!(json, r#"["starting","running","failed","stopped"]"#);
        let status = ModuleStatus {
            module: Name::new("web").unwrap(),
            state: ModuleState::Failed,
            restarts: 4,
            pid: None,
            reason: Some("exited with status 3".into()),
        };
        assert_eq!(
            serde_json::to_value(&status).unwrap(),
            serde_json::json!({"module": "web", "state": "failed", "restarts": 4,
                "pid": null, "reason": "exited with status 3"})
        );
    }

    #[test]
    fn an_exit_names_its_status_or_signal() {
        let e = |code, signal| ExitInfo { code, signal }.to_string();
        assert_eq!(e(Some(3), None), "exited with status 3");
        assert_eq!(e(None, Some(9)), "killed by signal 9");
        assert_eq!(e(None, None), "ended (status unknown)");
    }

    #[test]
    fn a_spec_shows_env_names_but_never_values() {
        let spec = RunSpec {
            module: Name::new("web").unwrap(),
            command: vec!["web".into()],
            env: BTreeMap::from([("API_TOKEN".into(), "s3cr3t-value".into())]),
            stop_grace: Duration::from_secs(1),
            workdir: PathBuf::from("/srv/web"),
            container: None,
        };
        let shown = format!("{spec:?}");
        assert!(shown.contains("API_TOKEN"), "{shown}");
        assert!(!shown.contains("s3cr3t-value"), "{shown}");
    }
}

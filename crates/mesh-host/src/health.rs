//! Health (DESIGN "health and deploys"): one checker task per started
//! module runs its `[health]` check every interval while the driver says
//! it is running, and keeps what the report says — `starting` until the
//! check has passed for `healthy_after`, `healthy` (for how long) after,
//! `unhealthy` with the check's last output once it failed
//! [`FAILURES_UNHEALTHY`] times in a row. A module without `[health]`
//! passes whenever it runs. A new process (a restart, a new pid) starts
//! the count again: what a deployment waits for is the version it moved
//! to, never the one before.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mesh_core::declaration::{CheckDecl, HealthDecl};
use mesh_core::manifest::{DEFAULT_HEALTHY_AFTER_MS, DEFAULT_INTERVAL_MS};
use mesh_core::names::Name;
use mesh_core::report::{FAILURES_UNHEALTHY, MAX_HEALTH_REASON, ModuleHealth, ModuleState};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::driver::StatusReader;

mod probe;

pub use probe::Probe;

/// What one module's checker has seen.
#[derive(Debug, Default)]
struct Seen {
    /// When the check started passing without a break (this pid).
    passing_since: Option<Instant>,
    failures: u32,
    last_output: Option<String>,
    pid: Option<u32>,
}

struct Checker {
    seen: Arc<Mutex<Seen>>,
    healthy_after: Duration,
    task: JoinHandle<()>,
}

impl Drop for Checker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Every module's checker; one per host.
pub struct Health {
    checkers: Mutex<BTreeMap<Name, Checker>>,
    /// Bumped when a module's health changes state (not as it ages): the
    /// host reports then.
    changes: watch::Sender<u64>,
    driver: StatusReader,
}

impl Health {
    pub fn new(driver: StatusReader) -> Health {
        Health {
            checkers: Mutex::new(BTreeMap::new()),
            changes: watch::channel(0).0,
            driver,
        }
    }

    pub fn watch(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Name, Checker>> {
        self.checkers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks `module` afresh (it was just started): its checker, if any,
    /// is replaced and what it saw forgotten.
    pub fn check(&self, module: &Name, decl: Option<&HealthDecl>, probe: Probe) {
        let (interval, timeout, healthy_after) = match decl {
            Some(h) => (h.interval_ms, h.timeout_ms, h.healthy_after_ms),
            None => (
                DEFAULT_INTERVAL_MS,
                DEFAULT_INTERVAL_MS,
                DEFAULT_HEALTHY_AFTER_MS,
            ),
        };
        let healthy_after = Duration::from_millis(healthy_after);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let task = tokio::spawn(run(
            module.clone(),
            probe,
            Duration::from_millis(interval),
            Duration::from_millis(timeout),
            healthy_after,
            seen.clone(),
            self.driver.clone(),
            self.changes.clone(),
        ));
        self.lock().insert(
            module.clone(),
            Checker {
                seen,
                healthy_after,
                task,
            },
        );
    }

    /// Stops checking `module` (stopped, or no longer declared).
    pub fn forget(&self, module: &Name) {
        self.lock().remove(module);
    }

    /// `module`'s health now; `state` is the driver's.
    pub fn of(&self, module: &Name, state: ModuleState, reason: Option<&str>) -> ModuleHealth {
        if state == ModuleState::Failed {
            return ModuleHealth::Unhealthy {
                reason: tail(reason.unwrap_or("the process keeps exiting")),
            };
        }
        let checkers = self.lock();
        let Some(c) = checkers.get(module) else {
            return ModuleHealth::Starting;
        };
        let seen = c.seen.lock().unwrap_or_else(|p| p.into_inner());
        verdict(&seen, c.healthy_after, Instant::now())
    }
}

/// What `seen` says at `now`.
fn verdict(seen: &Seen, healthy_after: Duration, now: Instant) -> ModuleHealth {
    if seen.failures >= FAILURES_UNHEALTHY {
        return ModuleHealth::Unhealthy {
            reason: tail(seen.last_output.as_deref().unwrap_or("the check failed")),
        };
    }
    match seen.passing_since {
        Some(since) if now.duration_since(since) >= healthy_after => ModuleHealth::Healthy {
            for_ms: u64::try_from(now.duration_since(since).as_millis()).unwrap_or(u64::MAX),
        },
        _ => ModuleHealth::Starting,
    }
}

/// The last [`MAX_HEALTH_REASON`] bytes of `s`, on a char boundary.
fn tail(s: &str) -> String {
    let s = s.trim();
    let mut start = s.len().saturating_sub(MAX_HEALTH_REASON);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    s[start..].to_string()
}

#[allow(clippy::too_many_arguments)]
async fn run(
    module: Name,
    probe: Probe,
    interval: Duration,
    timeout: Duration,
    healthy_after: Duration,
    seen: Arc<Mutex<Seen>>,
    driver: StatusReader,
    changes: watch::Sender<u64>,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // What the report said last: a change of it is reported.
    let mut said = ModuleHealth::Starting.as_str();
    loop {
        tick.tick().await;
        let status = driver.get(&module);
        let running = status
            .as_ref()
            .filter(|s| s.state == ModuleState::Running)
            .map(|s| s.pid);
        let outcome = match running {
            None => None,
            Some(_) => Some(probe.run(timeout).await),
        };
        let now = Instant::now();
        let verdict = {
            let mut s = seen.lock().unwrap_or_else(|p| p.into_inner());
            match (running, outcome) {
                (None, _) | (_, None) => *s = Seen::default(),
                (Some(pid), Some(result)) => {
                    if s.pid != pid {
                        *s = Seen {
                            pid,
                            ..Seen::default()
                        };
                    }
                    match result {
                        Ok(()) => {
                            s.failures = 0;
                            s.passing_since.get_or_insert(now);
                        }
                        Err(output) => {
                            s.failures = s.failures.saturating_add(1);
                            s.passing_since = None;
                            s.last_output = Some(output);
                        }
                    }
                }
            }
            verdict(&s, healthy_after, now)
        };
        if verdict.as_str() != said {
            said = verdict.as_str();
            tracing::info!(%module, health = said, "module health changed");
            changes.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

impl Probe {
    /// The check `decl` says, run where `spec` runs the module: an exec
    /// check of a container module runs inside it, through the engine.
    pub fn for_module(decl: Option<&HealthDecl>, spec: &crate::driver::RunSpec) -> Probe {
        let Some(h) = decl else {
            return Probe::Running;
        };
        match &h.check {
            CheckDecl::Http(url) => Probe::Http { url: url.clone() },
            CheckDecl::Tcp(address) => Probe::Tcp {
                address: address.clone(),
            },
            CheckDecl::Sdk => Probe::Ready {
                file: spec.workdir.join(crate::driver::READY_FILE),
            },
            CheckDecl::Exec(argv) => {
                let argv = match &spec.container {
                    Some(c) => [c.engine.display().to_string(), "exec".into(), c.name()]
                        .into_iter()
                        .chain(argv.iter().cloned())
                        .collect(),
                    None => argv.clone(),
                };
                Probe::Exec {
                    argv,
                    within: ExecIn {
                        env: spec.env.clone(),
                        workdir: spec.workdir.clone(),
                    },
                }
            }
        }
    }
}

/// Where an exec check runs: the module's environment and directory.
#[derive(Debug, Clone)]
pub struct ExecIn {
    pub env: BTreeMap<String, String>,
    pub workdir: PathBuf,
}

#[cfg(test)]
mod tests;

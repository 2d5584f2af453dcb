//! `mesh assign|unassign --wait`: after the change is recorded, wait for
//! the controller's new declaration of the node and then for the node's
//! report answering it, and say how the module came out.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use mesh_core::declaration;
use mesh_core::names::Name;
use mesh_store::{ModuleState, Store};

use crate::output;
use crate::progress::Progress;
use crate::state::MeshArgs;

/// How often the store is read while waiting.
const POLL: Duration = Duration::from_millis(200);

/// What the wait is for.
pub struct Wanted<'a> {
    pub module: &'a Name,
    pub node: &'a Name,
    /// Assigned (wait for running or failed) or unassigned (wait for gone).
    pub assigned: bool,
}

/// Waits for the declaration that carries the change just written, then
/// for the report answering it; exit 1 when the module failed or the host
/// refused the declaration.
pub async fn answered(
    store: &Store,
    mesh: &MeshArgs,
    w: &Wanted<'_>,
    timeout: Duration,
) -> anyhow::Result<ExitCode> {
    // Read after the change was written: the revision it produced, or a
    // later one. A declaration composed from an older revision does not
    // carry it (a module already declared at another version would pass
    // for the answer: the old program still running).
    let revision = store.records_revision().await?;
    answered_from(store, mesh, w, revision, Instant::now() + timeout, timeout).await
}

/// `answered` for every one of `wanted` in turn, within one `timeout`;
/// exit 1 when any failed.
pub async fn all_answered(
    store: &Store,
    mesh: &MeshArgs,
    wanted: &[Wanted<'_>],
    timeout: Duration,
) -> anyhow::Result<ExitCode> {
    let revision = store.records_revision().await?;
    let deadline = Instant::now() + timeout;
    let mut code = ExitCode::SUCCESS;
    for w in wanted {
        if answered_from(store, mesh, w, revision, deadline, timeout).await? != ExitCode::SUCCESS {
            code = ExitCode::FAILURE;
        }
    }
    Ok(code)
}

async fn answered_from(
    store: &Store,
    mesh: &MeshArgs,
    w: &Wanted<'_>,
    revision: i64,
    deadline: Instant,
    timeout: Duration,
) -> anyhow::Result<ExitCode> {
    let dir = mesh.dir()?;
    let genesis = mesh_controller::Genesis::open(&dir)
        .with_context(|| format!("reading the controller's key in {}", dir.display()))?;
    let key = declaration::verifying_key(&genesis.signing_key)
        .context("the controller's signing key in the genesis is not a key")?;
    let (module, node) = (w.module, w.node);
    let mut progress = Progress::start(format!(
        "waiting for the controller to declare the change to {node}"
    ));
    let sequence = loop {
        // Once the controller has composed every declaration from these
        // records, the node's newest one is the answer to the change: the
        // one just composed, or the one that already had it (an assignment
        // made twice has nothing new to declare).
        let declared = store
            .declared_through()
            .await?
            .is_some_and(|d| d >= revision);
        if declared && let Some(d) = store.latest_declaration(node).await? {
            // Read through the signature check a host applies: a record
            // that does not verify is not what the node will run.
            let decl = declaration::verify(d.body.as_bytes(), &key, node, None)
                .with_context(|| format!("the recorded declaration {} of {node}", d.version))?;
            if decl.modules.iter().any(|m| m.name == *module) == w.assigned {
                break d.version;
            }
        }
        // Refused by the controller: the module stays out of the node's
        // declaration until the reason is mended, so there is nothing to
        // wait for. Read once the pass of these records has written what
        // it left out, never a row of an earlier one.
        if declared
            && w.assigned
            && let Some(l) = store
                .left_out()
                .await?
                .into_iter()
                .find(|l| l.node == *node && l.module == *module)
        {
            progress.finish(None);
            output::print(&format!(
                "{module} on {node}: left out of the declaration: {}\n",
                l.reason
            ))?;
            return Ok(ExitCode::FAILURE);
        }
        // A node is declared once its host has enrolled: until then the
        // controller is not the one to wait for.
        let enrolled = store
            .node(node)
            .await?
            .is_some_and(|n| n.enrolled_at.is_some());
        if !enrolled {
            progress.set(format!(
                "waiting for {node}'s host to enrol (its declaration is made then)"
            ));
        }
        if Instant::now() > deadline {
            progress.finish(None);
            if !enrolled {
                bail!(
                    "{node} has not enrolled within {}s: start its host with the token `mesh node add {node}` printed (`mesh host --token …`); its declaration is made then",
                    timeout.as_secs()
                );
            }
            if !declared {
                bail!(
                    "the controller has not declared records revision {revision} within {}s; is `mesh controller` running? (its log says why a pass failed)",
                    timeout.as_secs()
                );
            }
            bail!(
                "the controller declared no change to {node} within {}s; is `mesh controller` running?",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(POLL).await;
    };
    progress.set(format!(
        "waiting for {node} to report declaration {sequence}"
    ));
    loop {
        if let Some(r) = store.latest_report(node).await?
            && r.report.declaration_version >= sequence
        {
            if let Some(why) = &r.report.refused {
                progress.finish(None);
                output::print(&format!("{node} refused declaration {sequence}: {why}\n"))?;
                return Ok(ExitCode::FAILURE);
            }
            let state = r
                .report
                .outcomes
                .iter()
                .find(|o| o.module == *module)
                .map(|o| (&o.state, o.restarts));
            let ended = match (w.assigned, state) {
                (true, Some((ModuleState::Running, _))) => Some((
                    format!("{module} on {node}: running (declaration {sequence})"),
                    ExitCode::SUCCESS,
                )),
                (true, Some((ModuleState::Failed { reason }, _))) => Some((
                    format!("{module} on {node}: failed (declaration {sequence}): {reason}"),
                    ExitCode::FAILURE,
                )),
                (false, None | Some((ModuleState::Stopped, _))) => Some((
                    format!("{module} on {node}: stopped (declaration {sequence})"),
                    ExitCode::SUCCESS,
                )),
                (_, Some((_, restarts))) => {
                    progress.set(format!(
                        "{module} on {node}: starting (restarts {restarts})"
                    ));
                    None
                }
                (true, None) => None,
            };
            if let Some((line, code)) = ended {
                progress.finish(None);
                output::print(&format!("{line}\n"))?;
                return Ok(code);
            }
        }
        if Instant::now() > deadline {
            progress.finish(None);
            bail!(
                "{node} did not report {module} within {}s of declaration {sequence}; `mesh reports {node}` shows what it said",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// How a wait for a change to be in force on the broker ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Live {
    /// A live composition covers the change.
    Confirmed,
    /// Not confirmed: why, for the operator (the change is recorded).
    Unconfirmed(String),
}

/// Waits until the controller records a live composition of the records at
/// `revision` or later (what the broker then serves), for `timeout` at most.
/// A broker that is not running on this machine ends the wait at once:
/// nothing can go live before it runs.
pub async fn live(
    store: &Store,
    mesh: &MeshArgs,
    revision: i64,
    timeout: Duration,
) -> anyhow::Result<Live> {
    let covered =
        |l: Option<mesh_store::LiveComposition>| l.is_some_and(|l| l.records_revision >= revision);
    if covered(store.composition_live().await?) {
        return Ok(Live::Confirmed);
    }
    if let Some(why) = broker_not_running(mesh) {
        return Ok(Live::Unconfirmed(why));
    }
    let deadline = Instant::now() + timeout;
    let progress = Progress::start(format!(
        "waiting for the controller to put records revision {revision} in force on the broker"
    ));
    loop {
        tokio::time::sleep(POLL / 2).await;
        if covered(store.composition_live().await?) {
            progress.finish(None);
            return Ok(Live::Confirmed);
        }
        if Instant::now() > deadline {
            progress.finish(None);
            return Ok(Live::Unconfirmed(format!(
                "the controller confirmed no composition of it within {}s (is `mesh controller` running?)",
                timeout.as_secs()
            )));
        }
    }
}

/// Why the broker of `mesh.dir` is not running, when the pid file it
/// writes says so; none when it runs or this machine cannot tell (no
/// genesis here: the store may be another machine's).
fn broker_not_running(mesh: &MeshArgs) -> Option<String> {
    let dir = mesh.dir().ok()?;
    let genesis = mesh_controller::Genesis::open(&dir).ok()?;
    let pid_files = genesis.broker_pid_files();
    // A cluster's servers may run on other machines: only when none of
    // them runs here, and none is elsewhere, is that the reason.
    if pid_files.iter().any(|f| runs(f)) || !genesis.addresses.is_empty() && pid_files.len() > 1 {
        return None;
    }
    let pid_file = &pid_files[0];
    Some(format!(
        "the broker is not running ({} names no running process)",
        pid_file.display()
    ))
}

/// Whether the pid file names a running process.
fn runs(pid_file: &std::path::Path) -> bool {
    let Ok(text) = std::fs::read_to_string(pid_file) else {
        return false;
    };
    let Some(pid) = text.trim().parse::<libc::pid_t>().ok().filter(|p| *p > 0) else {
        return false;
    };
    // SAFETY: kill(2) with signal 0 sends nothing; it only asks whether
    // the process exists (EPERM: it does, as another user's).
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    alive || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

//! The local part of `mesh up`: the local host enrolled and run, the
//! summary printed, the wait for its first report and for a signal (the
//! broker started again meanwhile if it exits), then the host stopped
//! while the broker is still up.

use std::path::Path;
use std::time::Duration;

use mesh_controller::Genesis;
use mesh_core::names::Name;
use mesh_core::token::Token;
use tokio::sync::watch;

use super::foundation::Foundation;
use super::records::Prepared;
use super::{LOCAL_NODE, postgres, stopped};
use crate::progress::Progress;
use crate::shutdown::Signals;
use crate::{authority, host, output};

/// What the local part of `mesh up` works with.
pub(super) struct Local<'a> {
    pub dir: &'a Path,
    pub genesis: &'a Genesis,
    pub url: &'a str,
    pub signals: &'a Signals,
    pub stop_tx: &'a watch::Sender<bool>,
}

impl Local<'_> {
    /// The local host, the catalogue, and the wait for a signal (keeping
    /// the broker up meanwhile); returns once everything should stop, the
    /// host stopped.
    pub async fn run(
        &self,
        broker: &mut Foundation,
        prepared: Prepared,
        mut http_bound: tokio::sync::mpsc::UnboundedReceiver<Option<std::net::SocketAddr>>,
    ) -> anyhow::Result<()> {
        let Prepared { assigned, seen, .. } = prepared;
        let host_dir = self.dir.join("host");
        // The controller could not start.
        let ended = stopped(self.stop_tx.subscribe());
        tokio::pin!(ended);
        // Nothing of this needs stopping: a signal drops it where it is.
        let host = tokio::select! {
            r = self.host(&host_dir) => r?,
            () = self.signals.first() => return Ok(()),
            () = &mut ended => return Ok(()),
        };
        let mut host_task = {
            let stop = stopped(self.stop_tx.subscribe());
            tokio::spawn(async move {
                // The local node is reached where everything else here is.
                let opts = mesh_host::HostOptions {
                    advertise: Some("127.0.0.1".into()),
                    ..mesh_host::HostOptions::default()
                };
                mesh_host::run(&host, &opts, stop).await
            })
        };
        // Where the controller bound HTTP (decided early in its start; none
        // if it ended before).
        let http = http_bound.recv().await.flatten();
        output::daemon_line(print_summary(
            self.dir,
            self.genesis,
            &assigned,
            http,
            broker,
        ));
        let reported = reported(self.url, &assigned, seen);
        tokio::pin!(reported);
        let mut waiting = !assigned.is_empty();
        let mut failure = None;
        loop {
            tokio::select! {
                () = self.signals.first() => break,
                () = &mut ended => break,
                r = &mut reported, if waiting => {
                    waiting = false;
                    if let Err(e) = r {
                        tracing::warn!(error = %format!("{e:#}"), "could not read the local node's reports");
                    }
                }
                (what, status, log) = broker.exited() => {
                    let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
                    tracing::warn!(%status, log = %log.display(), "{what} exited; starting it again");
                    let restarted = tokio::select! {
                        r = async {
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            broker.start().await
                        } => r,
                        () = self.signals.first() => break,
                    };
                    if let Err(e) = restarted {
                        failure = Some(e);
                        break;
                    }
                }
            }
        }
        output::note("up: stopping");
        // The host stops its modules while the broker is still up.
        let _ = self.stop_tx.send(true);
        broker.stop_standby().await;
        match tokio::time::timeout(host::STOP_LIMIT, &mut host_task).await {
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "the host stopped with an error"),
            Ok(Err(e)) => tracing::warn!(error = %e, "the host task failed"),
            Ok(Ok(Ok(()))) => tracing::info!("host stopped"),
            Err(_) => {
                tracing::warn!(limit = ?host::STOP_LIMIT, "the host did not stop in time; killing its modules");
                host_task.abort();
                host::kill_modules(&host_dir);
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// The enrolled local host, enrolled now if it is not.
    async fn host(&self, host_dir: &Path) -> anyhow::Result<mesh_host::HostState> {
        if let Ok(s) = mesh_host::HostState::open(host_dir) {
            return Ok(s);
        }
        let enrolling = Progress::start(format!("up: enrolling node {LOCAL_NODE}"));
        let host = enrol_local(self.genesis, self.url, host_dir).await?;
        enrolling.finish(Some(&format!("up: node {LOCAL_NODE} enrolled")));
        Ok(host)
    }
}

/// A token for the local node, spent by an enrolment in this process.
async fn enrol_local(
    genesis: &Genesis,
    url: &str,
    host_dir: &Path,
) -> anyhow::Result<mesh_host::HostState> {
    let node = Name::new(LOCAL_NODE).expect("a valid name");
    let store = authority::open_store(url).await?;
    if store.node(&node).await?.is_none() {
        store.add_node(&node, &[]).await?;
    }
    let issued = store.issue_token(&node, Duration::from_secs(600)).await;
    // The token's key is admitted once a composition of the records that
    // hold it is live: enrolling before is refused (and logged by the
    // broker as an authentication error) until then.
    if issued.is_ok() {
        token_live(&store).await;
    }
    store.close().await;
    let issued = issued?;
    let token = Token {
        // Every server: the host fails over among them.
        bus_urls: genesis.local_urls(),
        cert_sha256: genesis.cert_sha256.clone(),
        controller_key: genesis.signing_key.clone(),
        node,
        enrolment_seed: issued.secret,
        expires_at: u64::try_from(issued.expires_at).unwrap_or(0),
    };
    Ok(mesh_host::enrol(&token, host_dir, &mesh_host::EnrolOptions::default()).await?)
}

/// Waits (a few seconds at most: the host's own retries cover the rest)
/// until the controller confirms a composition of the records as they are
/// now.
async fn token_live(store: &mesh_store::Store) {
    let Ok(revision) = store.records_revision().await else {
        return;
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        if let Ok(Some(l)) = store.composition_live().await
            && l.records_revision >= revision
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until a report of the local node newer than `seen` (the newest
/// before this run: it may say `running` of processes a previous run
/// stopped) says how each assigned module came out (running or failed),
/// showing progress meanwhile.
async fn reported(url: &str, assigned: &[Name], seen: Option<i64>) -> anyhow::Result<()> {
    use mesh_store::ModuleState;
    let node = Name::new(LOCAL_NODE).expect("a valid name");
    let mut progress = Progress::start(format!("up: waiting for node {LOCAL_NODE} to report"));
    let store = authority::open_existing_store(url).await?;
    let result = async {
        loop {
            let latest = store
                .latest_report(&node)
                .await?
                .filter(|r| seen.is_none_or(|s| r.id > s));
            let states: Vec<(&Name, Option<&ModuleState>)> = assigned
                .iter()
                .map(|m| {
                    let o = latest
                        .as_ref()
                        .and_then(|r| r.report.outcomes.iter().find(|o| o.module == *m));
                    (m, o.map(|o| &o.state))
                })
                .collect();
            let settled = |s: &Option<&ModuleState>| {
                matches!(s, Some(ModuleState::Running | ModuleState::Failed { .. }))
            };
            let pending: Vec<&str> = states
                .iter()
                .filter(|(_, s)| !settled(s))
                .map(|(m, _)| m.as_str())
                .collect();
            if pending.is_empty() {
                break anyhow::Ok(
                    states
                        .iter()
                        .map(|(m, s)| match s {
                            Some(ModuleState::Running) => format!("{m} running"),
                            _ => format!("{m} failed (`mesh reports {LOCAL_NODE}` says why)"),
                        })
                        .collect::<Vec<_>>()
                        .join(", "),
                );
            }
            progress.set(format!(
                "up: waiting for node {LOCAL_NODE} to report {}",
                pending.join(", ")
            ));
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    .await;
    store.close().await;
    let outcome = result?;
    progress.finish(Some(&format!("up: node {LOCAL_NODE} reports {outcome}")));
    Ok(())
}

fn print_summary(
    dir: &Path,
    genesis: &Genesis,
    assigned: &[Name],
    http: Option<std::net::SocketAddr>,
    foundation: &Foundation,
) -> Result<(), output::StdoutError> {
    let mut out = output::Stdout::lock();
    out.line(format_args!("mesh up: {}", dir.display()))?;
    match genesis.replicas {
        1 => out.line(format_args!("  broker      {}", genesis.local_url()))?,
        n => out.line(format_args!(
            "  broker      {n} servers, every stream on each: {}",
            genesis.local_urls().join(", ")
        ))?,
    }
    if let Some(pg) = &foundation.postgres {
        out.line(format_args!(
            "  store       PostgreSQL (pid {}), data in {}, its URL in {}",
            pg.pid().map_or("?".into(), |p| p.to_string()),
            pg.data().display(),
            dir.join(postgres::STORE_URL_FILE).display()
        ))?;
    }
    if let Some(s) = &foundation.standby {
        out.line(format_args!(
            "  controllers this process and pid {} ({}log {}): one active, one standing by",
            s.pid().map_or("?".into(), |p| p.to_string()),
            s.http.map_or(String::new(), |a| format!("http://{a}/, ")),
            s.log.display()
        ))?;
    }
    out.line(format_args!(
        "  node        {LOCAL_NODE} (state in {})",
        dir.join("host").display()
    ))?;
    if assigned.is_empty() {
        out.line("  modules     none runnable here (build examples/modules to get mesh-echo)")?;
    }
    for m in assigned {
        let module_dir = dir.join("host/modules").join(m.as_str());
        out.line(format_args!(
            "  module      {m} on {LOCAL_NODE}: log {}, files in {}",
            module_dir.join("log").display(),
            module_dir.join("work").display()
        ))?;
    }
    match http {
        Some(addr) => out.line(format_args!(
            "  dashboard   http://{addr}/ (/metrics, /api/status)"
        ))?,
        None => out.line("  dashboard   none: the controller serves no HTTP (see its log)")?,
    }
    out.line(format_args!(
        "look with: mesh status --dir {0}; stop with Ctrl-C",
        dir.display()
    ))?;
    out.flush()
}

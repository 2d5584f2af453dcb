//! `mesh up`: the whole mesh on this machine, the way `nomad agent -dev`
//! and `wash up` do it. Genesis in `--dir` (reused on the next run), the
//! broker started and supervised, the controller, one local host enrolled
//! through a token, the example catalogue registered and its runnable
//! modules assigned to it. SIGTERM or Ctrl-C stops everything it started:
//! the modules (the host's driver stops them), the host, the controller,
//! then the broker.

use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use mesh_controller::{ControllerOptions, Genesis};
use mesh_core::names::Name;
use mesh_core::token::Token;
use tokio::process::{Child, Command};
use tokio::sync::watch;

use crate::progress::Progress;
use crate::{authority, init, logging, output};

/// The local host's node name.
pub const LOCAL_NODE: &str = "local";

#[derive(Debug, Args)]
pub struct UpArgs {
    /// The mesh's directory: genesis, store, broker, the local host
    /// [default: `MESH_DIR`, else `.mesh` in the working directory].
    #[arg(
        long,
        env = "MESH_DIR",
        hide_env = true,
        default_value = ".mesh",
        hide_default_value = true
    )]
    pub dir: PathBuf,
    /// The catalogue to register; its modules whose command is found are
    /// assigned to the local node.
    #[arg(long, default_value = "examples/catalogue")]
    pub catalogue: PathBuf,
    /// The broker's client port (a new genesis only).
    #[arg(long, default_value_t = 4222)]
    pub port: u16,
    /// The nats-server binary (default: `MESH_NATS_SERVER`, then PATH).
    #[arg(long, env = "MESH_NATS_SERVER")]
    pub nats_server: Option<PathBuf>,
}

pub fn run(args: &UpArgs) -> anyhow::Result<ExitCode> {
    logging::init();
    // Modules built beside this binary (examples/modules) are found by name.
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
    {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs = vec![dir];
        dirs.extend(std::env::split_paths(&path));
        if let Ok(joined) = std::env::join_paths(dirs) {
            // SAFETY: no other thread exists yet; the runtime starts below.
            unsafe { std::env::set_var("PATH", joined) };
        }
    }
    logging::daemon_runtime()?.block_on(up(args))
}

fn store_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("mesh.db").display())
}

async fn up(args: &UpArgs) -> anyhow::Result<ExitCode> {
    let dir = &args.dir;
    let url = store_url(dir);
    let genesis = match Genesis::open(dir) {
        Ok(g) => g,
        Err(_) if !dir.join(mesh_controller::genesis::SIGNING_SEED).exists() => {
            init::make(dir, &[], args.port, &url).await?.0
        }
        Err(e) => return Err(e).context(format!("reading the genesis in {}", dir.display())),
    };
    let nats = nats_server(args)?;
    let (stop_tx, stop) = watch::channel(false);
    let (http_tx, mut http_bound) = tokio::sync::mpsc::unbounded_channel();
    let starting = Progress::start("up: starting the broker");
    let mut broker = start_broker(&nats, &genesis).await?;
    starting.finish(Some(&format!("up: broker on {}", genesis.local_url())));

    // Polled here rather than spawned: the store's futures are not `Send`
    // for every lifetime the spawn demands.
    let controller = async {
        let mut opts = ControllerOptions::new(dir.clone(), url.clone());
        opts.http_bound = Some(http_tx);
        let r = mesh_controller::daemon::run(opts, stopped(stop.clone())).await;
        // A controller that could not start ends the whole mesh.
        let _ = stop_tx.send(true);
        r
    };
    let rest = async {
        let result = local(
            args,
            &genesis,
            &url,
            &nats,
            &mut broker,
            &stop_tx,
            &mut http_bound,
        )
        .await;
        // Whatever ended it: the controller stops too.
        let _ = stop_tx.send(true);
        result
    };
    let (controlled, rest) = tokio::join!(controller, rest);
    stop_child(&mut broker).await;
    output::note("up: stopped");
    rest?;
    controlled.context("the controller")?;
    Ok(ExitCode::SUCCESS)
}

/// The local host, the catalogue, and the wait for a signal (keeping the
/// broker up meanwhile); returns once everything should stop.
async fn local(
    args: &UpArgs,
    genesis: &Genesis,
    url: &str,
    nats: &Path,
    broker: &mut Child,
    stop_tx: &watch::Sender<bool>,
    http_bound: &mut tokio::sync::mpsc::UnboundedReceiver<Option<std::net::SocketAddr>>,
) -> anyhow::Result<()> {
    let signal = logging::stop_signal();
    tokio::pin!(signal);
    let host_dir = args.dir.join("host");
    let host = match mesh_host::HostState::open(&host_dir) {
        Ok(s) => s,
        Err(_) => {
            let enrolling = Progress::start(format!("up: enrolling node {LOCAL_NODE}"));
            let host = tokio::select! {
                h = enrol_local(genesis, url, &host_dir) => h?,
                () = &mut signal => return Ok(()),
            };
            enrolling.finish(Some(&format!("up: node {LOCAL_NODE} enrolled")));
            host
        }
    };
    let registering = Progress::start(format!(
        "up: registering {} and assigning its runnable modules",
        args.catalogue.display()
    ));
    let assigned = register_and_assign(url, &args.catalogue).await?;
    registering.finish(None);
    let host_task = {
        let stop = stopped(stop_tx.subscribe());
        tokio::spawn(async move {
            mesh_host::run(&host, &mesh_host::HostOptions::default(), stop).await
        })
    };
    // Where the controller bound HTTP (decided early in its start; none if
    // it ended before).
    let http = http_bound.recv().await.flatten();
    print_summary(&args.dir, genesis, &assigned, http)?;
    let ended = stopped(stop_tx.subscribe());
    tokio::pin!(ended);
    let reported = reported(url, &assigned);
    tokio::pin!(reported);
    let mut waiting = !assigned.is_empty();
    loop {
        tokio::select! {
            () = &mut signal => break,
            () = &mut ended => break,
            r = &mut reported, if waiting => {
                waiting = false;
                if let Err(e) = r {
                    tracing::warn!(error = %format!("{e:#}"), "could not read the local node's reports");
                }
            }
            status = broker.wait() => {
                tracing::warn!(?status, "the broker exited; starting it again");
                tokio::time::sleep(Duration::from_secs(1)).await;
                *broker = start_broker(nats, genesis).await?;
            }
        }
    }
    output::note("up: stopping");
    // The host stops its modules while the broker is still up.
    let _ = stop_tx.send(true);
    host_task_result(host_task).await;
    Ok(())
}

async fn host_task_result(task: tokio::task::JoinHandle<Result<(), mesh_host::HostError>>) {
    match task.await {
        Ok(Err(e)) => tracing::warn!(error = %e, "the host stopped with an error"),
        Err(e) => tracing::warn!(error = %e, "the host task failed"),
        Ok(Ok(())) => {}
    }
}

/// Resolves once `stop` turns true.
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

fn nats_server(args: &UpArgs) -> anyhow::Result<PathBuf> {
    nats_server_path(args.nats_server.as_deref())
}

/// `given`, or the first `nats-server` on PATH.
pub(crate) fn nats_server_path(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("nats-server"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no nats-server found: run `scripts/setup` and `. .tools/env` (it sets MESH_NATS_SERVER), or give --nats-server PATH"
            )
        })
}

async fn start_broker(nats: &Path, genesis: &Genesis) -> anyhow::Result<Child> {
    let log_path = genesis.path("broker/nats.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("opening {}", log_path.display()))?;
    let child = Command::new(nats)
        .arg("-c")
        .arg(genesis.path(mesh_controller::genesis::BROKER_CONF))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // The broker must not outlive a `mesh up` that was killed outright.
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", nats.display()))?;
    // Ready when it accepts a TCP connection on its port.
    let addr = format!("127.0.0.1:{}", genesis.port);
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(&addr).await.is_ok() {
            return Ok(child);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    bail!(
        "the broker did not listen on {addr} within 5 s; its log is {}",
        log_path.display()
    )
}

async fn stop_child(child: &mut Child) {
    if let Some(pid) = child.id().and_then(|p| libc::pid_t::try_from(p).ok()) {
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    if tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
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
    store.close().await;
    let issued = issued?;
    let token = Token {
        bus_urls: vec![genesis.local_url()],
        cert_sha256: genesis.cert_sha256.clone(),
        controller_key: genesis.signing_key.clone(),
        node,
        enrolment_seed: issued.secret,
        expires_at: u64::try_from(issued.expires_at).unwrap_or(0),
    };
    Ok(mesh_host::enrol(&token, host_dir, &mesh_host::EnrolOptions::default()).await?)
}

/// Registers the catalogue and assigns to the local node each module whose
/// command is on PATH (the others describe programs this machine lacks).
async fn register_and_assign(url: &str, catalogue: &Path) -> anyhow::Result<Vec<Name>> {
    if !catalogue.exists() {
        output::note(format_args!(
            "up: no catalogue at {}; nothing assigned",
            catalogue.display()
        ));
        return Ok(Vec::new());
    }
    let report =
        authority::checked_catalogue(&[catalogue.to_path_buf()], "nothing was registered")?;
    let node = Name::new(LOCAL_NODE).expect("a valid name");
    let store = authority::open_store(url).await?;
    let mut assigned = Vec::new();
    let result = async {
        for m in report.catalogue.manifests() {
            let source = report.sources.get(&m.path).context("manifest text")?;
            store.register_module(&m.name.value, source).await?;
            let runnable = m
                .run
                .as_ref()
                .and_then(|r| r.command.first())
                .is_some_and(|argv0| on_path(&argv0.text));
            if runnable {
                store.assign(&node, &m.name.value).await?;
                assigned.push(m.name.value.clone());
            }
        }
        anyhow::Ok(())
    }
    .await;
    store.close().await;
    result?;
    Ok(assigned)
}

/// Waits until the local node's newest report says how each assigned
/// module came out (running or failed), showing progress meanwhile.
async fn reported(url: &str, assigned: &[Name]) -> anyhow::Result<()> {
    use mesh_store::ModuleState;
    let node = Name::new(LOCAL_NODE).expect("a valid name");
    let mut progress = Progress::start(format!("up: waiting for node {LOCAL_NODE} to report"));
    let store = authority::open_existing_store(url).await?;
    let result = async {
        loop {
            let latest = store.latest_report(&node).await?;
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

fn on_path(program: &str) -> bool {
    if program.contains('/') {
        return Path::new(program).is_file();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|d| d.join(program).is_file())
}

fn print_summary(
    dir: &Path,
    genesis: &Genesis,
    assigned: &[Name],
    http: Option<std::net::SocketAddr>,
) -> anyhow::Result<()> {
    let mut out = output::Stdout::lock();
    out.line(format_args!("mesh up: {}", dir.display()))?;
    out.line(format_args!("  broker      {}", genesis.local_url()))?;
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
    out.flush()?;
    Ok(())
}

//! The mesh under the bench: genesis, the broker (a child process), the
//! controller (a `mesh controller` child process, so its resident set is
//! its own), and N simulated hosts in this process — each `mesh_host::run`
//! with its own state directory, NKey, connection and consumer, and the
//! no-op driver.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use async_nats::jetstream;
use futures::StreamExt as _;
use mesh_bus::{BusConfig, CertPin, ClientCredential, Secret};
use mesh_controller::Genesis;
use mesh_controller::genesis;
use mesh_core::authority::{CONTROLLER, PrincipalKind};
use mesh_core::names::Name;
use mesh_core::subjects;
use mesh_store::{FleetChange, Store};
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// The module every simulated host is given: declared, started by the
/// no-op driver, reported.
pub const MODULE: &str = "bench-noop";
pub const MANIFEST: &str = r#"[module]
name = "bench-noop"
description = "mesh-bench's module: declared to every simulated host, run by its no-op driver"

[run]
command = ["true"]
"#;

/// The same module with one environment variable more: a change adding no
/// principal and no grant (declarations alone, no reload).
pub const MANIFEST_UPDATED: &str = r#"[module]
name = "bench-noop"
description = "mesh-bench's module: declared to every simulated host, run by its no-op driver"

[run]
command = ["true"]
env = { BENCH_PHASE = "update" }
"#;

/// How many server requests a sweep keeps in flight.
const SWEEP_AT_ONCE: usize = 64;

pub fn node_name(i: usize) -> Name {
    Name::new(format!("sim-{i:05}")).expect("a valid node name")
}

/// A free TCP port on the loopback (bound, then released).
pub fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(l.local_addr()?.port())
}

/// The broker on the genesis's own configuration.
pub struct Broker {
    nats: PathBuf,
    child: Option<Child>,
    pub log: PathBuf,
    conf: PathBuf,
    port: u16,
}

impl Broker {
    pub async fn start(nats: &Path, genesis: &Genesis) -> anyhow::Result<Broker> {
        let mut b = Broker {
            nats: nats.to_path_buf(),
            child: None,
            log: genesis.path("broker/nats.log"),
            conf: genesis.path(genesis::BROKER_CONF),
            port: genesis.port,
        };
        b.spawn().await?;
        Ok(b)
    }

    /// Starts the server and waits until it accepts TCP connections (a
    /// restart recovers every consumer first: up to two minutes).
    async fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        let child = Command::new(&self.nats)
            .arg("-c")
            .arg(&self.conf)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.nats.display()))?;
        self.child = Some(child);
        let addr = format!("127.0.0.1:{}", self.port);
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            if tokio::net::TcpStream::connect(&addr).await.is_ok() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        bail!(
            "the broker did not listen on {addr} within 120 s; its log is {}",
            self.log.display()
        )
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// SIGTERM and wait (SIGKILL after 30 s).
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop_child(&mut child, Duration::from_secs(30)).await;
        }
    }

    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.stop().await;
        self.spawn().await
    }

    /// SIGHUP: reload the configuration.
    pub fn reload(&self) -> anyhow::Result<()> {
        let pid = self.pid().context("the broker is not running")?;
        signal(pid, libc::SIGHUP);
        Ok(())
    }

    /// How many reloads the broker has logged.
    pub fn reloads_logged(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .map(|t| t.matches("Reloaded server configuration").count())
            .unwrap_or(0)
    }
}

pub fn signal(pid: u32, sig: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) on a child this process started.
        unsafe { libc::kill(pid, sig) };
    }
}

pub async fn stop_child(child: &mut Child, grace: Duration) {
    if let Some(pid) = child.id() {
        signal(pid, libc::SIGTERM);
    }
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        let _ = child.kill().await;
    }
}

/// A `mesh` child process (the controller, the idle host) with its log.
pub struct MeshProcess {
    pub child: Child,
    pub log: PathBuf,
}

impl MeshProcess {
    pub fn spawn(args: &[&str], log: PathBuf, stdin: Option<String>) -> anyhow::Result<Self> {
        let exe = crate::mesh_binary()?;
        let out = std::fs::File::create(&log)?;
        let mut child = Command::new(exe)
            .args(args)
            .env("MESH_LOG", "info,async_nats=off")
            .env_remove("MESH_STORE")
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .context("starting a mesh process")?;
        if let Some(text) = stdin {
            use tokio::io::AsyncWriteExt as _;
            let mut pipe = child.stdin.take().context("stdin")?;
            tokio::spawn(async move {
                let _ = pipe.write_all(text.as_bytes()).await;
            });
        }
        Ok(MeshProcess { child, log })
    }

    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn wait_log(&mut self, needle: &str, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.log_text().contains(needle) {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                bail!(
                    "{} exited ({status}) before logging {needle:?}; its log:\n{}",
                    self.log.display(),
                    tail(&self.log_text(), 20)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!(
            "{} did not log {needle:?} within {within:?}",
            self.log.display()
        )
    }

    pub async fn stop(&mut self) {
        stop_child(&mut self.child, Duration::from_secs(30)).await;
    }
}

pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The controller's bus configuration, as the daemon makes it: the
/// bench's sweeps of consumer state ask as the controller.
pub fn controller_bus(genesis: &Genesis) -> anyhow::Result<BusConfig> {
    let seed = std::fs::read_to_string(genesis.path(genesis::NKEY_SEED))
        .context("reading the controller's seed")?;
    Ok(BusConfig {
        url: genesis.local_url(),
        principal: CONTROLLER.into(),
        credential: ClientCredential::NKey(Secret::new(seed.trim())),
        ca_file: None,
        inbox_prefix: Some(subjects::inbox_prefix(CONTROLLER)),
        pin: Some(CertPin::from_hex(&genesis.cert_sha256)?),
    })
}

/// Connects, retrying for up to `within` (the broker may be reloading or
/// restarting).
pub async fn connect_retrying(
    bus: &BusConfig,
    within: Duration,
) -> anyhow::Result<async_nats::Client> {
    let deadline = Instant::now() + within;
    loop {
        match mesh_bus::connect(bus).await {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(error = %e, "bench connection not yet");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e).context(format!("connecting as {}", bus.principal)),
        }
    }
}

/// The simulated hosts' state directories and records: keys made on disk
/// as an enrolment makes them, each host's key recorded as its credential
/// (one transaction, as `mesh fleet load` records a fleet) and its spare
/// module keys recorded as its enrolment announces them — without them every
/// module declared is started before the broker admits its key, and each
/// batch of keys its reports bring recomposes the users file (one reload
/// per batch, not one per fan-out).
pub async fn record_hosts(
    store: &Store,
    genesis: &Genesis,
    hosts_dir: &Path,
    n: usize,
) -> anyhow::Result<Vec<mesh_host::HostState>> {
    record_named_hosts(store, genesis, hosts_dir, (0..n).map(node_name).collect()).await
}

/// [`record_hosts`] for the nodes named.
pub async fn record_named_hosts(
    store: &Store,
    genesis: &Genesis,
    hosts_dir: &Path,
    nodes: Vec<Name>,
) -> anyhow::Result<Vec<mesh_host::HostState>> {
    let urls = vec![genesis.local_url()];
    let (cert, controller_key) = (genesis.cert_sha256.clone(), genesis.signing_key.clone());
    let dir = hosts_dir.to_path_buf();
    let made = tokio::task::spawn_blocking(move || {
        nodes
            .into_iter()
            .map(|node| {
                let d = dir.join(node.as_str());
                let keys = mesh_host::HostKeys::load_or_create(&d)?;
                let state = mesh_host::HostState::record(
                    &d,
                    node,
                    urls.clone(),
                    cert.clone(),
                    controller_key.clone(),
                )?;
                let spares = mesh_host::spare::top_up(&d)?;
                // What a mesh on RabbitMQ admits the host and its modules by.
                let mut hashes = mesh_host::spare::hashes(&d, &spares);
                hashes.insert(
                    keys.host_key().to_string(),
                    mesh_core::authority::amqp::announced_hash(keys.nkey_seed().expose()),
                );
                Ok::<_, mesh_host::StateError>((
                    state,
                    keys.host_key().to_string(),
                    (spares, hashes),
                ))
            })
            .collect::<Result<Vec<_>, _>>()
    })
    .await??;
    let mut change = FleetChange::default();
    for (state, key, _) in &made {
        change.nodes.push(state.node.clone());
        change.credentials.push(mesh_store::prepare_machine_key(
            &PrincipalKind::Host {
                node: state.node.clone(),
            },
            key,
        )?);
    }
    store.apply_fleet(&change).await?;
    let spares: Vec<_> = made
        .iter()
        .map(|(state, _, (spares, _))| (state.node.clone(), spares.clone()))
        .collect();
    store.record_spare_keys(&spares).await?;
    let hashes: BTreeMap<String, String> =
        made.iter().flat_map(|(_, _, (_, h))| h.clone()).collect();
    store.record_amqp_hashes(&hashes).await?;
    Ok(made.into_iter().map(|(s, _, _)| s).collect())
}

/// The simulated hosts, running until `stop` turns true.
pub struct Hosts {
    stop: watch::Sender<bool>,
    tasks: JoinSet<Result<(), mesh_host::HostError>>,
}

impl Hosts {
    /// Starts the hosts `every` apart: the setup is not the storm (that is
    /// measured on its own), and 10,000 TLS handshakes at once on two
    /// cores time out at the broker before the bench's own process can
    /// answer them.
    pub fn start(states: Vec<mesh_host::HostState>, every: Duration) -> Hosts {
        let (stop, rx) = watch::channel(false);
        let mut opts = mesh_host::HostOptions::default();
        opts.driver.no_op = true;
        let mut tasks = JoinSet::new();
        for (i, state) in states.into_iter().enumerate() {
            let opts = opts.clone();
            let mut rx = rx.clone();
            let after = every * u32::try_from(i).unwrap_or(u32::MAX);
            tasks.spawn(async move {
                tokio::time::sleep(after).await;
                let stopped = async move {
                    let _ = rx.wait_for(|s| *s).await;
                };
                mesh_host::run(&state, &opts, stopped).await
            });
        }
        Hosts { stop, tasks }
    }

    /// Stops every host (each drains its connection); bounded.
    pub async fn stop(mut self) -> usize {
        let _ = self.stop.send(true);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let mut failed = 0;
        loop {
            match tokio::time::timeout_at(deadline, self.tasks.join_next()).await {
                Ok(Some(Ok(Ok(())))) => {}
                Ok(Some(_)) => failed += 1,
                Ok(None) => break,
                Err(_) => {
                    self.tasks.abort_all();
                    break;
                }
            }
        }
        failed
    }
}

/// Asks the server, consumer by consumer, which of `nodes`' consumers on
/// NODES have a bound push subscriber; returns those that do.
pub async fn bound(js: &jetstream::Context, nodes: &[Name]) -> BTreeSet<Name> {
    let Ok(stream) = js.get_stream_no_info(subjects::STREAM_NODES).await else {
        return BTreeSet::new();
    };
    futures::stream::iter(nodes.iter().cloned())
        .map(|node| {
            let stream = stream.clone();
            async move {
                let name = subjects::consumer::node(&node);
                match stream.consumer_info(&name).await {
                    Ok(info) if info.push_bound => Some(node),
                    _ => None,
                }
            }
        })
        .buffer_unordered(SWEEP_AT_ONCE)
        .filter_map(|n| async move { n })
        .collect()
        .await
}

/// Sweeps until every node's consumer is bound or `within` passes; returns
/// when the last was first seen bound (from `since`) and those never seen.
pub async fn until_bound(
    js: &jetstream::Context,
    nodes: &[Name],
    since: Instant,
    within: Duration,
) -> (Duration, Vec<Name>) {
    let mut waiting: Vec<Name> = nodes.to_vec();
    let mut last = Duration::ZERO;
    let deadline = Instant::now() + within;
    while !waiting.is_empty() && Instant::now() < deadline {
        let now_bound = bound(js, &waiting).await;
        if !now_bound.is_empty() {
            last = since.elapsed();
            waiting.retain(|n| !now_bound.contains(n));
        }
        if !waiting.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    (last, waiting)
}

/// One report per node answering `versions[node]`: per node the ms from
/// `t0_ms` to the first such report recorded; and nodes heard twice.
#[derive(Debug, Default)]
pub struct Heard {
    pub first_ms: BTreeMap<Name, f64>,
    pub twice: Vec<Name>,
}

pub fn heard(
    reports: &[mesh_store::ReportSeen],
    versions: &BTreeMap<Name, i64>,
    t0_ms: i64,
) -> Heard {
    let mut h = Heard::default();
    // One report recorded twice: the same id twice (a host reports again
    // when a module's health changes: another report, not a duplicate).
    // A report without an id stands for its declaration.
    let mut seen: std::collections::BTreeSet<(&Name, Option<&str>)> = Default::default();
    for r in reports {
        if versions.get(&r.node) != Some(&r.declaration_version) {
            continue;
        }
        if !seen.insert((&r.node, r.report_id.as_deref())) && !h.twice.contains(&r.node) {
            h.twice.push(r.node.clone());
        }
        h.first_ms
            .entry(r.node.clone())
            .or_insert((r.received_at - t0_ms).max(0) as f64);
    }
    h
}

/// Nodes that reported (anything) at or after `since_ms`, each with the ms
/// from `since_ms` to its first report.
pub fn reported_since(reports: &[mesh_store::ReportSeen], since_ms: i64) -> BTreeMap<Name, f64> {
    let mut m = BTreeMap::new();
    for r in reports.iter().filter(|r| r.received_at >= since_ms) {
        m.entry(r.node.clone())
            .or_insert((r.received_at - since_ms) as f64);
    }
    m
}

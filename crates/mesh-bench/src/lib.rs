//! `mesh-bench`: the mesh's own numbers on this machine. It starts its own
//! broker, controller and store in a temporary directory, runs N simulated
//! hosts in this process, and prints one table: each figure beside its
//! target (benchmarks, not timed tests: a missed target is printed, and
//! only a correctness failure — a report lost or recorded twice, an
//! artifact fetch failed, a read outside a declaration not refused — fails
//! the command).
//!
//! In order, on one broker: hosts enrolled and bound; the fan-out (one
//! assignment change touching all N, until every report is recorded); raw
//! JetStream doing the same pattern; the reconnect storm (the broker
//! restarted under N hosts); one real `mesh host` process enrolled by token
//! and left idle (its resident set); one artifact fetched by many hosts at
//! once through the per-object reader, beside the object store's own gets,
//! and a second version of it fetched again; the users file at 10,000
//! nodes × 5 modules composed and made live; then report ingestion on
//! SQLite and on PostgreSQL.

mod artifact;
pub mod deploy;
mod facts;
mod idle;
mod ingest;
mod mesh;
mod on_amqp;
mod raw;
mod stats;
mod table;
mod users;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_nats::jetstream;
use clap::{Args, ValueEnum};
use mesh_controller::Genesis;
use mesh_core::names::Name;
use mesh_store::{FleetChange, Store};
use serde::Serialize;

use facts::{Machine, Rss, Versions};
use mesh::{Broker, Hosts, MeshProcess};
use mesh_cli::output::ListFormat;
use mesh_cli::{init, output};
use stats::Spread;
use table::table;

/// The `mesh` binary the bench runs its controller and its real host with:
/// `MESH_BIN`, else the one beside this program (cargo builds both into
/// one directory).
pub fn mesh_binary() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("MESH_BIN").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let here = std::env::current_exe().context("finding this program")?;
    let beside = here.with_file_name("mesh");
    anyhow::ensure!(
        beside.is_file(),
        "no mesh binary beside {} ({} is missing); build it (`cargo build --release --bin mesh`) or name it with MESH_BIN",
        here.display(),
        beside.display()
    );
    Ok(beside)
}

/// How far apart the simulated hosts are started at setup: 500 a second.
pub(crate) const HOST_START_EVERY: Duration = Duration::from_millis(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Sqlite,
    Postgres,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Simulated hosts, each its own connection, NKey and consumer.
    #[arg(long, default_value_t = 1000)]
    pub hosts: usize,
    /// The store the mesh runs on for the fan-out (PostgreSQL: a cluster
    /// of its own, with PostgreSQL's durability defaults).
    #[arg(long, value_enum, default_value_t = Backend::Sqlite)]
    pub store: Backend,
    /// Nodes of the users file composed (× 5 modules each).
    #[arg(long, default_value_t = 10_000)]
    pub users_nodes: usize,
    /// How long each backend's report ingestion runs.
    #[arg(long, default_value = "3s", value_parser = mesh_cli::node::parse_ttl)]
    pub ingest_for: Duration,
    /// Leave out report ingestion.
    #[arg(long)]
    pub no_ingest: bool,
    /// Hosts fetching one artifact at once, each its own key, grants and
    /// connection (0 leaves the artifact phase out).
    #[arg(long, default_value_t = 100)]
    pub artifact_hosts: usize,
    /// The artifact's size in MiB.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub artifact_mib: u64,
    #[arg(long, value_enum, default_value_t = ListFormat::Text)]
    pub output: ListFormat,
    /// Where the mesh's files go (kept); default: a temporary directory,
    /// removed at the end.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Where the simulated hosts' state directories go; default: /dev/shm
    /// when it exists (each real host has a disk of its own; 10,000 sharing
    /// one would measure that disk's fsyncs, not the mesh).
    #[arg(long)]
    pub hosts_dir: Option<PathBuf>,
    /// The bus the mesh runs on: NATS (every phase), or AMQP (RabbitMQ:
    /// the fan-out, the update, the broker restarted, raw publish-confirm).
    #[arg(long, default_value = "nats", value_parser = parse_bus)]
    pub bus: mesh_core::bus::BusKind,
    /// A deployment over the hosts in batches of 10% with a 1 s healthy
    /// window, beside a one-shot fan-out, and nothing else.
    #[arg(long)]
    pub deploy: bool,
    /// The nats-server binary (default: `MESH_NATS_SERVER`, then PATH).
    #[arg(long, env = "MESH_NATS_SERVER")]
    pub nats_server: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Setup {
    pub records_ms: f64,
    /// From the hosts' start until every consumer has its host bound.
    pub bound_ms: f64,
    pub not_bound: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct FanOut {
    pub nodes: usize,
    pub recorded: usize,
    pub missing: usize,
    pub twice: usize,
    /// Per node: ms from the change's commit to its report recorded.
    pub reported: Spread,
    /// Per node: ms from the commit to its declaration recorded (signed,
    /// before it is published).
    pub declared: Spread,
    /// How long the bench waited (all in, or its bound).
    pub waited_ms: f64,
    /// Node-declarations applied and reported per second per core.
    pub per_core: f64,
    /// Broker reloads from the change to the last report (target 1: one
    /// composition admits every module's key).
    pub reloads: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Storm {
    pub hosts: usize,
    /// From the restarted broker listening to every consumer bound again.
    pub bound_ms: f64,
    /// From the broker stopped (SIGTERM sent).
    pub bound_from_stop_ms: f64,
    pub not_bound: usize,
    /// From the broker listening to every host's report after reconnecting
    /// recorded.
    pub reported: Spread,
    pub not_reported: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Memory {
    pub controller: Rss,
    /// The controller's peak resident set in each phase (sampled every
    /// 250 ms).
    pub controller_by_phase: Vec<(String, u64)>,
    pub nodes: usize,
    /// This process's growth for the simulated hosts, per host.
    pub simulated_host_bytes: u64,
    /// A real `mesh host` process, enrolled by token and idle.
    pub idle_host: Option<Rss>,
    /// From `mesh host --token` to its consumer bound.
    pub idle_host_enrolled_ms: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Results {
    pub command: String,
    pub machine: Machine,
    pub versions: Versions,
    pub hosts: usize,
    pub store: Backend,
    pub setup: Setup,
    pub fan_out: FanOut,
    /// A change adding no principal (the module's environment), to every
    /// node: declarations alone, no reload.
    pub update: FanOut,
    pub raw: Option<raw::RawResult>,
    /// The fan-out's rate as a fraction of raw JetStream's.
    pub ratio: Option<f64>,
    pub storm: Storm,
    pub memory: Memory,
    /// One artifact fetched by many hosts at once; `None` when left out or
    /// when it could not run (then a problem says why).
    pub artifact: Option<artifact::ArtifactResult>,
    pub users_file: Option<users::UsersResult>,
    pub ingestion: Vec<ingest::IngestResult>,
    /// What was lost or recorded twice, or a phase that could not run.
    pub problems: Vec<String>,
}

fn parse_bus(s: &str) -> Result<mesh_core::bus::BusKind, String> {
    s.parse()
}

pub fn run(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    mesh_cli::logging::init_quiet();
    if args.bus == mesh_core::bus::BusKind::Amqp {
        let r = mesh_cli::logging::daemon_runtime()?.block_on(amqp_bench(args))?;
        match args.output {
            ListFormat::Json => output::print(&format!(
                "{}\n",
                serde_json::to_string_pretty(&r).context("results as JSON")?
            ))?,
            ListFormat::Text => output::print(&on_amqp::table(&r))?,
        }
        return Ok(if r.problems.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    if args.deploy {
        let r = mesh_cli::logging::daemon_runtime()?.block_on(async {
            let n = args.hosts.max(1);
            facts::raise_fd_limit();
            let nats = mesh_cli::up::nats_server_path(args.nats_server.as_deref())?;
            let (_tmp, work, hosts_tmp) = work_dirs(args)?;
            deploy::bench(n, &nats, &work, hosts_tmp.path()).await
        })?;
        match args.output {
            ListFormat::Json => output::print(&format!(
                "{}\n",
                serde_json::to_string_pretty(&r).context("results as JSON")?
            ))?,
            ListFormat::Text => output::print(&deploy::table(&r))?,
        }
        return Ok(if r.problems.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    let results = mesh_cli::logging::daemon_runtime()?.block_on(bench(args))?;
    match args.output {
        ListFormat::Json => output::print(&format!(
            "{}\n",
            serde_json::to_string_pretty(&results).context("results as JSON")?
        ))?,
        ListFormat::Text => output::print(&table(&results))?,
    }
    Ok(if results.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub(crate) fn note(what: std::fmt::Arguments<'_>) {
    output::note(format_args!("bench: {what}"));
}

/// The mesh on RabbitMQ ([`on_amqp`]), in its own work and hosts
/// directories as [`bench`] makes them.
async fn amqp_bench(args: &BenchArgs) -> anyhow::Result<on_amqp::AmqpResults> {
    let n = args.hosts.max(1);
    facts::raise_fd_limit();
    let (_tmp, work, hosts_tmp) = work_dirs(args)?;
    on_amqp::bench(n, &work, hosts_tmp.path()).await
}

/// The work directory (`--dir`, else a temporary one, returned to be kept
/// while it is used) and the simulated hosts' directory: `--hosts-dir`,
/// else /dev/shm when it exists (each real host has a disk of its own;
/// 10,000 sharing one would measure that disk's fsyncs, not the mesh).
fn work_dirs(args: &BenchArgs) -> anyhow::Result<(tempfile::TempDir, PathBuf, tempfile::TempDir)> {
    let tmp = tempfile::Builder::new().prefix("mesh-bench-").tempdir()?;
    let work = args.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&work)?;
    let shm = PathBuf::from("/dev/shm");
    let hosts = match &args.hosts_dir {
        Some(d) => tempfile::Builder::new()
            .prefix("mesh-bench-hosts-")
            .tempdir_in(d)?,
        None if shm.is_dir() => tempfile::Builder::new()
            .prefix("mesh-bench-hosts-")
            .tempdir_in(&shm)?,
        None => tempfile::Builder::new()
            .prefix("hosts-")
            .tempdir_in(&work)?,
    };
    Ok((tmp, work, hosts))
}

async fn bench(args: &BenchArgs) -> anyhow::Result<Results> {
    let n = args.hosts.max(1);
    let machine = Machine::read();
    let fds = facts::raise_fd_limit();
    if (fds as usize) < n + 1024 {
        note(format_args!(
            "warning: the open-file limit is {fds}; {n} hosts need about {} (ulimit -n)",
            n + 1024
        ));
    }
    let nats = mesh_cli::up::nats_server_path(args.nats_server.as_deref())?;
    let (_tmp, work, hosts_tmp) = work_dirs(args)?;
    let dir = work.join("mesh");
    let mut problems = Vec::new();

    // The store of the mesh, and PostgreSQL for the ingestion.
    let needs_pg = args.store == Backend::Postgres || !args.no_ingest;
    let pg = if needs_pg {
        match tokio::task::spawn_blocking(mesh_testkit::PgCluster::start_durable).await? {
            Ok(c) => Some(c),
            Err(e) => {
                problems.push(format!("PostgreSQL could not be started: {e}"));
                None
            }
        }
    } else {
        None
    };
    let mesh_db = match (args.store, &pg) {
        (Backend::Postgres, Some(c)) => Some(c.create_database()?),
        (Backend::Postgres, None) => anyhow::bail!("--store postgres: no PostgreSQL to run on"),
        _ => None,
    };
    let url = match &mesh_db {
        Some(db) => db.url().to_string(),
        None => format!("sqlite://{}", dir.join("mesh.db").display()),
    };

    let port = mesh::free_port()?;
    init::make(&dir, &[], port, &url).await?;
    let genesis = Genesis::open(&dir)?;
    let mut broker = Broker::start(&nats, &genesis).await?;
    let store = mesh_cli::authority::open_store(&url).await?;
    let store_version = store.backend_version().await.unwrap_or_else(|_| "?".into());
    let module = Name::new(mesh::MODULE).expect("a valid name");
    store.register_module(&module, mesh::MANIFEST).await?;

    note(format_args!("{n} hosts: recording them"));
    let t = Instant::now();
    let states = mesh::record_hosts(&store, &genesis, hosts_tmp.path(), n).await?;
    let records_ms = ms(t.elapsed());
    let nodes: Vec<Name> = states.iter().map(|s| s.node.clone()).collect();

    let store_arg = url.clone();
    let dir_arg = dir.display().to_string();
    let mut controller = MeshProcess::spawn(
        &["controller", "--dir", &dir_arg, "--store", &store_arg],
        work.join("controller.log"),
        None,
    )?;
    controller
        .wait_log("controller running", Duration::from_secs(300))
        .await?;

    let sampler = facts::RssSampler::start(controller.pid(), "start");
    let bench_bus = mesh::controller_bus(&genesis)?;
    let client = mesh::connect_retrying(&bench_bus, Duration::from_secs(30)).await?;
    let js = jetstream::new(client.clone());
    // Every node's consumer exists before its host binds (asserted at start).
    let rss_before = facts::own_rss();
    sampler.phase("setup");
    note(format_args!("{n} hosts: starting and binding"));
    let started = Instant::now();
    let hosts = Hosts::start(states, HOST_START_EVERY);
    let within = Duration::from_secs(120) + Duration::from_millis(20 * n as u64);
    let (bound_at, unbound) = mesh::until_bound(&js, &nodes, started, within).await;
    if !unbound.is_empty() {
        problems.push(format!(
            "{} hosts never bound their consumer (first: {})",
            unbound.len(),
            unbound[0]
        ));
    }
    let setup = Setup {
        records_ms,
        bound_ms: ms(bound_at),
        not_bound: unbound.len(),
    };
    // Let the connections settle before the host's share is read.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_hosts = facts::own_rss();

    sampler.phase("fan-out");
    note(format_args!(
        "fan-out: one change assigning {} to {n} nodes",
        mesh::MODULE
    ));
    let change = FleetChange {
        assignments: nodes.iter().map(|n| (n.clone(), module.clone())).collect(),
        ..FleetChange::default()
    };
    let before = mesh_store::now_ms();
    let reloads_before = broker.reloads_logged();
    store.apply_fleet(&change).await?;
    let fan_out = until_reported(&store, &nodes, before, "fan-out", &mut problems).await?;
    let fan_out = FanOut {
        reloads: broker.reloads_logged() - reloads_before,
        ..fan_out
    };

    note(format_args!(
        "update: {}'s environment changed on {n} nodes",
        mesh::MODULE
    ));
    let before = mesh_store::now_ms();
    let reloads_before = broker.reloads_logged();
    store
        .register_module(&module, mesh::MANIFEST_UPDATED)
        .await?;
    let update = until_reported(&store, &nodes, before, "update", &mut problems).await?;
    let update = FanOut {
        reloads: broker.reloads_logged() - reloads_before,
        ..update
    };

    let run_raw = fan_out.recorded > 0;

    // The storm while the controller runs: it records the reports every
    // host sends after reconnecting.
    sampler.phase("storm");
    note(format_args!(
        "reconnect storm: the broker restarted under {n} hosts"
    ));
    let storm = storm(&mut broker, &bench_bus, &store, &nodes, &mut problems).await?;
    let client = mesh::connect_retrying(&bench_bus, Duration::from_secs(30)).await?;
    let js = jetstream::new(client.clone());

    sampler.phase("idle host");
    note(format_args!(
        "idle host: one real `mesh host` enrolled by token"
    ));
    let idle = idle::idle_host(&work, &genesis, &dir_arg, &store_arg, &js).await;
    let (idle_host, idle_host_enrolled_ms) = match idle {
        Ok((rss, at, mut p)) => {
            p.stop().await;
            (Some(rss), Some(at))
        }
        Err(e) => {
            problems.push(format!("the idle host: {e:#}"));
            (None, None)
        }
    };
    let artifact = match args.artifact_hosts {
        0 => None,
        hosts => {
            sampler.phase("artifact");
            note(format_args!(
                "artifact: {} MiB fetched by {hosts} hosts at once",
                args.artifact_mib
            ));
            let inputs = artifact::Inputs {
                store: &store,
                genesis: &genesis,
                js: &js,
                controller: &bench_bus,
                hosts_dir: hosts_tmp.path(),
                work: &work,
                hosts,
                mib: args.artifact_mib,
            };
            match artifact::run(&inputs).await {
                Ok(a) => {
                    problems.extend(a.problems());
                    Some(a)
                }
                Err(e) => {
                    problems.push(format!("artifact: {e:#}"));
                    None
                }
            }
        }
    };
    let controller_rss = facts::rss(controller.pid());
    let memory = Memory {
        controller: controller_rss,
        controller_by_phase: sampler.stop(),
        nodes: n,
        simulated_host_bytes: rss_hosts.now.saturating_sub(rss_before.now) / n as u64,
        idle_host,
        idle_host_enrolled_ms,
    };
    controller.stop().await;

    note(format_args!(
        "raw JetStream: {n} subjects, {n} push consumers"
    ));
    let raw = match run_raw {
        true => match raw::run(&genesis, &broker, n).await {
            Ok(r) => {
                if r.missing > 0 {
                    problems.push(format!("raw JetStream: {} messages never acked", r.missing));
                }
                Some(r)
            }
            Err(e) => {
                problems.push(format!("raw JetStream: {e:#}"));
                None
            }
        },
        false => None,
    };
    let ratio = raw
        .as_ref()
        .filter(|r| r.acked.per_second > 0.0)
        .map(|r| fan_out.reported.per_second / r.acked.per_second);

    note(format_args!("stopping the hosts"));
    let failed = hosts.stop().await;
    if failed > 0 {
        problems.push(format!("{failed} hosts ended with an error"));
    }
    let _ = client.drain().await;

    note(format_args!(
        "users file: {} nodes x {} modules",
        args.users_nodes,
        users::MODULES.len()
    ));
    let users_file = match users::run(&genesis, &broker, args.users_nodes, &bench_bus).await {
        Ok(u) => {
            if !u.identical {
                problems.push("the users file composed twice differs".into());
            }
            Some(u)
        }
        Err(e) => {
            problems.push(format!("users file: {e:#}"));
            None
        }
    };
    broker.stop().await;
    store.close().await;

    let mut ingestion = Vec::new();
    if !args.no_ingest {
        let sqlite_url = format!("sqlite://{}", work.join("ingest.db").display());
        let pg_db = match &pg {
            Some(c) => Some(c.create_database()?),
            None => None,
        };
        let mut runs = vec![("sqlite", sqlite_url)];
        if let Some(db) = &pg_db {
            runs.push(("postgresql", db.url().to_string()));
        }
        for (label, url) in runs {
            note(format_args!("report ingestion: {label}, {n} nodes"));
            let s = Store::open(&url).await?;
            match ingest::run(label, &s, n, args.ingest_for).await {
                Ok(r) => ingestion.push(r),
                Err(e) => problems.push(format!("ingestion on {label}: {e:#}")),
            }
            s.close().await;
        }
    }
    let versions = Versions {
        mesh: env!("CARGO_PKG_VERSION").into(),
        nats_server: facts::nats_version(&nats),
        store: store_version,
        ingestion: ingestion.iter().map(|r| r.version.clone()).collect(),
    };
    drop(mesh_db);
    drop(pg);
    if args.dir.is_none() {
        let _ = std::fs::remove_dir_all(&work);
    }
    let command = std::env::args()
        .map(|a| if a.contains(' ') { format!("'{a}'") } else { a })
        .collect::<Vec<_>>()
        .join(" ");
    Ok(Results {
        command,
        machine,
        versions,
        hosts: n,
        store: args.store,
        setup,
        fan_out,
        update,
        raw,
        ratio,
        storm,
        memory,
        artifact,
        users_file,
        ingestion,
        problems,
    })
}

/// Waits until each node's report answering its declaration made since
/// `before` (a change just committed) is recorded.
pub(crate) async fn until_reported(
    store: &Store,
    nodes: &[Name],
    before: i64,
    phase: &str,
    problems: &mut Vec<String>,
) -> anyhow::Result<FanOut> {
    let n = nodes.len();
    let t0 = mesh_store::now_ms();
    let started = Instant::now();
    // Bounded, and cut short when nothing moves for a minute.
    let within = Duration::from_secs(120) + Duration::from_millis(20 * n as u64);
    let mut versions: BTreeMap<Name, i64> = BTreeMap::new();
    let mut declared_ms = Vec::new();
    let mut last_progress = (0usize, Instant::now());
    let heard = loop {
        if versions.len() < n {
            for (node, v, at) in store.declarations_made_since(before).await? {
                if versions.insert(node, v).is_none() {
                    declared_ms.push((at - t0).max(0) as f64);
                }
            }
        }
        let reports = store.reports_received_since(before).await?;
        let h = mesh::heard(&reports, &versions, t0);
        let got = h.first_ms.len();
        if got > last_progress.0 {
            last_progress = (got, Instant::now());
        }
        if got == n
            || started.elapsed() > within
            || last_progress.1.elapsed() > Duration::from_secs(60)
        {
            // A report recorded twice shows only after the first: a moment
            // more for a late one.
            if got == n {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let reports = store.reports_received_since(before).await?;
                break mesh::heard(&reports, &versions, t0);
            }
            break h;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let recorded = heard.first_ms.len();
    if recorded < n {
        problems.push(format!(
            "{phase}: {} of {n} nodes' reports never recorded",
            n - recorded
        ));
    }
    if !heard.twice.is_empty() {
        problems.push(format!(
            "{phase}: {} nodes' reports recorded twice (first: {})",
            heard.twice.len(),
            heard.twice[0]
        ));
    }
    let waited_ms = ms(started.elapsed());
    let mut reported = Spread::of(heard.first_ms.values().copied().collect());
    if recorded < n {
        // Not all in: the rate is over the whole wait, not the last heard.
        reported.per_second = recorded as f64 / (waited_ms / 1000.0);
    }
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get()) as f64;
    Ok(FanOut {
        nodes: n,
        recorded,
        missing: n - recorded,
        twice: heard.twice.len(),
        waited_ms,
        per_core: reported.per_second / cores,
        reported,
        declared: Spread::of(declared_ms),
        reloads: 0,
    })
}

async fn storm(
    broker: &mut Broker,
    bus: &mesh_bus::BusConfig,
    store: &Store,
    nodes: &[Name],
    problems: &mut Vec<String>,
) -> anyhow::Result<Storm> {
    let n = nodes.len();
    let stopped = Instant::now();
    broker.restart().await?;
    let listening = Instant::now();
    let listening_ms = mesh_store::now_ms();
    let client = mesh::connect_retrying(bus, Duration::from_secs(60)).await?;
    let js = jetstream::new(client.clone());
    let within = Duration::from_secs(120) + Duration::from_millis(20 * n as u64);
    let (bound_at, unbound) = mesh::until_bound(&js, nodes, listening, within).await;
    let bound_from_stop = bound_at + (listening - stopped);
    if !unbound.is_empty() {
        problems.push(format!(
            "reconnect storm: {} hosts never bound again (first: {})",
            unbound.len(),
            unbound[0]
        ));
    }
    // Every host reports after it reconnects; the controller records them
    // (informational: bounded at two minutes).
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = (0usize, Instant::now());
    let reported = loop {
        let r = mesh::reported_since(
            &store.reports_received_since(listening_ms).await?,
            listening_ms,
        );
        if r.len() > last.0 {
            last = (r.len(), Instant::now());
        }
        if r.len() >= n || Instant::now() > deadline || last.1.elapsed() > Duration::from_secs(60) {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let _ = client.drain().await;
    Ok(Storm {
        hosts: n,
        bound_ms: ms(bound_at),
        bound_from_stop_ms: ms(bound_from_stop),
        not_bound: unbound.len(),
        not_reported: n.saturating_sub(reported.len()),
        reported: Spread::of(reported.into_values().collect()),
    })
}

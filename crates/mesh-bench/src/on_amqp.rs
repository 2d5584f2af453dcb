//! The mesh on RabbitMQ under the bench (`--bus amqp`): genesis on AMQP,
//! RabbitMQ in the environment the genesis names, a real `mesh controller`,
//! N simulated hosts (each its own user, connection and queue), the same
//! fan-out, update and broker restart as on NATS, and raw RabbitMQ
//! publish-confirm on the same broker in the same run.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use mesh_controller::Genesis;
use mesh_controller::genesis::{BusKind, GenesisOptions};
use mesh_core::authority::{CONTROLLER, amqp};
use mesh_core::names::Name;
use mesh_store::{FleetChange, Store};
use serde::Serialize;

use crate::mesh::{self, Hosts, MeshProcess};
use crate::stats::Spread;
use crate::{FanOut, HOST_START_EVERY, ms, note, until_reported};

mod raw;

pub use raw::RawAmqp;

#[derive(Debug, Clone, Serialize)]
pub struct AmqpResults {
    pub hosts: usize,
    pub rabbitmq: String,
    /// From the hosts' start until every node's queue has its consumer.
    pub bound_ms: f64,
    pub not_bound: usize,
    pub fan_out: FanOut,
    pub update: FanOut,
    /// From RabbitMQ stopped (its stop begun) to each host's report after
    /// it reconnected, recorded.
    pub storm: Spread,
    pub storm_not_reported: usize,
    /// From RabbitMQ's stop begun to it listening again (what NATS's
    /// restart figure starts after).
    pub listening_ms: f64,
    pub raw: Option<RawAmqp>,
    /// The fan-out's rate as a fraction of raw publish-confirm's.
    pub ratio: Option<f64>,
    pub problems: Vec<String>,
}

/// A port P whose RabbitMQ companions (P + 10000, + 20000, + 30000) are
/// free too.
fn amqp_port() -> anyhow::Result<u16> {
    (20_000..35_000u16)
        .step_by(11)
        .find(|p| {
            (0..4).all(|i| std::net::TcpListener::bind(("127.0.0.1", p + i * 10_000)).is_ok())
        })
        .context("no free run of ports for RabbitMQ")
}

pub async fn bench(n: usize, work: &Path, hosts_dir: &Path) -> anyhow::Result<AmqpResults> {
    let mut problems = Vec::new();
    let dir = work.join("mesh");
    let url = format!("sqlite://{}", dir.join("mesh.db").display());
    let opts = GenesisOptions {
        port: amqp_port()?,
        bus: BusKind::Amqp,
        ..GenesisOptions::default()
    };
    mesh_cli::init::make_with(&dir, &[], &opts, &url).await?;
    let genesis = Genesis::open(&dir)?;
    note(format_args!("RabbitMQ: starting"));
    let env: Vec<(String, std::ffi::OsString)> = genesis
        .rabbitmq_env()
        .context("an AMQP genesis names RabbitMQ's environment")?
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let epmd = genesis.amqp_ports.map(|p| p.epmd).unwrap_or_default();
    let broker =
        tokio::task::spawn_blocking(move || mesh_testkit::RabbitMq::start_with_env(env, epmd))
            .await??;
    let store = mesh_cli::authority::open_store(&url).await?;
    let module = Name::new(mesh::MODULE).expect("a valid name");
    store.register_module(&module, mesh::MANIFEST).await?;
    note(format_args!("{n} hosts: recording them"));
    let states = mesh::record_hosts(&store, &genesis, hosts_dir, n).await?;
    let nodes: Vec<Name> = states.iter().map(|s| s.node.clone()).collect();
    let dir_arg = dir.display().to_string();
    let mut controller = MeshProcess::spawn(
        &[
            "controller",
            "--dir",
            &dir_arg,
            "--store",
            &url,
            "--no-http",
        ],
        work.join("controller.log"),
        None,
    )?;
    controller
        .wait_log("controller running", Duration::from_secs(300))
        .await?;
    let management = management(&genesis)?;

    note(format_args!("{n} hosts: starting and binding"));
    let started = Instant::now();
    let hosts = Hosts::start(states, HOST_START_EVERY);
    let within = Duration::from_secs(120) + Duration::from_millis(20 * n as u64);
    let (bound_at, unbound) = until_consumed(&management, &nodes, started, within).await;
    if !unbound.is_empty() {
        problems.push(format!(
            "{} hosts never took their queue (first: {})",
            unbound.len(),
            unbound[0]
        ));
    }

    note(format_args!(
        "fan-out: one change assigning {} to {n} nodes",
        mesh::MODULE
    ));
    let change = FleetChange {
        assignments: nodes.iter().map(|n| (n.clone(), module.clone())).collect(),
        ..FleetChange::default()
    };
    let before = mesh_store::now_ms();
    store.apply_fleet(&change).await?;
    let fan_out = until_reported(&store, &nodes, before, "fan-out", &mut problems).await?;
    note(format_args!(
        "update: {}'s environment changed on {n} nodes",
        mesh::MODULE
    ));
    let before = mesh_store::now_ms();
    store
        .register_module(&module, mesh::MANIFEST_UPDATED)
        .await?;
    let update = until_reported(&store, &nodes, before, "update", &mut problems).await?;

    note(format_args!(
        "reconnect storm: RabbitMQ restarted under {n} hosts"
    ));
    let stopped_ms = mesh_store::now_ms();
    let restarting = tokio::task::spawn_blocking(move || {
        broker.stop();
        broker.boot().map(|()| broker)
    });
    let broker = restarting.await??;
    let listening_ms = (mesh_store::now_ms() - stopped_ms) as f64;
    let (storm, storm_not_reported) = reported_after(&store, n, stopped_ms).await?;
    if storm_not_reported > 0 {
        problems.push(format!(
            "reconnect storm: {storm_not_reported} hosts never reported again"
        ));
    }
    controller.stop().await;
    note(format_args!("stopping the hosts"));
    let failed = hosts.stop().await;
    if failed > 0 {
        problems.push(format!("{failed} hosts ended with an error"));
    }

    note(format_args!(
        "raw RabbitMQ: {n} queues, publish-confirm, consumed and acked"
    ));
    let raw = match raw::run(&genesis, &management, n).await {
        Ok(r) => {
            if r.missing > 0 {
                problems.push(format!("raw RabbitMQ: {} messages never acked", r.missing));
            }
            Some(r)
        }
        Err(e) => {
            problems.push(format!("raw RabbitMQ: {e:#}"));
            None
        }
    };
    let ratio = raw
        .as_ref()
        .filter(|r| r.acked.per_second > 0.0)
        .map(|r| fan_out.reported.per_second / r.acked.per_second);
    store.close().await;
    let rabbitmq = rabbitmq_version();
    drop(broker);
    Ok(AmqpResults {
        hosts: n,
        rabbitmq,
        bound_ms: ms(bound_at),
        not_bound: unbound.len(),
        fan_out,
        update,
        storm,
        storm_not_reported,
        listening_ms,
        raw,
        ratio,
        problems,
    })
}

/// The management API as the controller (its password from its seed).
fn management(genesis: &Genesis) -> anyhow::Result<mesh_bus::amqp::Management> {
    let seed = std::fs::read_to_string(genesis.path(mesh_controller::genesis::NKEY_SEED))?;
    let url = genesis
        .management_url()
        .context("an AMQP genesis names its management API")?;
    Ok(mesh_bus::amqp::Management::new(
        &url,
        CONTROLLER,
        &mesh_bus::Secret::new(amqp::password_of(&seed)),
        &genesis.path(mesh_controller::genesis::CA_CERT),
    )?)
}

/// Polls the management API until every node's queue has a consumer (its
/// host bound it) or `within` passes: when the last was first seen, and
/// those never seen.
async fn until_consumed(
    m: &mesh_bus::amqp::Management,
    nodes: &[Name],
    since: Instant,
    within: Duration,
) -> (Duration, Vec<Name>) {
    let mut waiting: Vec<Name> = nodes.to_vec();
    let mut last = Duration::ZERO;
    let deadline = Instant::now() + within;
    while !waiting.is_empty() && Instant::now() < deadline {
        let m = m.clone();
        let consumers = tokio::task::spawn_blocking(move || m.queue_consumers())
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        let before = waiting.len();
        waiting.retain(|n| {
            let queue = amqp::queue(&mesh_core::jetstream::node_consumer(n));
            consumers.get(&queue).copied().unwrap_or(0) == 0
        });
        if waiting.len() < before {
            last = since.elapsed();
        }
        if !waiting.is_empty() {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    (last, waiting)
}

/// Each node's first report recorded after `since_ms`, bounded at two
/// minutes (a minute without progress ends it).
async fn reported_after(store: &Store, n: usize, since_ms: i64) -> anyhow::Result<(Spread, usize)> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = (0usize, Instant::now());
    let reported = loop {
        let r = mesh::reported_since(&store.reports_received_since(since_ms).await?, since_ms);
        if r.len() > last.0 {
            last = (r.len(), Instant::now());
        }
        if r.len() >= n || Instant::now() > deadline || last.1.elapsed() > Duration::from_secs(60) {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let missing = n.saturating_sub(reported.len());
    Ok((Spread::of(reported.into_values().collect()), missing))
}

/// `rabbitmqctl version` is a node call; the package's own word is enough.
fn rabbitmq_version() -> String {
    std::process::Command::new("dpkg-query")
        .args(["-W", "-f", "${Version}", "rabbitmq-server"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "?".into())
}

/// The results as the text table `mesh-bench --bus amqp` prints.
pub fn table(r: &AmqpResults) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let spread = |s: &Spread| {
        format!(
            "p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms, {:.0}/s",
            s.p50_ms, s.p99_ms, s.max_ms, s.per_second
        )
    };
    let _ = writeln!(
        out,
        "mesh-bench on RabbitMQ {} — {} hosts",
        r.rabbitmq, r.hosts
    );
    let _ = writeln!(
        out,
        "  bound        every node's queue taken by its host in {:.0} ms ({} never)",
        r.bound_ms, r.not_bound
    );
    for (what, f) in [("fan-out", &r.fan_out), ("update", &r.update)] {
        let _ = writeln!(
            out,
            "  {what:<12} {} of {} reported ({} missing, {} twice): {}",
            f.recorded,
            f.nodes,
            f.missing,
            f.twice,
            spread(&f.reported)
        );
    }
    let _ = writeln!(
        out,
        "  restart      each host's report after RabbitMQ's stop began: {} ({} never); listening again after {:.0} ms",
        spread(&r.storm),
        r.storm_not_reported,
        r.listening_ms
    );
    match &r.raw {
        Some(raw) => {
            let _ = writeln!(
                out,
                "  raw          {} messages publish-confirmed in {:.0} ms, acked: {} ({} missing)",
                raw.messages,
                raw.confirmed_ms,
                spread(&raw.acked),
                raw.missing
            );
        }
        None => {
            let _ = writeln!(out, "  raw          not run");
        }
    }
    if let Some(ratio) = r.ratio {
        let _ = writeln!(out, "  fan-out / raw  {:.3}", ratio);
    }
    for p in &r.problems {
        let _ = writeln!(out, "  problem: {p}");
    }
    out
}

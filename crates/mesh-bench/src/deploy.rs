//! `mesh-bench --deploy`: a deployment over N simulated hosts in batches
//! of 10% with a 1 s healthy window, beside the one-shot fan-out of the
//! same module to the same hosts in the same run. The hosts run the module
//! with the no-op driver and the real health checker (no `[health]`:
//! healthy once it has run for the default 2 s), so each batch's time is
//! its declarations' fan-out, the host's own healthy_after, the window
//! and the controller's tick — what an operator waits for.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use mesh_cli::init;
use mesh_controller::Genesis;
use mesh_core::deploy::{BatchSize, Deployment, Spec, State};
use mesh_core::names::Name;
use mesh_store::{FleetChange, Upload};
use serde::Serialize;

use crate::mesh::{self, Broker, Hosts, MeshProcess};
use crate::stats::Spread;
use crate::{FanOut, HOST_START_EVERY, ms, note, until_reported};

/// Nodes per batch, and the window each batch stays healthy for.
const BATCH_PERCENT: u8 = 10;
const HEALTHY_FOR_MS: u64 = 1000;

#[derive(Debug, Clone, Serialize)]
pub struct DeployResults {
    pub hosts: usize,
    pub bound_ms: f64,
    /// The module assigned to every host in one change.
    pub fan_out: FanOut,
    pub batch_percent: u8,
    pub healthy_for_ms: u64,
    /// From the deployment recorded to it recorded succeeded.
    pub total_ms: f64,
    /// Each batch, from its start to the next one's (the last: to the
    /// deployment's end).
    pub batches_ms: Vec<f64>,
    pub batch: Spread,
    /// How the deployment ended.
    pub state: String,
    /// Nodes whose newest report runs the new version at the end.
    pub on_new_version: usize,
    pub problems: Vec<String>,
}

/// A version of the bench's module: one artifact its run never names, so
/// a pin moves the declaration (its `pinned`) and nothing is fetched.
fn version(module: &Name, v: &str) -> Upload {
    Upload {
        module: module.clone(),
        version: v.into(),
        name: Name::new("unused").expect("a name"),
        sha256: format!("{:064x}", v.len()),
        size: 1,
        nuid: format!("bench-{v}"),
    }
}

pub async fn bench(
    n: usize,
    nats: &Path,
    work: &Path,
    hosts_dir: &Path,
) -> anyhow::Result<DeployResults> {
    let mut problems = Vec::new();
    let dir = work.join("mesh");
    let url = format!("sqlite://{}", dir.join("mesh.db").display());
    init::make(&dir, &[], mesh::free_port()?, &url).await?;
    let genesis = Genesis::open(&dir)?;
    let mut broker = Broker::start(nats, &genesis).await?;
    let store = mesh_cli::authority::open_store(&url).await?;
    let module = Name::new(mesh::MODULE).expect("a valid name");
    store.register_module(&module, mesh::MANIFEST).await?;
    store.record_upload(&version(&module, "v1")).await?;
    note(format_args!("{n} hosts: recording them"));
    let states = mesh::record_hosts(&store, &genesis, hosts_dir, n).await?;
    let nodes: Vec<Name> = states.iter().map(|s| s.node.clone()).collect();
    let (dir_arg, store_arg) = (dir.display().to_string(), url.clone());
    let mut controller = MeshProcess::spawn(
        &["controller", "--dir", &dir_arg, "--store", &store_arg],
        work.join("controller.log"),
        None,
    )?;
    controller
        .wait_log("controller running", Duration::from_secs(300))
        .await?;
    let client =
        mesh::connect_retrying(&mesh::controller_bus(&genesis)?, Duration::from_secs(30)).await?;
    let js = async_nats::jetstream::new(client.clone());
    note(format_args!("{n} hosts: starting and binding"));
    let started = Instant::now();
    let hosts = Hosts::start(states, HOST_START_EVERY);
    let within = Duration::from_secs(120) + Duration::from_millis(20 * n as u64);
    let (bound_at, unbound) = mesh::until_bound(&js, &nodes, started, within).await;
    if !unbound.is_empty() {
        problems.push(format!(
            "{} hosts never bound their consumer",
            unbound.len()
        ));
    }

    note(format_args!(
        "fan-out: {} assigned to {n} nodes at v1",
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
        "deploy: v2 over {n} nodes, batches of {BATCH_PERCENT}%, healthy for {HEALTHY_FOR_MS} ms"
    ));
    store.record_upload(&version(&module, "v2")).await?;
    let mut sorted = nodes.clone();
    sorted.sort();
    let d = Deployment {
        previous: sorted
            .iter()
            .map(|n| (n.clone(), "v1".to_string()))
            .collect::<BTreeMap<_, _>>(),
        spec: Spec {
            module: module.clone(),
            version: "v2".into(),
            nodes: sorted,
            canary: 0,
            batch: BatchSize::Percent(BATCH_PERCENT),
            healthy_for_ms: HEALTHY_FOR_MS,
            deadline_ms: 600_000,
            auto_revert: true,
        },
        state: State::Running {
            batch: 0,
            started_ms: u64::try_from(mesh_store::now_ms()).unwrap_or(0),
        },
    };
    let t0 = Instant::now();
    let id = store.create_deployment(&d).await?;
    let mut starts = vec![0.0];
    let mut last_batch = 0;
    let ended = loop {
        let row = store
            .deployment(id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("deployment #{id} is gone"))?;
        match &row.deployment.state {
            State::Running { batch, .. } if *batch != last_batch => {
                last_batch = *batch;
                starts.push(ms(t0.elapsed()));
                note(format_args!(
                    "deploy: batch {} began at {:.1} s",
                    batch + 1,
                    t0.elapsed().as_secs_f64()
                ));
            }
            State::Running { .. } | State::Paused { .. } => {}
            other => break other.clone(),
        }
        if t0.elapsed() > Duration::from_secs(900) {
            problems.push("deploy: not ended within 15 minutes".into());
            break row.deployment.state.clone();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let total_ms = ms(t0.elapsed());
    starts.push(total_ms);
    let batches_ms: Vec<f64> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    let state = match &ended {
        State::Succeeded => "succeeded".to_string(),
        other => {
            problems.push(format!("deploy ended {other:?}"));
            format!("{other:?}")
        }
    };
    let newest = store.newest_outcomes(&module).await?;
    let on_new_version = newest
        .values()
        .filter(|(o, _)| o.pinned.as_deref() == Some("v2"))
        .count();
    if on_new_version < n {
        problems.push(format!(
            "deploy: {} of {n} nodes not on v2",
            n - on_new_version
        ));
    }

    controller.stop().await;
    let failed = hosts.stop().await;
    if failed > 0 {
        problems.push(format!("{failed} hosts ended with an error"));
    }
    let _ = client.drain().await;
    broker.stop().await;
    store.close().await;
    Ok(DeployResults {
        hosts: n,
        bound_ms: ms(bound_at),
        fan_out,
        batch_percent: BATCH_PERCENT,
        healthy_for_ms: HEALTHY_FOR_MS,
        total_ms,
        batch: Spread::of(batches_ms.clone()),
        batches_ms,
        state,
        on_new_version,
        problems,
    })
}

/// The deploy's figures beside the one-shot fan-out's.
pub fn table(r: &DeployResults) -> String {
    let s = |ms: f64| format!("{:.2} s", ms / 1000.0);
    let mut out = format!(
        "mesh-bench --deploy: {} simulated hosts (bound in {})\n\n",
        r.hosts,
        s(r.bound_ms)
    );
    out.push_str(&format!(
        "one-shot fan-out (every node at once)   p50 {}  max {}  ({:.0}/s)\n",
        s(r.fan_out.reported.p50_ms),
        s(r.fan_out.reported.max_ms),
        r.fan_out.reported.per_second
    ));
    out.push_str(&format!(
        "deploy, batches of {}%, healthy {} ms  total {}  ({} batches: p50 {}, max {})  {}; {} of {} nodes on v2\n",
        r.batch_percent,
        r.healthy_for_ms,
        s(r.total_ms),
        r.batches_ms.len(),
        s(r.batch.p50_ms),
        s(r.batch.max_ms),
        r.state,
        r.on_new_version,
        r.hosts
    ));
    out.push_str("per batch:");
    for b in &r.batches_ms {
        out.push_str(&format!(" {:.2}", b / 1000.0));
    }
    out.push_str(" s\n");
    for p in &r.problems {
        out.push_str(&format!("problem: {p}\n"));
    }
    out
}

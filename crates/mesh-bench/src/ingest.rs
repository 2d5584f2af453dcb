//! Report ingestion on each backend: reports recorded exactly as the
//! controller records what CONTROL delivers (`mesh_controller::daemon::
//! record_report`, one after another), for a fleet of N nodes each running
//! the bench's module with its key already recorded — the steady state
//! after a fan-out.

use std::time::{Duration, Instant};

use mesh_controller::daemon::{Ingested, REPORT_BATCH, record_report, record_reports};
use mesh_core::authority::PrincipalKind;
use mesh_core::names::Name;
use mesh_core::report::{ModuleReport, ModuleState, Report};
use mesh_store::{FleetChange, Store};
use serde::Serialize;

use crate::mesh::{MANIFEST, MODULE, node_name};

#[derive(Debug, Clone, Serialize)]
pub struct IngestResult {
    pub backend: String,
    pub version: String,
    pub nodes: usize,
    /// In batches of what CONTROL delivered together (up to the
    /// controller's batch), as the controller records a burst.
    pub batch: usize,
    pub reports: u64,
    pub seconds: f64,
    pub per_second: f64,
    /// One at a time, as the controller records a trickle.
    pub one_by_one_per_second: f64,
    /// Anything but `Recorded` (there should be none).
    pub not_recorded: u64,
}

pub async fn run(
    label: &str,
    store: &Store,
    nodes: usize,
    window: Duration,
) -> anyhow::Result<IngestResult> {
    let module = Name::new(MODULE).expect("a valid name");
    store.register_module(&module, MANIFEST).await?;
    let mut change = FleetChange::default();
    let mut keys = Vec::with_capacity(nodes);
    for i in 0..nodes {
        let node = node_name(i);
        let key = nkeys::KeyPair::new_user().public_key();
        change.nodes.push(node.clone());
        change.assignments.push((node.clone(), module.clone()));
        change.credentials.push(mesh_store::prepare_machine_key(
            &PrincipalKind::Module {
                node: node.clone(),
                module: module.clone(),
            },
            &key,
        )?);
        keys.push((node, key));
    }
    store.apply_fleet(&change).await?;
    let version = store.backend_version().await.unwrap_or_else(|_| "?".into());

    let report = |i: u64| {
        let (node, key) = &keys[(i as usize) % keys.len()];
        Report {
            id: format!("{:032x}", i),
            node: node.clone(),
            sequence: 1,
            modules: vec![ModuleReport {
                name: module.clone(),
                state: ModuleState::Running,
                reason: None,
                restarts: 0,
                nkey: Some(key.clone()),
                pinned: None,
                health: None,
            }],
            refused: None,
            address: None,
            spare_keys: Vec::new(),
            amqp_hashes: Default::default(),
        }
    };
    // Warm the pool and the statement caches.
    let mut i = 0u64;
    let warm = Instant::now();
    while warm.elapsed() < Duration::from_millis(200) {
        record_report(store, &report(i)).await?;
        i += 1;
    }
    let started = Instant::now();
    let mut one = 0u64;
    while started.elapsed() < window / 2 {
        if record_report(store, &report(i)).await? == Ingested::Recorded {
            one += 1;
        }
        i += 1;
    }
    let one_by_one_per_second = one as f64 / started.elapsed().as_secs_f64();
    let started = Instant::now();
    let (mut recorded, mut other) = (0u64, 0u64);
    while started.elapsed() < window {
        let batch: Vec<Report> = (i..i + REPORT_BATCH as u64).map(report).collect();
        i += REPORT_BATCH as u64;
        for outcome in record_reports(store, &batch).await? {
            match outcome {
                Ingested::Recorded => recorded += 1,
                _ => other += 1,
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(IngestResult {
        backend: label.to_string(),
        version,
        nodes,
        batch: REPORT_BATCH,
        reports: recorded,
        seconds,
        per_second: recorded as f64 / seconds,
        one_by_one_per_second,
        not_recorded: other,
    })
}

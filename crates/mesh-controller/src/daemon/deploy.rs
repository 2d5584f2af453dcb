//! The deployment executor (DESIGN "health and deploys"): every tick, for
//! each active deployment, the controller reads the records and each node's
//! newest report, asks `mesh_core::deploy::next` what comes next, and does
//! it — a pin moved, a state recorded. It decides nothing itself. It runs
//! only in the active controller's term; a standby that takes over reads
//! the same records and carries on where they say, and a node already
//! pinned to the version is never moved again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use mesh_core::deploy::{self, Deployment, Health, Observed, State, Step};
use mesh_core::names::Name;
use mesh_core::report::ModuleHealth;
use mesh_store::{DeploymentRow, ModuleOutcome, ModuleState, StoreError};

use super::Ctx;

/// How often active deployments are looked at: a healthy window is
/// seconds long, and each look is a handful of reads.
const TICK: Duration = Duration::from_millis(500);

pub(crate) async fn drive(ctx: Arc<Ctx>) {
    let mut said: Option<String> = None;
    loop {
        tokio::time::sleep(TICK).await;
        match tick(&ctx).await {
            Ok(()) => said = None,
            Err(e) => {
                let why = crate::chain::error_chain(&e);
                if said.as_ref() != Some(&why) {
                    tracing::warn!(error = %why, "deployments not moved on; trying again");
                    said = Some(why);
                }
            }
        }
    }
}

async fn tick(ctx: &Ctx) -> Result<(), StoreError> {
    let active = ctx.store.active_deployments().await?;
    if active.is_empty() {
        return Ok(());
    }
    let assignments = ctx.store.assignments().await?;
    for row in active {
        let observed = observe(ctx, &row.deployment, &assignments).await?;
        let now = u64::try_from(mesh_store::now_ms()).unwrap_or(0);
        let steps = deploy::next(&row.deployment, &observed, now);
        carry_out(ctx, &row, steps).await?;
    }
    Ok(())
}

/// Each node of `d` as the records pin it and its newest report says.
async fn observe(
    ctx: &Ctx,
    d: &Deployment,
    assignments: &[mesh_store::Assignment],
) -> Result<BTreeMap<Name, Observed>, StoreError> {
    let module = &d.spec.module;
    // One read for the fleet: a batch of thousands is not a read each.
    let newest = ctx.store.newest_outcomes(module).await?;
    let pins: BTreeMap<&Name, &Option<String>> = assignments
        .iter()
        .filter(|a| a.module == *module)
        .map(|a| (&a.node, &a.version))
        .collect();
    let mut out = BTreeMap::new();
    for node in &d.spec.nodes {
        let pinned = pins.get(node).and_then(|v| (*v).clone());
        let (running, health) = match newest.get(node) {
            Some((o, at)) => (o.pinned.clone(), health(o, *at)),
            None => (None, Health::Starting),
        };
        out.insert(
            node.clone(),
            Observed {
                pinned,
                running,
                health,
            },
        );
    }
    Ok(out)
}

/// A reported outcome's health, counted on the controller's clock from
/// when the report was received.
fn health(o: &ModuleOutcome, received_at: i64) -> Health {
    let received = u64::try_from(received_at).unwrap_or(0);
    match (&o.health, &o.state) {
        (_, ModuleState::Failed { reason }) => Health::Unhealthy {
            reason: format!("the process keeps exiting: {reason}"),
        },
        (Some(ModuleHealth::Unhealthy { reason }), _) => Health::Unhealthy {
            reason: reason.clone(),
        },
        (Some(ModuleHealth::Healthy { for_ms }), ModuleState::Running) => Health::Healthy {
            since_ms: received.saturating_sub(*for_ms),
        },
        _ => Health::Starting,
    }
}

/// Carries out `steps` through the store (every pin in one change of the
/// records), saying each.
async fn carry_out(ctx: &Ctx, row: &DeploymentRow, steps: Vec<Step>) -> Result<(), StoreError> {
    let d = &row.deployment;
    let module = &d.spec.module;
    let pins: Vec<(&Name, &String)> = steps
        .iter()
        .filter_map(|s| match s {
            Step::Pin { node, version } => Some((node, version)),
            Step::Record { .. } => None,
        })
        .collect();
    for (node, version) in pins {
        tracing::info!(deployment = row.id, %module, %node, %version, "deployment moved a node");
    }
    match ctx.store.carry_out_deployment(row, steps).await? {
        Some(State::Running { batch, .. }) => {
            tracing::info!(deployment = row.id, %module, batch, "deployment began a batch")
        }
        Some(State::Succeeded) => {
            tracing::info!(deployment = row.id, %module, version = %d.spec.version, "deployment succeeded")
        }
        Some(State::Halted { node, reason }) => {
            tracing::warn!(deployment = row.id, %module, %node, %reason, "deployment halted")
        }
        Some(State::Reverted { node, reason }) => {
            tracing::warn!(deployment = row.id, %module, node = ?node, %reason, "deployment reverted")
        }
        Some(State::Paused { .. }) | None => {}
    }
    Ok(())
}

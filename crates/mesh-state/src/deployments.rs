//! Deployments as operations: made, paused, resumed, reverted and read by
//! one set of functions, taken by the controller (a person's request over
//! the bus) and by the CLI on the controller's machine, so the checks and
//! the words are one whoever asks. A change is written over the state it
//! was read as (`Store::carry_out_deployment`), so the controller's next
//! step never undoes it.

use std::collections::BTreeMap;

use mesh_core::deploy::{self, Deployment, Spec, State, Step};
use mesh_core::duration::show_span;
use mesh_core::names::Name;
use mesh_core::operation::wire::DeploymentChange;
use mesh_core::report::ModuleHealth;
use mesh_store::{DeploymentRow, ModuleState, Store, StoreError};
use serde::{Deserialize, Serialize};

use crate::operations::OperationError;

type Result<T> = std::result::Result<T, OperationError>;

fn refused<T>(why: impl Into<String>) -> Result<T> {
    Err(OperationError::Refused(why.into()))
}

fn now_ms() -> u64 {
    u64::try_from(mesh_store::now_ms()).unwrap_or(0)
}

/// One node of a deployment: its pin, what its host runs, and why it is
/// not well if it is not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRow {
    pub node: String,
    pub batch: usize,
    pub pinned: Option<String>,
    pub running: Option<String>,
    pub health: Option<String>,
    pub reason: Option<String>,
}

/// A deployment node by node, as `mesh deployment ID` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shown {
    pub id: i64,
    pub deployment: Deployment,
    pub nodes: Vec<NodeRow>,
}

/// A deployment as `mesh deployments` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listed {
    pub id: i64,
    pub deployment: Deployment,
    pub created_at: i64,
    pub updated_at: i64,
}

/// Records a deployment of `spec` (no nodes: every node the module is
/// assigned to), refusing what could never finish; the controller carries
/// it out.
pub async fn deploy(store: &Store, mut spec: Spec) -> Result<(i64, Deployment)> {
    let module = spec.module.clone();
    if store.module(&module).await?.is_none() {
        return refused(format!(
            "module {module} is not registered; `mesh catalogue register DIR` registers it"
        ));
    }
    let versions = store.versions().await?;
    if !versions.contains_key(&(module.clone(), spec.version.clone())) {
        return refused(format!(
            "module {module} has no version {}; `mesh artifact list --module {module}` lists its versions",
            spec.version
        ));
    }
    let assignments: Vec<_> = store
        .assignments()
        .await?
        .into_iter()
        .filter(|a| a.module == module)
        .collect();
    let assigned: Vec<Name> = assignments.iter().map(|a| a.node.clone()).collect();
    if spec.nodes.is_empty() {
        spec.nodes = assigned.clone();
    }
    if let Err(e) = spec.check(&assigned) {
        return refused(e.to_string());
    }
    if spec.deadline_ms < spec.healthy_for_ms {
        return refused(format!(
            "the deadline ({}) is shorter than the healthy window ({}): no batch could pass; give a longer --deadline",
            show_span(spec.deadline_ms),
            show_span(spec.healthy_for_ms)
        ));
    }
    let previous: BTreeMap<Name, String> = assignments
        .iter()
        .filter(|a| spec.nodes.contains(&a.node))
        .filter_map(|a| a.version.clone().map(|v| (a.node.clone(), v)))
        .collect();
    let d = Deployment {
        spec,
        previous,
        state: State::Running {
            batch: 0,
            started_ms: now_ms(),
        },
    };
    match store.create_deployment(&d).await {
        Ok(id) => Ok((id, d)),
        Err(StoreError::AlreadyExists { key, .. }) => refused(format!(
            "deployment {key} is still running; wait for it (`mesh deployments --module {module}`), or stop it with `mesh deployment ID --revert`"
        )),
        Err(e) => Err(e.into()),
    }
}

/// Pauses, resumes or reverts deployment `id` (a revert says `who`
/// asked), then reads it node by node.
pub async fn change(store: &Store, id: i64, change: DeploymentChange, who: &str) -> Result<Shown> {
    // Tried again when the controller wrote its step in between.
    for _ in 0..10 {
        let row = read(store, id).await?;
        let d = &row.deployment;
        let steps = match (change, &d.state) {
            (DeploymentChange::Pause, State::Running { batch, .. }) => vec![Step::Record {
                state: State::Paused { batch: *batch },
            }],
            (DeploymentChange::Pause, State::Paused { .. }) => Vec::new(),
            (DeploymentChange::Pause, s) => {
                return refused(format!(
                    "deployment #{id} is {s}: only a running one pauses"
                ));
            }
            (DeploymentChange::Resume, State::Paused { batch }) => vec![Step::Record {
                state: State::Running {
                    batch: *batch,
                    started_ms: now_ms(),
                },
            }],
            (DeploymentChange::Resume, State::Running { .. }) => Vec::new(),
            (DeploymentChange::Resume, s) => {
                return refused(format!(
                    "deployment #{id} is {s}: only a paused one resumes"
                ));
            }
            (DeploymentChange::Revert, State::Reverted { .. }) => Vec::new(),
            (DeploymentChange::Revert, _) => deploy::revert(d, &format!("asked by {who}")),
        };
        if steps.is_empty() || store.carry_out_deployment(&row, steps).await?.is_some() {
            return shown(store, id).await;
        }
    }
    refused(format!(
        "deployment #{id} kept changing while it was being written; ask again"
    ))
}

async fn read(store: &Store, id: i64) -> Result<DeploymentRow> {
    match store.deployment(id).await? {
        Some(row) => Ok(row),
        None => refused(format!(
            "there is no deployment #{id}; `mesh deployments` lists them"
        )),
    }
}

/// The newest deployments (of `module`), at most `limit`.
pub async fn listed(store: &Store, module: Option<&Name>, limit: u32) -> Result<Vec<Listed>> {
    Ok(store
        .deployments(module, limit)
        .await?
        .into_iter()
        .map(|r| Listed {
            id: r.id,
            deployment: r.deployment,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
        .collect())
}

/// Deployment `id` with each node's pin and newest report.
pub async fn shown(store: &Store, id: i64) -> Result<Shown> {
    let row = read(store, id).await?;
    let d = &row.deployment;
    let assignments = store.assignments().await?;
    let mut nodes = Vec::new();
    for (batch, members) in d.spec.batches().iter().enumerate() {
        for node in members {
            let pinned = assignments
                .iter()
                .find(|a| a.node == *node && a.module == d.spec.module)
                .and_then(|a| a.version.clone());
            let report = store.latest_report(node).await?;
            let o = report
                .as_ref()
                .and_then(|r| r.report.outcomes.iter().find(|o| o.module == d.spec.module));
            let reason = o.and_then(|o| match (&o.state, &o.health) {
                (ModuleState::Failed { reason }, _) => Some(reason.clone()),
                (_, Some(ModuleHealth::Unhealthy { reason })) => Some(reason.clone()),
                _ => None,
            });
            nodes.push(NodeRow {
                node: node.to_string(),
                batch,
                pinned,
                running: o.and_then(|o| o.pinned.clone()),
                health: o.and_then(|o| o.health.as_ref().map(|h| h.as_str().to_string())),
                reason,
            });
        }
    }
    Ok(Shown {
        id: row.id,
        deployment: row.deployment,
        nodes,
    })
}

//! What the listings show, computed once: `mesh nodes|modules|reports|seats|
//! status --output json` and the controller's JSON API serialize these very
//! structures, so a script reading one reads the other.

pub mod rollout;
mod seats;
mod status;

pub use seats::{
    CatalogueModule, CatalogueView, ConsumeView, HolderView, SeatView, catalogue, seats,
};
pub use status::{
    Action, Behind, ControllerView, LeaseView, Moved, Refusal, ServerView, StatusView, behind,
    needs_action, status,
};

use mesh_core::liveness::{HEARTBEAT_EVERY, liveness};
use mesh_core::names::Name;
use mesh_store::{Store, StoreError};
use serde::{Deserialize, Serialize};

use crate::RegisteredError;

/// A view could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error("could not read the records")]
    Store(#[from] StoreError),
    #[error("could not read the registered catalogue")]
    Catalogue(#[from] RegisteredError),
}

/// One node as `mesh nodes` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeView {
    pub node: String,
    /// `enrolled`, `token issued` or `no token`.
    pub state: String,
    pub host_key: Option<String>,
    pub enrolled_at: Option<i64>,
    pub last_seen_at: Option<i64>,
    /// `ready`, `stale`, `down` or `unseen` (from last seen; DESIGN §6).
    pub liveness: String,
    /// Where other nodes reach it (`${seat:..}` is filled with it).
    #[serde(default)]
    pub address: Option<String>,
    /// seat → the port this node gives that seat's holder on it.
    #[serde(default)]
    pub ports: std::collections::BTreeMap<String, u16>,
}

impl NodeView {
    /// What the node is, in one word for counting: its liveness once
    /// enrolled, `not enrolled` before.
    pub fn condition(&self) -> &str {
        if self.enrolled_at.is_some() {
            &self.liveness
        } else {
            "not enrolled"
        }
    }
}

/// One assignment and what its node's newest report says of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleView {
    pub module: String,
    pub node: String,
    /// `starting`, `running`, `failed`, `stopped`, or `unreported`.
    pub state: String,
    /// `starting`, `healthy` or `unhealthy` as its host's check says;
    /// none before a report (or from a host before health).
    #[serde(default)]
    pub health: Option<String>,
    /// The version the host runs, as its declaration pinned.
    #[serde(default)]
    pub version: Option<String>,
    pub restarts: u32,
    /// Why it failed, else why it is unhealthy (the check's output).
    pub reason: Option<String>,
    /// The declaration the report answers.
    pub sequence: Option<i64>,
}

/// One recorded report, as `mesh reports NODE` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportView {
    pub id: i64,
    pub sequence: i64,
    pub received_at: i64,
    pub refused: Option<String>,
    pub modules: Vec<OutcomeView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutcomeView {
    pub module: String,
    pub state: String,
    #[serde(default)]
    pub health: Option<String>,
    #[serde(default)]
    pub version: Option<String>,
    /// How long it had been healthy when the report was made.
    #[serde(default)]
    pub healthy_for_ms: Option<u64>,
    pub restarts: u32,
    pub reason: Option<String>,
}

impl OutcomeView {
    fn of(o: &mesh_store::ModuleOutcome) -> OutcomeView {
        let (state, reason) = match &o.state {
            mesh_store::ModuleState::Starting => ("starting", None),
            mesh_store::ModuleState::Running => ("running", None),
            mesh_store::ModuleState::Failed { reason } => ("failed", Some(reason.clone())),
            mesh_store::ModuleState::Stopped => ("stopped", None),
        };
        let unhealthy = match &o.health {
            Some(mesh_core::report::ModuleHealth::Unhealthy { reason }) => Some(reason.clone()),
            _ => None,
        };
        OutcomeView {
            module: o.module.to_string(),
            state: state.into(),
            health: o.health.as_ref().map(|h| h.as_str().to_string()),
            version: o.pinned.clone(),
            healthy_for_ms: match &o.health {
                Some(mesh_core::report::ModuleHealth::Healthy { for_ms }) => Some(*for_ms),
                _ => None,
            },
            restarts: o.restarts,
            reason: reason.or(unhealthy),
        }
    }
}

/// Every node, by name, with its liveness at `now_ms`.
pub async fn nodes(store: &Store, now_ms: u64) -> Result<Vec<NodeView>, ViewError> {
    let nodes = store.nodes().await?;
    let tokens = store.live_tokens().await?;
    let mut ports: std::collections::BTreeMap<Name, std::collections::BTreeMap<String, u16>> =
        std::collections::BTreeMap::new();
    for (node, seat, port) in store.node_seat_ports().await? {
        ports
            .entry(node)
            .or_default()
            .insert(seat.to_string(), port);
    }
    Ok(nodes
        .into_iter()
        .map(|n| NodeView {
            ports: ports.remove(&n.name).unwrap_or_default(),
            address: n.address.clone(),
            state: if n.enrolled_at.is_some() {
                "enrolled"
            } else if tokens.iter().any(|t| t.node == n.name) {
                "token issued"
            } else {
                "no token"
            }
            .into(),
            node: n.name.to_string(),
            host_key: n.public_key,
            enrolled_at: n.enrolled_at,
            liveness: liveness(
                n.last_seen_at.and_then(|t| u64::try_from(t).ok()),
                now_ms,
                HEARTBEAT_EVERY,
            )
            .as_str()
            .into(),
            last_seen_at: n.last_seen_at,
        })
        .collect())
}

/// Every assignment, with its state in its node's newest report.
pub async fn modules(store: &Store) -> Result<Vec<ModuleView>, ViewError> {
    let mut rows = Vec::new();
    let mut newest: std::collections::BTreeMap<Name, Option<mesh_store::StoredReport>> =
        Default::default();
    for a in store.assignments().await? {
        if !newest.contains_key(&a.node) {
            let r = store.latest_report(&a.node).await?;
            newest.insert(a.node.clone(), r);
        }
        let latest = newest.get(&a.node).and_then(Option::as_ref);
        let o = latest
            .and_then(|r| r.report.outcomes.iter().find(|o| o.module == a.module))
            .map(OutcomeView::of);
        rows.push(ModuleView {
            module: a.module.to_string(),
            node: a.node.to_string(),
            state: o.as_ref().map_or("unreported".into(), |r| r.state.clone()),
            health: o.as_ref().and_then(|r| r.health.clone()),
            version: o.as_ref().and_then(|r| r.version.clone()),
            restarts: o.as_ref().map_or(0, |r| r.restarts),
            reason: o.and_then(|r| r.reason),
            sequence: latest.map(|r| r.report.declaration_version),
        });
    }
    Ok(rows)
}

/// A node's reports, newest first, at most `limit`.
pub async fn reports(store: &Store, node: &Name, limit: u32) -> Result<Vec<ReportView>, ViewError> {
    Ok(store
        .reports(node, limit)
        .await?
        .into_iter()
        .map(|r| ReportView {
            id: r.id,
            sequence: r.report.declaration_version,
            received_at: r.report.received_at,
            refused: r.report.refused.clone(),
            modules: r.report.outcomes.iter().map(OutcomeView::of).collect(),
        })
        .collect())
}

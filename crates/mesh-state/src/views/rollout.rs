//! What `mesh rollout check` reads from the records
//! ([`mesh_core::rollout::Facts`], all but the dial), and where the new bus
//! is to be dialled: the `mesh-broker` holder's node address and the port
//! that node gives the seat, as `${seat:..}` is filled.

use mesh_core::bus::BusKind;
use mesh_core::declaration::Declaration;
use mesh_core::manifest::{BROKER_ROLE, BUS_USERS_FILE};
use mesh_core::rollout::{BrokerHolder, Dial, Facts, Liveness, NodeFacts, module_facts};
use mesh_core::users_file::UserCredential;
use mesh_store::Store;

use super::{NodeView, ViewError};
use crate::Derived;

/// The NATS client port a `mesh-broker` holder listens on unless its node
/// gives the seat another (`mesh node set NODE --port mesh-broker=PORT`).
pub const NATS_PORT: u16 = 4222;

/// The facts (the dial not yet made) and the address to dial, or why there
/// is none.
#[derive(Debug, Clone)]
pub struct Gathered {
    pub facts: Facts,
    pub dial_at: Result<String, String>,
}

/// Reads the facts of a mesh on `bus` from `derived` and the store.
pub async fn gather(
    store: &Store,
    derived: &Derived,
    bus: BusKind,
    now_ms: u64,
) -> Result<Gathered, ViewError> {
    let nodes = super::nodes(store, now_ms).await?;
    let modules = super::modules(store).await?;
    let credentials = &derived.snapshot.credentials;
    let mut holders = Vec::new();
    for a in &derived.snapshot.records.assignments {
        let holds = derived
            .catalogue
            .module(&a.module)
            .is_some_and(|m| m.holds_seat(BROKER_ROLE));
        if !holds {
            continue;
        }
        let declared = store.latest_declaration(&a.node).await?;
        let users_declared = declared
            .as_ref()
            .filter(|d| {
                mesh_core::declaration::recorded(&d.body)
                    .is_some_and(|decl| carries_users(&decl, a.module.as_str()))
            })
            .map(|d| d.version);
        let report = store.latest_report(&a.node).await?;
        holders.push(BrokerHolder {
            node: a.node.to_string(),
            module: a.module.to_string(),
            running: modules.iter().any(|m| {
                m.node == a.node.as_str() && m.module == a.module.as_str() && m.state == "running"
            }),
            users_declared,
            applied: report.map(|r| r.report.declaration_version),
        });
    }
    let dial_at = dial_at(&holders, &nodes);
    let keyed = |name: String| matches!(credentials.get(&name), Some(UserCredential::NKey(_)));
    let facts = Facts {
        bus,
        dial: Dial::NotDialled {
            why: dial_at.clone().err().unwrap_or_default(),
        },
        nodes: nodes
            .iter()
            .map(|n| NodeFacts {
                node: n.node.clone(),
                liveness: liveness_of(n),
                key: n.enrolled_at.is_some() && n.host_key.is_some(),
            })
            .collect(),
        modules: module_facts(&derived.principals, |node, module| {
            keyed(format!("module_{node}_{module}"))
        }),
        holders,
    };
    Ok(Gathered { facts, dial_at })
}

/// Whether a declaration gives `module` the composed user list.
pub fn carries_users(d: &Declaration, module: &str) -> bool {
    d.modules.iter().any(|m| {
        m.name.as_str() == module && m.files.iter().any(|f| f.name.as_str() == BUS_USERS_FILE)
    })
}

fn liveness_of(n: &NodeView) -> Liveness {
    match n.condition() {
        "ready" => Liveness::Ready,
        "stale" => Liveness::Stale,
        "down" => Liveness::Down,
        "unseen" => Liveness::Unseen,
        _ => Liveness::NotEnrolled,
    }
}

/// `tls://ADDRESS:PORT` of the first holder, or why there is none.
fn dial_at(holders: &[BrokerHolder], nodes: &[NodeView]) -> Result<String, String> {
    let h = holders
        .first()
        .ok_or_else(|| "no module holds mesh-broker".to_string())?;
    let node = nodes.iter().find(|n| n.node == h.node);
    let address = node.and_then(|n| n.address.clone()).ok_or_else(|| {
        format!(
            "node {} (holding mesh-broker) has no address recorded",
            h.node
        )
    })?;
    let port = node
        .and_then(|n| n.ports.get(BROKER_ROLE).copied())
        .unwrap_or(NATS_PORT);
    Ok(BusKind::Nats.address(&address, port))
}

/// Whether enrolled `node` took the move onto `to`, as the records say
/// ([`mesh_core::rollout::took`] over its newest declaration and report):
/// what the controller waits for and `mesh rollout status` shows.
pub async fn took_move(
    store: &Store,
    node: &mesh_core::names::Name,
    to: &[String],
) -> Result<bool, mesh_store::StoreError> {
    let Some(d) = store.latest_declaration(node).await? else {
        return Ok(false);
    };
    let urls = mesh_core::declaration::recorded(&d.body)
        .and_then(|decl| decl.bus)
        .map(|b| b.urls);
    let reported = store
        .latest_report(node)
        .await?
        .map(|r| r.report.declaration_version);
    Ok(mesh_core::rollout::took(
        urls.as_deref(),
        d.version,
        reported,
        to,
    ))
}

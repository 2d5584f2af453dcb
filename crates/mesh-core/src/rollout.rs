//! Whether a mesh on RabbitMQ can move onto NATS now (DESIGN "rollout"),
//! decided from facts the controller reads from the records plus one dial
//! of the new bus. The move takes every node at once and leaves no half to
//! roll back, so this answer is the valuable half: each missing thing is a
//! line naming its own next step, and the mesh is ready only when there is
//! none.

use serde::{Deserialize, Serialize};

use crate::authority::{Principal, PrincipalKind};
use crate::bus::BusKind;
use crate::subjects;

/// What the check reads: the records as the controller holds them, and how
/// the one dial of the new bus went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Facts {
    /// The bus the mesh runs on now (genesis's, or the last move's).
    pub bus: BusKind,
    /// Every module assigned to hold `mesh-broker`.
    pub holders: Vec<BrokerHolder>,
    pub dial: Dial,
    pub nodes: Vec<NodeFacts>,
    pub modules: Vec<ModuleFacts>,
}

/// A module holding `mesh-broker`: the NATS server the mesh moves onto.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerHolder {
    pub node: String,
    pub module: String,
    /// Running, by its node's newest report.
    pub running: bool,
    /// The newest declaration to its node carrying the composed user list
    /// (`bus-users`), by sequence; none before one has.
    pub users_declared: Option<i64>,
    /// The newest declaration its host reports having applied.
    pub applied: Option<i64>,
}

/// The one dial of the new bus.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Dial {
    /// Not dialled: no address can be derived (the reason says why).
    NotDialled { why: String },
    /// Nothing answered at the address.
    Unreachable { url: String, reason: String },
    /// A server answered with a certificate other than the mesh's.
    OtherCertificate {
        url: String,
        expected: String,
        got: String,
    },
    /// The mesh's server answered, admitting the controller; the bus
    /// objects the records call for that it lacks.
    Answered {
        url: String,
        missing_objects: Vec<String>,
    },
}

/// A node's liveness as `mesh status` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Liveness {
    Ready,
    Stale,
    Down,
    /// Enrolled, never heard from.
    Unseen,
    /// A token issued, not spent.
    NotEnrolled,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeFacts {
    pub node: String,
    pub liveness: Liveness,
    /// Whether the records hold the host's public key: the credential the
    /// new bus admits it by.
    pub key: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleFacts {
    pub node: String,
    pub module: String,
    /// Whether its grants reach the bus at all ([`speaks`]).
    pub speaks: bool,
    /// Whether the records hold a key its host announced for it.
    pub key: bool,
}

/// A thing the move needs, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Missing {
    pub what: String,
    pub next: String,
}

/// The check's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Readiness {
    pub from: BusKind,
    pub ready: bool,
    pub missing: Vec<Missing>,
    /// What `--confirm` carries out, when ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plan: Vec<MoveStep>,
}

/// Whether a principal's grants reach the bus beyond its own inbox (an
/// answer to a tool call comes with a subscription to the tool): a
/// module that never speaks needs no credential on the new bus, and
/// listing it would bury the ones that do.
pub fn speaks(p: &Principal) -> bool {
    let inbox = subjects::inbox(&p.name);
    !p.permissions.publish_subjects().is_empty()
        || p.permissions
            .subscribe_subjects()
            .iter()
            .any(|s| *s != inbox.as_str())
}

/// The modules' facts from the derived principals: which speak. `key`
/// says whether a module on a node has a recorded key.
pub fn module_facts(
    principals: &[Principal],
    key: impl Fn(&str, &str) -> bool,
) -> Vec<ModuleFacts> {
    principals
        .iter()
        .filter_map(|p| match &p.kind {
            PrincipalKind::Module { node, module } => Some(ModuleFacts {
                node: node.to_string(),
                module: module.to_string(),
                speaks: speaks(p),
                key: key(node.as_str(), module.as_str()),
            }),
            _ => None,
        })
        .collect()
}

/// Each missing thing, most fundamental first: without a server nothing
/// else can be checked on it.
pub fn check(f: &Facts) -> Readiness {
    let mut missing = Vec::new();
    let mut add = |what: String, next: String| missing.push(Missing { what, next });
    if f.bus == BusKind::Nats {
        add(
            "the mesh already runs on NATS: there is nothing to move".into(),
            "nothing to do".into(),
        );
    }
    if f.holders.is_empty() {
        add(
            "no module holds mesh-broker: there is no NATS server in the mesh to move onto".into(),
            "register a module holding mesh-broker (the example catalogue's nats-broker) and assign it to a node: `mesh assign nats-broker NODE`".into(),
        );
    }
    for h in &f.holders {
        let (node, module) = (&h.node, &h.module);
        if !h.running {
            add(
                format!("module {module} (mesh-broker) is not running on {node}"),
                format!("see `mesh reports {node}` and the module's log on {node}"),
            );
        }
        match h.users_declared {
            None => add(
                format!("{node} has not been declared the composed user list ({module}'s bus-users): the server would admit nobody"),
                "see `mesh status`: the controller declares it once the records compose a users file".into(),
            ),
            Some(s) if h.applied.is_none_or(|a| a < s) => add(
                format!(
                    "{node} has not applied declaration {s}, which carries the composed user list{}",
                    h.applied.map(|a| format!(" (its newest applied is {a})")).unwrap_or_default()
                ),
                format!("check `mesh host` on {node} and `mesh reports {node}`"),
            ),
            Some(_) => {}
        }
    }
    match &f.dial {
        // With no holder there is nothing to dial: said once, above.
        Dial::NotDialled { .. } if f.holders.is_empty() => {}
        Dial::NotDialled { why } => add(
            format!("the new bus was not dialled: {why}"),
            "give the holder's node an address: `mesh node set NODE --address HOST`".into(),
        ),
        Dial::Unreachable { url, reason } => add(
            format!("the new bus at {url} does not answer: {reason}"),
            "is the mesh-broker module running and listening there? see `mesh reports NODE` of its node".into(),
        ),
        Dial::OtherCertificate { url, expected, got } => add(
            format!("the server at {url} presents certificate sha256 {got}, not the mesh's ({expected})"),
            "give the mesh-broker module the genesis certificate and key (its TLS files), then check again".into(),
        ),
        Dial::Answered {
            missing_objects, ..
        } => {
            for o in missing_objects {
                add(
                    format!("{o} is not on the new bus yet"),
                    "the controller asserts the bus objects on the new bus each pass: wait for its next one, or read its log".into(),
                );
            }
        }
    }
    for n in &f.nodes {
        let node = &n.node;
        if !n.key {
            // The one that must stop the move: afterwards there is no bus
            // left to tell it anything over.
            add(
                format!(
                    "node {node} holds no credential for the new bus: it would keep running and could not come back"
                ),
                format!(
                    "enrol it before moving: `mesh host --token -` on {node} with its token (a new one: `mesh node add {node}`), or `mesh node forget {node}`"
                ),
            );
            continue;
        }
        let condition = match n.liveness {
            Liveness::Ready => continue,
            Liveness::Stale => "stale",
            Liveness::Down => "down",
            Liveness::Unseen | Liveness::NotEnrolled => "never heard from",
        };
        add(
            format!(
                "node {node} is {condition}: a host not running when the mesh moves is never told the new bus"
            ),
            format!("start `mesh host` on {node} (or `mesh node forget {node}`) before moving"),
        );
    }
    for m in f.modules.iter().filter(|m| m.speaks && !m.key) {
        let (node, module) = (&m.node, &m.module);
        add(
            format!("module {module} on {node} speaks on the bus but holds no key for the new bus"),
            format!(
                "its host announces one in its next report: check `mesh host` on {node} and `mesh reports {node}`"
            ),
        );
    }
    let ready = missing.is_empty();
    Readiness {
        from: f.bus,
        ready,
        plan: ready.then(|| plan(f)).flatten().unwrap_or_default(),
        missing,
    }
}

mod moving;
mod plan;
pub use moving::{MoveNow, NODES_WITHIN_MS, QUIET_MS, move_now, retire, took};
pub use plan::{MoveStep, plan};

#[cfg(test)]
mod tests;

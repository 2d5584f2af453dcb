//! What `mesh rollout --confirm` carries out on a mesh the check found
//! ready, in order, as data: printed before anything moves, so an operator
//! reads what will happen to each node and module.

use serde::{Deserialize, Serialize};

use super::{Dial, Facts, Liveness};

/// One step of the move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum MoveStep {
    /// One record flips the mesh's bus to NATS at `url`.
    Flip { url: String },
    /// Each node is declared the new bus over RabbitMQ, signed.
    Tell { nodes: Vec<String> },
    /// Each host reconnects to NATS with the key it holds, binds its
    /// consumer and reports there.
    Reconnect { nodes: Vec<String> },
    /// Each module that speaks restarts onto NATS (`module on node`).
    RestartModules { modules: Vec<String> },
    /// The controller records what RabbitMQ still holds, then moves itself.
    Drain,
    /// Once every node reports on NATS: the mesh's RabbitMQ users are
    /// removed; RabbitMQ itself is not the mesh's to stop.
    Retire,
}

impl std::fmt::Display for MoveStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MoveStep::Flip { url } => write!(f, "record the mesh's bus as NATS at {url} (one record)"),
            MoveStep::Tell { nodes } => write!(
                f,
                "declare the new bus to {} over RabbitMQ: {}",
                count(nodes.len(), "node"),
                nodes.join(", ")
            ),
            MoveStep::Reconnect { nodes } if nodes.len() == 1 => f.write_str(
                "1 host reconnects to NATS with the key it holds, binds its consumer and reports there",
            ),
            MoveStep::Reconnect { nodes } => write!(
                f,
                "{} hosts reconnect to NATS with the key each holds, bind their consumers and report there",
                nodes.len()
            ),
            MoveStep::RestartModules { modules } if modules.is_empty() => {
                f.write_str("no module speaks on the bus: none restarts")
            }
            MoveStep::RestartModules { modules } => write!(
                f,
                "restart {} onto NATS: {}",
                count(modules.len(), "module"),
                modules.join(", ")
            ),
            MoveStep::Drain => f.write_str(
                "the controller records every report RabbitMQ still holds (none lost, none twice), then connects to NATS",
            ),
            MoveStep::Retire => f.write_str(
                "once every node reports on NATS: remove the mesh's RabbitMQ users; RabbitMQ runs as no module of this mesh, so stop it yourself then",
            ),
        }
    }
}

fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// The move of a ready mesh; none when the new bus did not answer (the
/// check then names why).
pub fn plan(f: &Facts) -> Option<Vec<MoveStep>> {
    let Dial::Answered { url, .. } = &f.dial else {
        return None;
    };
    let nodes: Vec<String> = f
        .nodes
        .iter()
        .filter(|n| n.liveness != Liveness::NotEnrolled)
        .map(|n| n.node.clone())
        .collect();
    let modules = f
        .modules
        .iter()
        .filter(|m| m.speaks)
        .map(|m| format!("{} on {}", m.module, m.node))
        .collect();
    Some(vec![
        MoveStep::Flip { url: url.clone() },
        MoveStep::Tell {
            nodes: nodes.clone(),
        },
        MoveStep::Reconnect { nodes },
        MoveStep::RestartModules { modules },
        MoveStep::Drain,
        MoveStep::Retire,
    ])
}

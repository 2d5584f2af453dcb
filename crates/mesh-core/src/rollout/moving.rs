//! When the controller of a mesh whose move is confirmed leaves the old
//! bus (DESIGN "rollout"): once every enrolled node has applied a
//! declaration naming the new bus (its report says so, on the old bus),
//! or once [`NODES_WITHIN_MS`] passed without some; and only after no
//! report has come for [`QUIET_MS`], so what the old bus still held is
//! recorded first.

use serde::{Deserialize, Serialize};

use crate::authority::CONTROLLER;
use crate::authority::amqp_users::{ObservedUser, UserStep, is_mesh_user};

/// How long nodes have to take the move before the controller moves
/// without them, unless the controller is told otherwise.
pub const NODES_WITHIN_MS: u64 = 60_000;
/// No report for this long: the old bus holds nothing more.
pub const QUIET_MS: u64 = 2_000;

/// What the controller does now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum MoveNow {
    /// Nodes still to take it (within the bound), or reports still coming.
    Wait { nodes: Vec<String> },
    /// Leave the old bus; `without` did not take the move in time.
    Move { without: Vec<String> },
}

/// `waiting`: enrolled nodes that have not taken the move;
/// `since_confirmed_ms`: since `--confirm`; `quiet_ms`: since the last
/// report was recorded; `within_ms`: how long nodes have.
pub fn move_now(
    waiting: Vec<String>,
    since_confirmed_ms: u64,
    quiet_ms: u64,
    within_ms: u64,
) -> MoveNow {
    if (!waiting.is_empty() && since_confirmed_ms < within_ms) || quiet_ms < QUIET_MS {
        return MoveNow::Wait { nodes: waiting };
    }
    MoveNow::Move { without: waiting }
}

/// Whether a node took the move: its newest declaration names the new
/// bus's addresses `to`, and its newest report answers that declaration
/// or a later one.
pub fn took(
    declared_urls: Option<&[String]>,
    declared: i64,
    reported: Option<i64>,
    to: &[String],
) -> bool {
    declared_urls == Some(to) && reported.is_some_and(|r| r >= declared)
}

/// The old bus retired, once every enrolled node reports on the new one
/// (`waiting` empty): each user the mesh gave on RabbitMQ removed, the
/// controller's own last (it makes the removals); the broker's own users
/// left alone. Nothing while a node is still to move: its user is the one
/// thing it could come back through.
pub fn retire(waiting: &[String], observed: &[ObservedUser]) -> Vec<UserStep> {
    if !waiting.is_empty() {
        return Vec::new();
    }
    let mut gone: Vec<&str> = observed
        .iter()
        .map(|u| u.name.as_str())
        .filter(|n| is_mesh_user(n))
        .collect();
    gone.sort_by_key(|n| (*n == CONTROLLER, *n));
    gone.into_iter()
        .map(|n| UserStep::DeleteUser {
            name: n.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_old_bus_is_retired_once_every_node_moved_the_controller_last() {
        let user = |n: &str| ObservedUser {
            name: n.into(),
            ..Default::default()
        };
        let observed = [
            user("admin"),
            user("controller"),
            user("host_n1"),
            user("module_n1_greeter"),
            user("enrol_abc"),
        ];
        let names = |steps: Vec<UserStep>| {
            steps
                .into_iter()
                .map(|s| match s {
                    UserStep::DeleteUser { name } => name,
                    other => panic!("only removals: {other:?}"),
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(retire(&[], &observed)),
            ["enrol_abc", "host_n1", "module_n1_greeter", "controller"]
        );
        assert_eq!(retire(&["n2".to_string()], &observed), vec![]);
        assert_eq!(retire(&[], &[user("admin")]), vec![]);
    }

    #[test]
    fn the_controller_waits_for_its_nodes_within_the_bound_and_for_quiet() {
        let n = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        // Everyone moved, reports quiet: move.
        assert_eq!(
            move_now(vec![], 500, QUIET_MS, NODES_WITHIN_MS),
            MoveNow::Move { without: vec![] }
        );
        // Everyone moved, a report just in: wait.
        assert_eq!(
            move_now(vec![], 500, QUIET_MS - 1, NODES_WITHIN_MS),
            MoveNow::Wait { nodes: vec![] }
        );
        // A node still to move, within the bound: wait, naming it.
        assert_eq!(
            move_now(n(&["n2"]), NODES_WITHIN_MS - 1, 10_000, NODES_WITHIN_MS),
            MoveNow::Wait { nodes: n(&["n2"]) }
        );
        // The bound passed: move without it, once quiet.
        assert_eq!(
            move_now(n(&["n2"]), NODES_WITHIN_MS, 10_000, NODES_WITHIN_MS),
            MoveNow::Move {
                without: n(&["n2"])
            }
        );
        assert_eq!(
            move_now(n(&["n2"]), NODES_WITHIN_MS, QUIET_MS - 1, NODES_WITHIN_MS),
            MoveNow::Wait { nodes: n(&["n2"]) }
        );
    }

    #[test]
    fn a_node_took_the_move_once_it_reports_a_declaration_naming_the_new_bus() {
        let to = vec!["tls://10.0.0.1:4222".to_string()];
        let old = vec!["amqps://10.0.0.1:5671".to_string()];
        assert!(took(Some(&to), 7, Some(7), &to));
        assert!(took(Some(&to), 7, Some(8), &to));
        assert!(!took(Some(&to), 7, Some(6), &to), "not applied yet");
        assert!(!took(Some(&to), 7, None, &to), "never reported");
        assert!(!took(Some(&old), 7, Some(7), &to), "declared the old bus");
        assert!(!took(None, 7, Some(7), &to), "declared no bus");
    }
}

//! Whom a `${seat:S:PORT}` addresses: the module holding the seat for the
//! module being composed. A mesh-scoped seat (or a role) has one holder in
//! the mesh; a node-scoped seat has one per node, and a module is served by
//! the one on its own node (its packet filter is its node's, never another
//! node's). And, before a change is made, the modules it would leave with
//! no holder to address.

use std::collections::BTreeSet;

use crate::catalogue::Catalogue;
use crate::manifest::Scope;
use crate::names::Name;
use crate::records::{Assignment, Records};

/// The assignment that serves `seat` to a module on `node`, or why none
/// does (the reason a `${seat:..}` cannot be filled).
pub fn holder<'r>(
    catalogue: &Catalogue,
    records: &'r Records,
    seat: &Name,
    node: &Name,
) -> Result<&'r Assignment, String> {
    let seat = catalogue.resolve_seat(seat);
    let per_node = catalogue
        .seat(&seat)
        .is_some_and(|e| e.decl.scope.value == Scope::Node);
    let holds = |a: &&Assignment| {
        catalogue
            .module(&a.module)
            .is_some_and(|m| catalogue.held_seats(m).iter().any(|r| r.seat == seat))
    };
    let mut holders = records.assignments.iter().filter(holds);
    if per_node {
        holders.find(|a| a.node == *node).ok_or_else(|| {
            format!(
                "seat {seat} is node-scoped and no module holding it is assigned to node {node}; assign its holder to {node} first"
            )
        })
    } else {
        holders.next().ok_or_else(|| {
            format!(
                "no module holding seat {seat} is assigned to any node; assign its holder first"
            )
        })
    }
}

/// A module that a change leaves with no holder to address: its
/// `${seat:..}` was filled before and cannot be after, so the controller
/// leaves it out of its node's declaration.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Unaddressed {
    /// The module left without an address, and its node.
    pub module: Name,
    pub node: Name,
    /// The seat, renames followed (as the catalogue after has it).
    pub seat: Name,
    /// Whether the seat has one holder per node (the module needs one on
    /// its own node) rather than one in the mesh.
    pub node_scoped: bool,
    /// The holder it addressed before the change.
    pub holder: Assignment,
}

impl Unaddressed {
    /// What gives it an address again, or would have kept it.
    pub fn remedy(&self) -> String {
        if self.node_scoped {
            format!(
                "assign a holder of seat {} to {} (`mesh assign MODULE {}`)",
                self.seat, self.node, self.node
            )
        } else {
            format!(
                "`mesh assign {} NODE --move-from {}` moves the holder in one step, leaving nobody without an address",
                self.holder.module, self.holder.node
            )
        }
    }
}

impl std::fmt::Display for Unaddressed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} on {} is left without an address for seat {} (held by {} until now)",
            self.module, self.node, self.seat, self.holder
        )
    }
}

/// Every assigned module whose seat address `before` fills and `after`
/// cannot: what the change (an unassignment, a node forgotten, a manifest
/// that no longer holds a seat) leaves out for want of a holder. A module
/// left without a holder already is not the change's doing.
pub fn left_without_address(
    before: (&Catalogue, &Records),
    after: (&Catalogue, &Records),
) -> Vec<Unaddressed> {
    let (after_cat, after_records) = after;
    let mut out = BTreeSet::new();
    for a in &after_records.assignments {
        let Some(m) = after_cat.module(&a.module) else {
            continue;
        };
        for seat in m.seats_addressed() {
            let Ok(had) = holder(before.0, before.1, &seat, &a.node) else {
                continue;
            };
            if holder(after_cat, after_records, &seat, &a.node).is_err() {
                let seat = after_cat.resolve_seat(&seat);
                out.insert(Unaddressed {
                    module: a.module.clone(),
                    node: a.node.clone(),
                    node_scoped: after_cat
                        .seat(&seat)
                        .is_some_and(|e| e.decl.scope.value == Scope::Node),
                    seat,
                    holder: had.clone(),
                });
            }
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
#[path = "seat_address_tests.rs"]
mod tests;

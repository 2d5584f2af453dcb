//! Who may hold a seat where: a mesh-scoped seat has one holder in the mesh
//! (one module, on one node), a node-scoped seat one holder per node. A
//! second holder is refused when it is assigned, not found later as two
//! modules answering one seat's work.

use super::{Alias, Aliases, Catalogue};
use crate::diagnostic::Pos;
use crate::manifest::{self, Located, Scope};
use crate::names::Name;

/// The assignment that already holds the seat.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HolderConflict {
    #[error(
        "seat `{seat}` is mesh-scoped and already held by module {module} on node {node}: a mesh-scoped seat has one holder in the mesh. {how}",
        how = mesh_remedy(module, node, moving.as_ref())
    )]
    Mesh {
        seat: Name,
        module: Name,
        node: Name,
        /// The node the holder itself was to be assigned to: it can move
        /// there in one step.
        moving: Option<Name>,
    },
    #[error(
        "seat `{seat}` is node-scoped and module {module} already holds it on node {node}: a node-scoped seat has one holder per node. To replace it, run `mesh unassign {module} {node}` first"
    )]
    Node {
        seat: Name,
        module: Name,
        node: Name,
    },
}

/// How to take a mesh-scoped seat from `module` on `node`.
fn mesh_remedy(module: &Name, node: &Name, moving: Option<&Name>) -> String {
    match moving {
        Some(to) => format!(
            "To move it in one step, the modules addressing the seat keeping an address, run `mesh assign {module} {to} --move-from {node}`"
        ),
        None => format!(
            "To replace it, run `mesh unassign {module} {node}` first (the modules addressing the seat are left out until the new holder is assigned)"
        ),
    }
}

/// The catalogue of registered manifests (`(name, source)`) and seat
/// renames (`(old, new)`). A source that does not parse is left out: it was
/// checked when registered, and a holder check is no place to refuse it.
pub fn registered(modules: &[(String, String)], aliases: &[(String, String)]) -> Catalogue {
    let manifests = modules
        .iter()
        .filter_map(|(name, source)| manifest::parse(&format!("registered:{name}"), source).ok())
        .collect();
    let mut list = Aliases::new();
    for (old, new) in aliases {
        if let (Ok(old), Ok(new)) = (Name::new(old), Name::new(new)) {
            list.push(Alias {
                old: Located::new(old, Pos::START),
                new: Located::new(new, Pos::START),
                file: "registered:aliases".into(),
            });
        }
    }
    Catalogue::build(manifests, list)
}

/// Whether assigning `module` to `node` would make a second holder of one
/// of its seats, given the `(node, module)` assignments already made. The
/// assignment itself, already made, conflicts with nothing.
pub fn holder_conflict(
    cat: &Catalogue,
    assignments: &[(Name, Name)],
    node: &Name,
    module: &Name,
) -> Option<HolderConflict> {
    let m = cat.module(module)?;
    for held in cat.held_seats(m) {
        let Some(entry) = cat.seat(&held.seat) else {
            continue;
        };
        if entry.module.is_none() && super::roles::pooled(&held.seat) {
            continue;
        }
        for (n2, m2) in assignments {
            if (n2, m2) == (node, module) {
                continue;
            }
            let holds = cat
                .module(m2)
                .is_some_and(|other| cat.held_seats(other).iter().any(|h| h.seat == held.seat));
            if !holds {
                continue;
            }
            let (seat, first, on) = (held.seat.clone(), m2.clone(), n2.clone());
            match entry.decl.scope.value {
                Scope::Mesh => {
                    return Some(HolderConflict::Mesh {
                        moving: (m2 == module).then(|| node.clone()),
                        seat,
                        module: first,
                        node: on,
                    });
                }
                Scope::Node if n2 == node && m2 != module => {
                    return Some(HolderConflict::Node {
                        seat,
                        module: first,
                        node: on,
                    });
                }
                Scope::Node => {}
            }
        }
    }
    None
}

/// A module already assigned that a registration would make a second
/// holder of a seat: the registered manifest now holds a seat someone
/// holds already, or the seat's scope became `mesh` while several nodes
/// hold it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "registering it would make module {module} on node {node} a second holder of seat `{seat}`, which module {first} holds on node {first_node}: a {scope}-scoped seat has one holder {per}. Unassign one of them first (`mesh unassign {module} {node}`), then register again"
)]
pub struct SecondHolder {
    pub seat: Name,
    pub module: Name,
    pub node: Name,
    /// The holder assigned first.
    pub first: Name,
    pub first_node: Name,
    pub scope: Scope,
    /// `in the mesh` or `per node`.
    per: &'static str,
}

/// Every second holder among `assignments` `(node, module)`, taken in the
/// order they were made: each later holder, with the first it conflicts
/// with.
pub fn second_holders(cat: &Catalogue, assignments: &[(Name, Name)]) -> Vec<SecondHolder> {
    let mut out = Vec::new();
    for (i, (node, module)) in assignments.iter().enumerate() {
        let Some(c) = holder_conflict(cat, &assignments[..i], node, module) else {
            continue;
        };
        let (seat, first, first_node, scope, per) = match c {
            HolderConflict::Mesh {
                seat, module, node, ..
            } => (seat, module, node, Scope::Mesh, "in the mesh"),
            HolderConflict::Node { seat, module, node } => {
                (seat, module, node, Scope::Node, "per node")
            }
        };
        out.push(SecondHolder {
            seat,
            module: module.clone(),
            node: node.clone(),
            first,
            first_node,
            scope,
            per,
        });
    }
    out
}

/// The first second holder that registering `after` (over `before`) makes
/// of the assignments already made; one `before` had already is not the
/// registration's doing.
pub fn made_by(
    before: &Catalogue,
    after: &Catalogue,
    assignments: &[(Name, Name)],
) -> Option<SecondHolder> {
    let had = second_holders(before, assignments);
    second_holders(after, assignments)
        .into_iter()
        .find(|h| !had.contains(h))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    fn holder(name: &str, seat: &str, scope: &str, declares: bool) -> (String, String) {
        let decl = if declares {
            format!(
                "[[seat]]\nname = \"{seat}\"\nscope = \"{scope}\"\nprotocol = \"http\"\naccepts = [\"job\"]\n"
            )
        } else {
            String::new()
        };
        (
            name.to_string(),
            format!(
                "[module]\nname = \"{name}\"\n[run]\ncommand = [\"x\"]\n{decl}[holds]\nseats = [\"{seat}\"]\n"
            ),
        )
    }

    fn catalogue() -> Catalogue {
        registered(
            &[
                holder("store-a", "store", "mesh", true),
                holder("store-b", "store", "mesh", false),
                holder("filter-a", "filter", "node", true),
                holder("filter-b", "filter", "node", false),
                (
                    "plain".into(),
                    "[module]\nname = \"plain\"\n[run]\ncommand = [\"x\"]\n".into(),
                ),
                ("broken".into(), "not toml [".into()),
            ],
            &[("old-store".into(), "store".into())],
        )
    }

    fn a(pairs: &[(&str, &str)]) -> Vec<(Name, Name)> {
        pairs.iter().map(|(x, y)| (n(x), n(y))).collect()
    }

    #[test]
    fn a_mesh_scoped_seat_has_one_holder_in_the_mesh() {
        let cat = catalogue();
        assert!(cat.module(&n("store-a")).is_some(), "fixture parses");
        let made = a(&[("n1", "store-a")]);
        // Again on its own node: nothing new.
        assert_eq!(holder_conflict(&cat, &made, &n("n1"), &n("store-a")), None);
        let want = |moving: Option<&str>| {
            Some(HolderConflict::Mesh {
                seat: n("store"),
                module: n("store-a"),
                node: n("n1"),
                moving: moving.map(n),
            })
        };
        // The same module on a second node (which may move there), and
        // another holder anywhere.
        let moved = holder_conflict(&cat, &made, &n("n2"), &n("store-a"));
        assert_eq!(moved, want(Some("n2")));
        assert_eq!(
            holder_conflict(&cat, &made, &n("n1"), &n("store-b")),
            want(None)
        );
        assert_eq!(
            holder_conflict(&cat, &made, &n("n2"), &n("store-b")),
            want(None)
        );
        let msg = holder_conflict(&cat, &made, &n("n2"), &n("store-b"))
            .map(|c| c.to_string())
            .unwrap_or_default();
        assert!(msg.contains("held by module store-a on node n1"), "{msg}");
        assert!(
            msg.ends_with(
                "To replace it, run `mesh unassign store-a n1` first (the modules addressing the seat are left out until the new holder is assigned)"
            ),
            "{msg}"
        );
        let msg = moved.map(|c| c.to_string()).unwrap_or_default();
        assert!(
            msg.ends_with(
                "To move it in one step, the modules addressing the seat keeping an address, run `mesh assign store-a n2 --move-from n1`"
            ),
            "{msg}"
        );
        // Free once unassigned; modules holding nothing never conflict.
        assert_eq!(holder_conflict(&cat, &[], &n("n2"), &n("store-b")), None);
        assert_eq!(holder_conflict(&cat, &made, &n("n1"), &n("plain")), None);
        assert_eq!(holder_conflict(&cat, &made, &n("n1"), &n("broken")), None);
    }

    #[test]
    fn a_node_scoped_seat_has_one_holder_per_node() {
        let cat = catalogue();
        let made = a(&[("n1", "filter-a"), ("n2", "filter-a")]);
        assert_eq!(holder_conflict(&cat, &made, &n("n3"), &n("filter-a")), None);
        assert_eq!(holder_conflict(&cat, &made, &n("n3"), &n("filter-b")), None);
        let got = holder_conflict(&cat, &made, &n("n2"), &n("filter-b"));
        assert_eq!(
            got,
            Some(HolderConflict::Node {
                seat: n("filter"),
                module: n("filter-a"),
                node: n("n2"),
            })
        );
        assert!(
            got.unwrap()
                .to_string()
                .contains("`mesh unassign filter-a n2` first")
        );
    }

    #[test]
    fn a_registration_that_makes_a_second_holder_is_found_naming_the_first() {
        let plain = |holds: &str| {
            (
                "plain".to_string(),
                format!("[module]\nname = \"plain\"\n[run]\ncommand = [\"x\"]\n{holds}"),
            )
        };
        let before = registered(&[holder("store-a", "store", "mesh", true), plain("")], &[]);
        // Assigned first: store-a on n2; then plain on n1.
        let made = a(&[("n2", "store-a"), ("n1", "plain")]);
        assert!(second_holders(&before, &made).is_empty());
        assert_eq!(made_by(&before, &before, &made), None);
        // plain registered again, now holding the seat store-a holds.
        let after = registered(
            &[
                holder("store-a", "store", "mesh", true),
                plain("[holds]\nseats = [\"store\"]\n"),
            ],
            &[],
        );
        let got = made_by(&before, &after, &made).expect("a second holder");
        assert_eq!(
            (
                &got.module,
                &got.node,
                &got.first,
                &got.first_node,
                got.scope
            ),
            (&n("plain"), &n("n1"), &n("store-a"), &n("n2"), Scope::Mesh)
        );
        assert_eq!(
            got.to_string(),
            "registering it would make module plain on node n1 a second holder of seat `store`, which module store-a holds on node n2: a mesh-scoped seat has one holder in the mesh. Unassign one of them first (`mesh unassign plain n1`), then register again"
        );
        // A seat's scope from node to mesh while two nodes hold it.
        let node = registered(&[holder("filter-a", "filter", "node", true)], &[]);
        let mesh = registered(&[holder("filter-a", "filter", "mesh", true)], &[]);
        let made = a(&[("n1", "filter-a"), ("n3", "filter-a")]);
        let got = made_by(&node, &mesh, &made).expect("a second holder");
        assert_eq!(
            (&got.module, &got.node, &got.first, &got.first_node),
            (&n("filter-a"), &n("n3"), &n("filter-a"), &n("n1"))
        );
        // Back to node scope makes none; a second holder the registered
        // catalogue had already is not the registration's doing.
        assert_eq!(made_by(&mesh, &node, &made), None);
        assert_eq!(made_by(&mesh, &mesh, &made), None);
        let node_made = a(&[("n1", "filter-a"), ("n1", "filter-b")]);
        let both = registered(
            &[
                holder("filter-a", "filter", "node", true),
                holder("filter-b", "filter", "node", false),
            ],
            &[],
        );
        let got = &second_holders(&both, &node_made)[0];
        assert_eq!(
            (&got.module, &got.first, got.scope),
            (&n("filter-b"), &n("filter-a"), Scope::Node)
        );
        assert!(
            got.to_string()
                .contains("a node-scoped seat has one holder per node"),
            "{got}"
        );
    }

    #[test]
    fn a_renamed_seat_is_one_seat() {
        let (name, source) = holder("store-c", "old-store", "mesh", false);
        let mut modules = vec![holder("store-a", "store", "mesh", true), (name, source)];
        modules.push((
            "plain".into(),
            "[module]\nname = \"plain\"\n[run]\ncommand = [\"x\"]\n".into(),
        ));
        let cat = registered(&modules, &[("old-store".into(), "store".into())]);
        let made = a(&[("n1", "store-a")]);
        assert!(matches!(
            holder_conflict(&cat, &made, &n("n2"), &n("store-c")),
            Some(HolderConflict::Mesh { .. })
        ));
    }
}

#[cfg(test)]
mod pooled_tests {
    use super::*;

    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    #[test]
    fn build_machines_are_a_pool_any_number_may_hold_the_role() {
        let builder = |name: &str| {
            (
                name.to_string(),
                format!(
                    "[module]\nname = \"{name}\"\n[run]\ncommand = [\"x\"]\n[holds]\nseats = [\"mesh-build-machine\"]\n"
                ),
            )
        };
        let cat = registered(&[builder("bm-a"), builder("bm-b")], &[]);
        assert!(cat.module(&n("bm-a")).is_some(), "fixture parses");
        let made = vec![(n("n1"), n("bm-a")), (n("n2"), n("bm-b"))];
        assert_eq!(holder_conflict(&cat, &made, &n("n2"), &n("bm-a")), None);
        assert_eq!(holder_conflict(&cat, &made, &n("n3"), &n("bm-b")), None);
        assert_eq!(holder_conflict(&cat, &made, &n("n1"), &n("bm-b")), None);
    }

    #[test]
    fn the_other_roles_keep_one_holder_in_the_mesh() {
        let holder = |name: &str, role: &str| {
            (
                name.to_string(),
                format!(
                    "[module]\nname = \"{name}\"\n[run]\ncommand = [\"x\"]\n[holds]\nseats = [\"{role}\"]\n"
                ),
            )
        };
        let cat = registered(
            &[holder("db-a", "mesh-store"), holder("db-b", "mesh-store")],
            &[],
        );
        let made = vec![(n("n1"), n("db-a"))];
        assert!(matches!(
            holder_conflict(&cat, &made, &n("n2"), &n("db-b")),
            Some(HolderConflict::Mesh { .. })
        ));
        assert!(matches!(
            holder_conflict(&cat, &made, &n("n2"), &n("db-a")),
            Some(HolderConflict::Mesh { .. })
        ));
        assert!(!super::super::roles::pooled(&n("mesh-store")));
        assert!(!super::super::roles::pooled(&n("mesh-broker")));
    }
}

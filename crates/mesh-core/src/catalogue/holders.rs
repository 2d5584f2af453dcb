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

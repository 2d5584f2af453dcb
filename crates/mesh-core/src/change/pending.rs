//! A change not yet made, as a value: what `mesh plan` plans and `mesh
//! assign` or `mesh catalogue register` then makes, on the controller's
//! machine or asked of the controller by a person.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::names::Name;

/// A change not yet made.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pending {
    Assign {
        module: Name,
        node: Name,
        /// The version to pin (`--version`); none: the version it ran
        /// where it moves from, else the newest recorded, for a module not
        /// yet assigned there.
        version: Option<String>,
        /// Moved from this node in the same step (`--move-from`).
        from: Option<Name>,
    },
    Unassign {
        module: Name,
        node: Name,
    },
    /// Manifest texts by module name.
    Register {
        sources: BTreeMap<Name, String>,
    },
    /// A deployment's end: `module` pinned to `version` on `nodes` (none
    /// named: every node it is assigned to).
    Deploy {
        module: Name,
        version: String,
        #[serde(default)]
        nodes: Vec<Name>,
    },
}

impl std::fmt::Display for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pending::Assign {
                module,
                node,
                version,
                from,
            } => {
                match from {
                    Some(from) => write!(f, "move {module} from {from} to {node}")?,
                    None => write!(f, "assign {module} to {node}")?,
                }
                match version {
                    Some(v) => write!(f, " at version {v}"),
                    None => Ok(()),
                }
            }
            Pending::Unassign { module, node } => write!(f, "unassign {module} from {node}"),
            Pending::Deploy {
                module,
                version,
                nodes,
            } => {
                write!(f, "deploy {module} at version {version}")?;
                match nodes.as_slice() {
                    [] => write!(f, " to every node it is assigned to"),
                    nodes => write!(
                        f,
                        " to {}",
                        nodes
                            .iter()
                            .map(Name::as_str)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                }
            }
            Pending::Register { sources } => write!(
                f,
                "register {}",
                sources
                    .keys()
                    .map(Name::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    #[test]
    fn a_pending_change_says_itself_as_a_plan_heads_it() {
        let assign = Pending::Assign {
            module: n("db"),
            node: n("n2"),
            version: None,
            from: None,
        };
        assert_eq!(assign.to_string(), "assign db to n2");
        let moved = Pending::Assign {
            module: n("db"),
            node: n("n2"),
            version: Some("1.4.0".into()),
            from: Some(n("n1")),
        };
        assert_eq!(moved.to_string(), "move db from n1 to n2 at version 1.4.0");
        let gone = Pending::Unassign {
            module: n("db"),
            node: n("n1"),
        };
        assert_eq!(gone.to_string(), "unassign db from n1");
        let register = Pending::Register {
            sources: [(n("b"), String::new()), (n("a"), String::new())].into(),
        };
        assert_eq!(register.to_string(), "register a, b");
        // As it travels to the controller, and back.
        let json = serde_json::to_string(&moved).unwrap();
        assert_eq!(
            serde_json::from_str::<Pending>(&json).unwrap().to_string(),
            moved.to_string()
        );
    }
}

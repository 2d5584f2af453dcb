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

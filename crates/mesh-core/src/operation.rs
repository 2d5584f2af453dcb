//! Operations: what a person may ask the controller to read or change, and
//! the role each takes. A person's role is rendered into publish grants on
//! the operation subjects (`mesh.controller.op.<person>.<operation>`), so
//! the server refuses a forbidden operation and says who asked for an
//! allowed one; the controller, the one writer of the records, serves it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A person's role as an operator: each includes the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads the mesh: status, nodes, modules, plans, logs, events,
    /// deployments.
    Viewer,
    /// Plus changes to what runs: assignments, secrets,
    /// artifacts, builds, deployments.
    Operator,
    /// Plus who is in the mesh: persons, nodes, the catalogue, the broker,
    /// and the audit trail.
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Operator, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    /// Whether this role may ask for `op`.
    pub fn allows(self, op: Operation) -> bool {
        op.role() <= self
    }

    /// The operations this role may ask for, in [`Operation::ALL`]'s order.
    pub fn operations(self) -> impl Iterator<Item = Operation> {
        Operation::ALL
            .into_iter()
            .filter(move |op| self.allows(*op))
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A role that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{written:?} is not a role: write viewer, operator or admin")]
pub struct UnknownRole {
    pub written: String,
}

impl FromStr for Role {
    type Err = UnknownRole;

    fn from_str(s: &str) -> Result<Role, UnknownRole> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| UnknownRole {
                written: s.to_string(),
            })
    }
}

/// Every operation the controller serves, named as the last token of its
/// subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Operation {
    Status,
    Nodes,
    Modules,
    Plan,
    Logs,
    Events,
    Assign,
    Unassign,
    SecretSet,
    SecretRotate,
    SecretRemove,
    ArtifactPut,
    Build,
    Register,
    NodeAdd,
    NodeForget,
    NodeSet,
    PersonAdd,
    PersonRemove,
    BrokerSetAddress,
    Audit,
    Deployments,
    Deploy,
    DeploymentChange,
}

impl Operation {
    pub const ALL: [Operation; 24] = [
        Operation::Status,
        Operation::Nodes,
        Operation::Modules,
        Operation::Plan,
        Operation::Logs,
        Operation::Events,
        Operation::Assign,
        Operation::Unassign,
        Operation::SecretSet,
        Operation::SecretRotate,
        Operation::SecretRemove,
        Operation::ArtifactPut,
        Operation::Build,
        Operation::Register,
        Operation::NodeAdd,
        Operation::NodeForget,
        Operation::NodeSet,
        Operation::PersonAdd,
        Operation::PersonRemove,
        Operation::BrokerSetAddress,
        Operation::Audit,
        Operation::Deployments,
        Operation::Deploy,
        Operation::DeploymentChange,
    ];

    /// The subject token: the command's words joined by `-`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Status => "status",
            Operation::Nodes => "nodes",
            Operation::Modules => "modules",
            Operation::Plan => "plan",
            Operation::Logs => "logs",
            Operation::Events => "events",
            Operation::Assign => "assign",
            Operation::Unassign => "unassign",
            Operation::SecretSet => "secret-set",
            Operation::SecretRotate => "secret-rotate",
            Operation::SecretRemove => "secret-remove",
            Operation::ArtifactPut => "artifact-put",
            Operation::Build => "build",
            Operation::Register => "register",
            Operation::NodeAdd => "node-add",
            Operation::NodeForget => "node-forget",
            Operation::NodeSet => "node-set",
            Operation::PersonAdd => "person-add",
            Operation::PersonRemove => "person-remove",
            Operation::BrokerSetAddress => "broker-set-address",
            Operation::Audit => "audit",
            Operation::Deployments => "deployments",
            Operation::Deploy => "deploy",
            Operation::DeploymentChange => "deployment-change",
        }
    }

    /// The least role that may ask for it.
    pub fn role(self) -> Role {
        use Operation::*;
        match self {
            Status | Nodes | Modules | Plan | Logs | Events | Deployments => Role::Viewer,
            Assign | Unassign | SecretSet | SecretRotate | SecretRemove | ArtifactPut | Build
            | Deploy | DeploymentChange => Role::Operator,
            Register | NodeAdd | NodeForget | NodeSet | PersonAdd | PersonRemove
            | BrokerSetAddress | Audit => Role::Admin,
        }
    }

    /// Whether it changes the records (and so leaves an audit row).
    pub fn changes(self) -> bool {
        use Operation::*;
        !matches!(
            self,
            Status | Nodes | Modules | Plan | Logs | Events | Audit | Deployments
        )
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An operation name that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{written:?} is not an operation of the controller")]
pub struct UnknownOperation {
    pub written: String,
}

impl FromStr for Operation {
    type Err = UnknownOperation;

    fn from_str(s: &str) -> Result<Operation, UnknownOperation> {
        Operation::ALL
            .into_iter()
            .find(|o| o.as_str() == s)
            .ok_or_else(|| UnknownOperation {
                written: s.to_string(),
            })
    }
}

/// Why a person may not ask for `op`, as the CLI says it: the role that
/// would allow it named.
pub fn refusal(person: &str, role: Option<Role>, op: Operation) -> String {
    let has = match role {
        Some(r) => format!("is a {r}"),
        None => "has no role".to_string(),
    };
    format!(
        "person {person} {has}; `{op}` takes the {} role (an admin: mesh person set {person} --role {})",
        op.role(),
        op.role()
    )
}

#[path = "operation/wire.rs"]
pub mod wire;

#[cfg(test)]
#[path = "operation/tests.rs"]
mod tests;

//! The changes an operation makes to the records, one function each, taken
//! by both the controller (a person's request over the bus) and the CLI on
//! the controller's machine: the same checks, the same writes and the same
//! words, whoever asks. Each returns the line to print; a failed
//! precondition is [`OperationError::Refused`], naming what to do instead.

use std::time::Duration;

use mesh_core::names::Name;
use mesh_core::operation::wire::{NodeAddArgs, NodeSetArgs, PersonAddArgs, SecretArgs};
use mesh_core::records::ToolAccess;
use mesh_core::users_file::UserCredential;
use mesh_store::{IssuedToken, Store, StoreError};

use crate::RegisteredError;

/// Why an operation made no change.
#[derive(Debug, thiserror::Error)]
pub enum OperationError {
    /// A precondition failed; the text says which, and what to do.
    #[error("{0}")]
    Refused(String),
    #[error("reading or writing the records")]
    Store(#[from] StoreError),
    #[error("reading the registered catalogue")]
    Catalogue(#[from] RegisteredError),
}

type Result<T> = std::result::Result<T, OperationError>;

fn refused<T>(why: impl Into<String>) -> Result<T> {
    Err(OperationError::Refused(why.into()))
}

/// `node add`: the node recorded if new, and a one-time enrolment token's
/// key issued (the caller writes the token around it).
pub async fn node_add(store: &Store, a: &NodeAddArgs) -> Result<IssuedToken> {
    let node = &a.node;
    let ttl = Duration::from_secs(a.ttl_secs);
    if a.ttl_secs == 0 {
        return refused("a token's life must be more than 0 s: give --ttl 10m, 1h, 1d");
    }
    let issued = match store.node(node).await? {
        Some(n) if n.enrolled_at.is_some() && a.reissue => {
            match store.reissue_token(node, ttl).await? {
                Some(t) => t,
                None => {
                    return refused(format!(
                        "node {node}'s host has been heard from, so it holds its enrolment: --reissue is for a host that never came; to enrol another machine as {node}, forget it first with `mesh node forget {node}`"
                    ));
                }
            }
        }
        Some(n) if n.enrolled_at.is_some() => {
            return refused(format!(
                "node {node} is enrolled already; if its host was never heard from (it gave up before it kept its enrolment), `mesh node add {node} --reissue` issues a new token and keeps its assignments; to enrol another machine as {node}, forget it first with `mesh node forget {node}`"
            ));
        }
        Some(_) => store.issue_token(node, ttl).await?,
        None => {
            store.add_node(node, &[]).await?;
            store.issue_token(node, ttl).await?
        }
    };
    if let Some(address) = &a.address {
        store.set_node_address(node, Some(address)).await?;
    }
    Ok(issued)
}

/// `node set`.
pub async fn node_set(store: &Store, a: &NodeSetArgs) -> Result<String> {
    let node = &a.node;
    if a.address.is_none() && a.ports.is_empty() && a.no_ports.is_empty() {
        return refused("nothing to set: give --address A, --port SEAT=PORT or --no-port SEAT");
    }
    if store.node(node).await?.is_none() {
        return refused(format!(
            "no node \"{node}\" recorded; add it with `mesh node add {node}`"
        ));
    }
    if let Some(address) = &a.address {
        store.set_node_address(node, Some(address)).await?;
    }
    for (seat, port) in &a.ports {
        store.set_node_seat_port(node, seat, Some(*port)).await?;
    }
    for seat in &a.no_ports {
        store.set_node_seat_port(node, seat, None).await?;
    }
    Ok(format!("set node {node}"))
}

/// `node forget`.
pub async fn node_forget(store: &Store, node: &Name) -> Result<String> {
    if store.node(node).await?.is_none() {
        return refused(format!(
            "no node \"{node}\" recorded (`mesh nodes` lists those that are)"
        ));
    }
    let forgotten = store.forget_node(node).await?;
    Ok(format!(
        "forgot node {node}: {} credential(s), {} assignment(s)",
        forgotten.credentials.len(),
        forgotten.assignments
    ))
}

/// `person add`: the tools, the role, and the key if given; given a role
/// but no key, a one-time login their machine makes its key with.
pub async fn person_add(
    store: &Store,
    a: &PersonAddArgs,
) -> Result<(String, Option<mesh_store::IssuedLogin>)> {
    let tools = match ToolAccess::from_written(&a.tools) {
        Ok(t) => t,
        Err(e) => return refused(format!("--tools {}: {e}", a.tools.join(","))),
    };
    if let Some(k) = &a.nkey
        && !UserCredential::is_user_nkey(k)
    {
        return refused(format!(
            "--nkey {k:?} is not an NKey user public key (U…); `mesh person key --out FILE` prints one"
        ));
    }
    let name = &a.person;
    // A role without a key: a one-time login, recorded with the person.
    let life =
        (a.role.is_some() && a.nkey.is_none()).then_some(mesh_core::operation::wire::LOGIN_LIFE);
    let login = store
        .record_person(name, &tools, a.role, a.nkey.as_deref(), life)
        .await?;
    let tools = match tools.written().join(",") {
        t if t.is_empty() => "no tool".to_string(),
        t => t,
    };
    // The role beside the name: `person dan (viewer) may call no tool`.
    let named = match a.role {
        Some(role) => format!("{name} ({role})"),
        None => name.to_string(),
    };
    if let Some(login) = login {
        let said = format!(
            "person {named} may call {tools}; on their machine, within an hour: `mesh login < TOKEN_FILE` with the token printed"
        );
        return Ok((said, Some(login)));
    }
    let said = match a.nkey {
        None => format!(
            "person {named} may call {tools} (no key yet: add again with --nkey, or with --role for a login token, to let them connect)"
        ),
        Some(_) => format!("person {named} may call {tools}"),
    };
    Ok((said, None))
}

/// `person remove`.
pub async fn person_remove(store: &Store, name: &Name) -> Result<String> {
    if !store.remove_person(name).await? {
        return refused(format!(
            "there is no person {name}; `mesh authority explain` lists the persons"
        ));
    }
    Ok(format!("person {name} removed"))
}

/// `secret set` (`rotate`: only a secret recorded already, so a misspelt
/// name is not a new secret no module uses). Given the controller's XKey
/// seed, the value must open with it: what is recorded is a value the
/// controller can seal on to nodes, never one sent in the clear.
pub async fn secret_set(
    store: &Store,
    a: &SecretArgs,
    rotate: bool,
    opened_by: Option<&mesh_core::secret::Secret>,
) -> Result<String> {
    let name = &a.name;
    let known = store.secrets().await?.iter().any(|s| s.name == *name);
    if rotate && !known {
        return refused(format!(
            "no secret {name} is recorded to rotate (`mesh secret list` shows those that are; `mesh secret set {name}` records a new one)"
        ));
    }
    if let Some(seed) = opened_by
        && let Err(e) = mesh_core::sealed::open(seed, &a.sender, &a.sealed)
    {
        return refused(format!(
            "the value of secret {name} is not sealed to this controller's XKey ({e}): `mesh secret set` seals it on your machine"
        ));
    }
    store.set_secret(name, &a.sealed, &a.sender).await?;
    Ok(format!(
        "{} secret {name}",
        if rotate { "rotated" } else { "set" }
    ))
}

/// The registered modules whose manifests use secret `name`.
pub async fn secret_users(store: &Store, name: &Name) -> Result<Vec<String>> {
    let catalogue = crate::registered::catalogue(store).await?;
    Ok(catalogue
        .manifests()
        .iter()
        .filter(|m| m.secrets_used().contains(name))
        .map(|m| m.name.value.to_string())
        .collect())
}

/// `secret remove`: refused while a registered module uses it.
pub async fn secret_remove(store: &Store, name: &Name) -> Result<String> {
    if !store.secrets().await?.iter().any(|s| s.name == *name) {
        return refused(format!(
            "no secret {name} is recorded (`mesh secret list` shows those that are)"
        ));
    }
    let users = secret_users(store, name).await?;
    if !users.is_empty() {
        return refused(format!(
            "secret {name} is used by {}: register their manifests without it first, then remove it",
            users.join(", ")
        ));
    }
    store.remove_secret(name).await?;
    Ok(format!("removed secret {name}"))
}

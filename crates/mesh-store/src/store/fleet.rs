//! A fleet change: everything one fleet file records — modules registered,
//! nodes, assignments, persons, enrolment tokens, credentials — applied in
//! one transaction, so a failure anywhere leaves the store as it was. The
//! slow part (a person's bcrypt) is done before, by [`prepare_password`], so
//! the write lock is held only for the statements.

use std::collections::BTreeSet;
use std::time::Duration;

use mesh_core::authority::PrincipalKind;
use mesh_core::names::Name;
use mesh_core::records::ToolAccess;

use super::Registration;
use super::credentials::UPSERT_CREDENTIAL;
use super::nodes::forget_node_in;
use super::registration::register_in;
use crate::error::StoreError;
use crate::records::{CredentialKind, Forgotten};
use crate::secret::{self, PERSON_BCRYPT_COST, Secret, bcrypt_hash, check_user_key, new_user_key};
use crate::{Store, duration_ms, now_ms, with_pool};

/// A credential ready to record: a machine's public key or a person's hash
/// (whose password went to the caller).
#[derive(Debug, Clone)]
pub struct PreparedCredential {
    pub principal: String,
    kind: CredentialKind,
    node: Option<Name>,
    module: Option<Name>,
    person: Option<Name>,
    nkey: Option<String>,
    hash: Option<String>,
}

/// An enrolment token ready to record: its enrolment public key.
#[derive(Debug, Clone)]
pub struct PreparedToken {
    pub node: Name,
    enrolment_key: String,
    /// What the token's seed announces on a mesh on AMQP.
    amqp_hash: String,
    ttl: Duration,
}

/// Prepares `public_key` as the NKey of machine principal `principal`; the
/// seed stays with the caller. A person or an enrolment, or anything but a
/// user public key, is refused.
pub fn prepare_machine_key(
    principal: &PrincipalKind,
    public_key: &str,
) -> Result<PreparedCredential, StoreError> {
    let (node, module) = match principal {
        PrincipalKind::Controller => (None, None),
        PrincipalKind::Host { node } => (Some(node), None),
        PrincipalKind::Module { node, module } => (Some(node), Some(module)),
        PrincipalKind::Person { .. }
        | PrincipalKind::Enrolment { .. }
        | PrincipalKind::Login { .. } => {
            return Err(StoreError::Invalid {
                what: "a machine key",
                detail: format!("{} is not a machine", principal.principal_name()),
            });
        }
    };
    check_user_key("a machine key", public_key)?;
    Ok(PreparedCredential {
        principal: principal.principal_name(),
        kind: CredentialKind::Machine,
        node: node.cloned(),
        module: module.cloned(),
        person: None,
        nkey: Some(public_key.to_string()),
        hash: None,
    })
}

/// Generates a person's password and hashes it (cost ≥ 11); nothing is
/// recorded until the change holding it is applied. A machine is refused:
/// machines authenticate by NKey.
pub async fn prepare_password(
    principal: &PrincipalKind,
) -> Result<(Secret, PreparedCredential), StoreError> {
    let PrincipalKind::Person { person } = principal else {
        return Err(StoreError::Invalid {
            what: "a password",
            detail: format!(
                "{} is a machine; machines authenticate by nkey",
                principal.principal_name()
            ),
        });
    };
    let secret = secret::generate();
    let hash = bcrypt_hash(&secret, PERSON_BCRYPT_COST).await?;
    Ok((
        secret,
        PreparedCredential {
            principal: principal.principal_name(),
            kind: CredentialKind::Person,
            node: None,
            module: None,
            person: Some(person.clone()),
            nkey: None,
            hash: Some(hash),
        },
    ))
}

/// Generates an enrolment key pair for `node`'s token, live for `ttl` from
/// when the change is applied; the seed is the token's secret.
pub fn prepare_token(node: &Name, ttl: Duration) -> (Secret, PreparedToken) {
    let (seed, enrolment_key) = new_user_key();
    let amqp_hash = super::amqp_hashes::hash_of(&seed);
    (
        seed,
        PreparedToken {
            node: node.clone(),
            amqp_hash,
            enrolment_key,
            ttl,
        },
    )
}

/// What a fleet file records.
#[derive(Debug, Clone, Default)]
pub struct FleetChange {
    /// The catalogue registered (or updated) with it: manifests, seats and
    /// renames, recorded as `register_catalogue` records them.
    pub registration: Registration,
    /// Every node the file names (including nodes only under `[[token]]`).
    pub nodes: Vec<Name>,
    /// (node, module)
    pub assignments: Vec<(Name, Name)>,
    pub persons: Vec<(Name, ToolAccess)>,
    /// Issued over any live token of the node.
    pub tokens: Vec<PreparedToken>,
    /// Recorded over any credential of the same principal (a rotation).
    pub credentials: Vec<PreparedCredential>,
    /// Forget what the store holds and the change does not name: nodes (as
    /// `forget_node` does), assignments of named nodes, persons.
    pub prune: bool,
}

/// What applying a change did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FleetApplied {
    pub nodes_added: Vec<Name>,
    pub assignments_added: usize,
    pub persons_added: Vec<Name>,
    pub tokens_issued: usize,
    pub credentials_recorded: usize,
    /// With `prune`: each node forgotten, with what went with it.
    pub nodes_pruned: Vec<(Name, Forgotten)>,
    /// With `prune`: (node, module) unassigned.
    pub assignments_pruned: Vec<(Name, Name)>,
    pub persons_pruned: Vec<Name>,
}

impl Store {
    /// Applies `change` in one transaction: all of it, or (on any error)
    /// none of it.
    pub async fn apply_fleet(&self, change: &FleetChange) -> Result<FleetApplied, StoreError> {
        let now = now_ms();
        with_pool!(self, |pool| {
            let mut out = FleetApplied::default();
            let mut tx = self.begin_write_on(pool).await?;
            if change.prune {
                let named: BTreeSet<&str> = change.nodes.iter().map(Name::as_str).collect();
                let held: Vec<(String,)> = sqlx::query_as("SELECT name FROM nodes ORDER BY name")
                    .fetch_all(&mut *tx)
                    .await?;
                for (node,) in held.into_iter().filter(|(n,)| !named.contains(n.as_str())) {
                    let node = super::name("node", node)?;
                    let forgotten = forget_node_in!(tx, &node);
                    out.nodes_pruned.push((node, forgotten));
                }
                let wanted: BTreeSet<(&str, &str)> = change
                    .assignments
                    .iter()
                    .map(|(n, m)| (n.as_str(), m.as_str()))
                    .collect();
                let held: Vec<(String, String)> =
                    sqlx::query_as("SELECT node, module FROM assignments ORDER BY node, module")
                        .fetch_all(&mut *tx)
                        .await?;
                for (node, module) in held {
                    if wanted.contains(&(node.as_str(), module.as_str())) {
                        continue;
                    }
                    // As `unassign`: the module's credential goes with it.
                    let _ = unassign_in!(tx, &node, &module);
                    out.assignments_pruned.push((
                        super::name("assignment", node)?,
                        super::name("assignment", module)?,
                    ));
                }
                let named: BTreeSet<&str> =
                    change.persons.iter().map(|(p, _)| p.as_str()).collect();
                let held: Vec<(String,)> = sqlx::query_as("SELECT name FROM persons ORDER BY name")
                    .fetch_all(&mut *tx)
                    .await?;
                for (person,) in held.into_iter().filter(|(p,)| !named.contains(p.as_str())) {
                    // As `remove_person`.
                    for sql in [
                        "DELETE FROM credentials WHERE person = $1",
                        "DELETE FROM person_tools WHERE person = $1",
                        "DELETE FROM persons WHERE name = $1",
                    ] {
                        sqlx::query(sql).bind(&person).execute(&mut *tx).await?;
                    }
                    out.persons_pruned.push(super::name("person", person)?);
                }
            }
            // After the prune (an assignment it forgets holds nothing) and
            // before the assignments (checked with the catalogue after).
            if !change.registration.is_empty() {
                register_in!(tx, &change.registration, now);
            }
            for node in &change.nodes {
                let added = sqlx::query(
                    "INSERT INTO nodes (name, created_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
                )
                .bind(node.as_str())
                .bind(now)
                .execute(&mut *tx)
                .await?;
                if added.rows_affected() == 1 {
                    out.nodes_added.push(node.clone());
                }
            }
            for (node, module) in &change.assignments {
                let added = sqlx::query(
                    "INSERT INTO assignments (node, module, created_at, seq) VALUES ($1, $2, $3, \
                     (SELECT COALESCE(MAX(seq), 0) + 1 FROM assignments)) ON CONFLICT (node, module) DO NOTHING",
                )
                .bind(node.as_str())
                .bind(module.as_str())
                .bind(now)
                .execute(&mut *tx)
                .await?;
                out.assignments_added += added.rows_affected() as usize;
            }
            // As `assign`: a second holder of a seat is refused, and with it
            // the whole fleet (the transaction is dropped).
            if let Some(conflict) =
                holder_conflict!(tx, change.assignments.iter().map(|(n, m)| (n, m)))
            {
                return Err(StoreError::SeatHeld(conflict).into());
            }
            for (person, tools) in &change.persons {
                if put_person_in!(tx, person, tools, now) {
                    out.persons_added.push(person.clone());
                }
            }
            for t in &change.tokens {
                // One live claim per node, as `issue_token`.
                sqlx::query("DELETE FROM enrolment_tokens WHERE node = $1 AND spent_at IS NULL")
                    .bind(t.node.as_str())
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(
                    "INSERT INTO enrolment_tokens (enrolment_key, node, issued_at, expires_at) \
                     VALUES ($1, $2, $3, $4)",
                )
                .bind(&t.enrolment_key)
                .bind(t.node.as_str())
                .bind(now)
                .bind(now.saturating_add(duration_ms(t.ttl)))
                .execute(&mut *tx)
                .await?;
                put_amqp_hash_in!(tx, &t.enrolment_key, &t.amqp_hash, now);
                out.tokens_issued += 1;
            }
            for c in &change.credentials {
                // The foreign keys refuse a credential whose node, assignment
                // or person the change did not leave in the store.
                sqlx::query(UPSERT_CREDENTIAL)
                    .bind(&c.principal)
                    .bind(c.kind.as_str())
                    .bind(&c.nkey)
                    .bind(&c.hash)
                    .bind(c.node.as_ref().map(Name::as_str))
                    .bind(c.module.as_ref().map(Name::as_str))
                    .bind(c.person.as_ref().map(Name::as_str))
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                out.credentials_recorded += 1;
            }
            tx.commit().await?;
            Ok(out)
        })
    }
}

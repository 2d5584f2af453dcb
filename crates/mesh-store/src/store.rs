//! The record operations. Every body is written once and runs on both
//! backends through `with_pool!`.

use std::collections::BTreeMap;
use std::time::Duration;

use mesh_core::names::Name;

use crate::error::{RefusalKind, RefusalReason, StoreError, TokenRefused};
use crate::records::*;
use crate::secret::{
    self, MACHINE_BCRYPT_COST, Secret, bcrypt_hash, bcrypt_verify, sha256_digest, token_hash,
};
use crate::{BeginWrite, Millis, Store, duration_ms, now_ms, principal, with_pool};

/// A name read back from the store; anything else was not written by mesh.
fn name(what: &'static str, s: String) -> Result<Name, StoreError> {
    Name::new(s).map_err(|e| StoreError::Malformed {
        what,
        detail: e.to_string(),
    })
}

fn opt_name(what: &'static str, s: Option<String>) -> Result<Option<Name>, StoreError> {
    s.map(|s| name(what, s)).transpose()
}

fn not_found(what: &'static str, key: impl ToString) -> StoreError {
    StoreError::NotFound {
        what,
        key: key.to_string(),
    }
}

/// How a missing assignment is named in `NotFound`.
fn assignment_key(node: &Name, module: &Name) -> String {
    format!("{module} on {node}")
}

/// Fails with `NotFound { what, key }` unless `$sql` finds a row. Used in the
/// transaction that writes, never before it: a check outside would leave a
/// removal the whole call to slip in.
macro_rules! must_exist {
    // The row named `$name` in `$table`.
    ($tx:ident, $what:literal in $table:literal, $name:expr) => {{
        let name: &Name = $name;
        must_exist!(
            $tx,
            $what,
            name,
            concat!("SELECT name FROM ", $table, " WHERE name = $1"),
            name.as_str()
        )
    }};
    ($tx:ident, $what:literal, $key:expr, $sql:expr $(, $bind:expr)+) => {{
        let found: Option<(String,)> = sqlx::query_as($sql)
            $(.bind($bind))+
            .fetch_optional(&mut *$tx)
            .await?;
        if found.is_none() {
            return Err(not_found($what, $key).into());
        }
    }};
}

/// Records `$ports` (checked, see `check_ports`) for `$node` in `$tx`.
macro_rules! insert_ports {
    ($tx:ident, $node:expr, $ports:expr) => {
        for p in $ports {
            sqlx::query("INSERT INTO node_ports (node, port) VALUES ($1, $2)")
                .bind($node.as_str())
                .bind(i64::from(*p))
                .execute(&mut *$tx)
                .await?;
        }
    };
}

fn port(p: i64) -> Result<u16, StoreError> {
    u16::try_from(p).map_err(|_| StoreError::Malformed {
        what: "node",
        detail: format!("port {p} is out of range"),
    })
}

type NodeRow = (String, Option<String>, i64, Option<i64>, Option<i64>);

fn node_from(row: NodeRow, ports: Vec<u16>) -> Result<Node, StoreError> {
    Ok(Node {
        name: name("node", row.0)?,
        public_key: row.1,
        ports,
        created_at: row.2,
        enrolled_at: row.3,
        last_seen_at: row.4,
    })
}

type CredentialRow = (
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
);

fn credential_from(row: CredentialRow) -> Result<Credential, StoreError> {
    let kind = CredentialKind::parse(&row.1).ok_or_else(|| StoreError::Malformed {
        what: "credential",
        detail: format!("kind {:?} is neither machine nor person", row.1),
    })?;
    Ok(Credential {
        principal: row.0,
        kind,
        bcrypt_hash: row.2,
        node: opt_name("credential", row.3)?,
        module: opt_name("credential", row.4)?,
        person: opt_name("credential", row.5)?,
        created_at: row.6,
    })
}

type ModuleRow = (String, String, String, i64, i64);

fn module_from(row: ModuleRow) -> Result<Module, StoreError> {
    Ok(Module {
        name: name("module", row.0)?,
        manifest_source: row.1,
        manifest_digest: row.2,
        registered_at: row.3,
        updated_at: row.4,
    })
}

type ModuleVersionRow = (String, String, Option<String>, i64);

fn module_version_from(row: ModuleVersionRow) -> Result<ModuleVersion, StoreError> {
    Ok(ModuleVersion {
        module: name("module version", row.0)?,
        rev: row.1,
        build_id: row.2,
        recorded_at: row.3,
    })
}

type SeatRow = (String, Option<String>, String, String);

fn seat_from(row: SeatRow) -> Result<Seat, StoreError> {
    Ok(Seat {
        name: name("seat", row.0)?,
        declared_by: opt_name("seat", row.1)?,
        scope: SeatScope::parse(&row.2).ok_or_else(|| StoreError::Malformed {
            what: "seat",
            detail: format!("scope {:?} is neither node nor mesh", row.2),
        })?,
        protocol: row.3,
    })
}

fn outcome_from(
    module: String,
    state: String,
    reason: Option<String>,
) -> Result<ModuleOutcome, StoreError> {
    let state = match (state.as_str(), reason) {
        ("running", _) => ModuleState::Running,
        ("failed", reason) => ModuleState::Failed {
            reason: reason.unwrap_or_default(),
        },
        (other, _) => {
            return Err(StoreError::Malformed {
                what: "report",
                detail: format!("module state {other:?} is neither running nor failed"),
            });
        }
    };
    Ok(ModuleOutcome {
        module: name("report", module)?,
        state,
    })
}

fn check_ports(ports: &[u16]) -> Result<Vec<u16>, StoreError> {
    if ports.contains(&0) {
        return Err(StoreError::Invalid {
            what: "port 0",
            detail: "ports run from 1 to 65535".into(),
        });
    }
    let mut p = ports.to_vec();
    p.sort_unstable();
    p.dedup();
    Ok(p)
}

const NODE_COLUMNS: &str = "name, public_key, created_at, enrolled_at, last_seen_at";
const CREDENTIAL_COLUMNS: &str = "principal, kind, bcrypt_hash, node, module, person, created_at";
const PERSON_COLUMNS: &str = "name, all_tools, created_at";
const MODULE_COLUMNS: &str = "name, manifest_source, manifest_digest, registered_at, updated_at";
const MODULE_VERSION_COLUMNS: &str = "module, rev, build_id, recorded_at";
const SEAT_COLUMNS: &str = "name, declared_by, scope, protocol";

impl Store {
    // ---------------------------------------------------------------- nodes

    /// Records a new node (not yet enrolled). Refused if the name is taken.
    pub async fn add_node(&self, node: &Name, ports: &[u16]) -> Result<Node, StoreError> {
        let ports = check_ports(ports)?;
        let now = now_ms();
        with_pool!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            let inserted = sqlx::query(
                "INSERT INTO nodes (name, created_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
            )
            .bind(node.as_str())
            .bind(now)
            .execute(&mut *tx)
            .await?;
            if inserted.rows_affected() == 0 {
                return Err(StoreError::AlreadyExists {
                    what: "node",
                    key: node.to_string(),
                }
                .into());
            }
            insert_ports!(tx, node, &ports);
            tx.commit().await?;
            Ok(())
        })?;
        Ok(Node {
            name: node.clone(),
            public_key: None,
            ports,
            created_at: now,
            enrolled_at: None,
            last_seen_at: None,
        })
    }

    /// Replaces the ports given to `node`.
    pub async fn set_node_ports(&self, node: &Name, ports: &[u16]) -> Result<(), StoreError> {
        let ports = check_ports(ports)?;
        with_pool!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            must_exist!(tx, "node" in "nodes", node);
            sqlx::query("DELETE FROM node_ports WHERE node = $1")
                .bind(node.as_str())
                .execute(&mut *tx)
                .await?;
            insert_ports!(tx, node, &ports);
            tx.commit().await?;
            Ok(())
        })
    }

    pub async fn node(&self, node: &Name) -> Result<Option<Node>, StoreError> {
        let (row, ports) = with_pool!(self, |pool| {
            let row: Option<NodeRow> =
                sqlx::query_as(&format!("SELECT {NODE_COLUMNS} FROM nodes WHERE name = $1"))
                    .bind(node.as_str())
                    .fetch_optional(pool)
                    .await?;
            let ports: Vec<(i64,)> =
                sqlx::query_as("SELECT port FROM node_ports WHERE node = $1 ORDER BY port")
                    .bind(node.as_str())
                    .fetch_all(pool)
                    .await?;
            Ok((row, ports))
        })?;
        let Some(row) = row else { return Ok(None) };
        let ports = ports
            .into_iter()
            .map(|(p,)| port(p))
            .collect::<Result<_, _>>()?;
        node_from(row, ports).map(Some)
    }

    /// Every node, by name.
    pub async fn nodes(&self) -> Result<Vec<Node>, StoreError> {
        let (rows, ports) = with_pool!(self, |pool| {
            let rows: Vec<NodeRow> =
                sqlx::query_as(&format!("SELECT {NODE_COLUMNS} FROM nodes ORDER BY name"))
                    .fetch_all(pool)
                    .await?;
            let ports: Vec<(String, i64)> =
                sqlx::query_as("SELECT node, port FROM node_ports ORDER BY node, port")
                    .fetch_all(pool)
                    .await?;
            Ok((rows, ports))
        })?;
        let mut by_node: BTreeMap<String, Vec<u16>> = BTreeMap::new();
        for (n, p) in ports {
            by_node.entry(n).or_default().push(port(p)?);
        }
        rows.into_iter()
            .map(|row| {
                let ports = by_node.remove(&row.0).unwrap_or_default();
                node_from(row, ports)
            })
            .collect()
    }

    /// Records that `node` was heard from at `at` (a heartbeat).
    pub async fn node_seen(&self, node: &Name, at: Millis) -> Result<(), StoreError> {
        let done = with_pool!(self, |pool| {
            Ok(
                sqlx::query("UPDATE nodes SET last_seen_at = $1 WHERE name = $2")
                    .bind(at)
                    .bind(node.as_str())
                    .execute(pool)
                    .await?
                    .rows_affected(),
            )
        })?;
        if done == 0 {
            return Err(not_found("node", node));
        }
        Ok(())
    }

    /// Forgets `node`: deletes the credentials of its host and of every module
    /// on it, its assignments, tokens, ports, declarations and reports.
    pub async fn forget_node(&self, node: &Name) -> Result<Forgotten, StoreError> {
        with_pool!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            must_exist!(tx, "node" in "nodes", node);
            // By the node column, not by parsing principal names: a host's and
            // every module's credential on this node carry it.
            let principals: Vec<(String,)> =
                sqlx::query_as("DELETE FROM credentials WHERE node = $1 RETURNING principal")
                    .bind(node.as_str())
                    .fetch_all(&mut *tx)
                    .await?;
            let assignments = sqlx::query("DELETE FROM assignments WHERE node = $1")
                .bind(node.as_str())
                .execute(&mut *tx)
                .await?
                .rows_affected();
            // Children first, so nothing depends on the foreign keys cascading.
            for table in [
                "DELETE FROM report_outcomes WHERE report_id IN (SELECT id FROM reports WHERE node = $1)",
                "DELETE FROM reports WHERE node = $1",
                "DELETE FROM declarations WHERE node = $1",
                "DELETE FROM enrolment_tokens WHERE node = $1",
                "DELETE FROM node_ports WHERE node = $1",
                "DELETE FROM nodes WHERE name = $1",
            ] {
                sqlx::query(table)
                    .bind(node.as_str())
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            let mut credentials: Vec<String> = principals.into_iter().map(|(p,)| p).collect();
            credentials.sort();
            Ok(Forgotten {
                credentials,
                assignments,
            })
        })
    }

    // --------------------------------------------------------------- tokens

    /// Issues a one-time enrolment token for `node`, valid for `ttl`. Any
    /// earlier unspent token of the node is revoked: a node has one live
    /// claim, and its enrolment user is named after the node.
    pub async fn issue_token(&self, node: &Name, ttl: Duration) -> Result<IssuedToken, StoreError> {
        let secret = secret::generate();
        let hash = token_hash(secret.expose());
        // The one-time secret is also the enrolment user's bus password: the
        // node's first connection is already authenticated by it.
        let bus_hash = bcrypt_hash(&secret, MACHINE_BCRYPT_COST).await?;
        let issued_at = now_ms();
        let expires_at = issued_at.saturating_add(duration_ms(ttl));
        with_pool!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            must_exist!(tx, "node" in "nodes", node);
            sqlx::query("DELETE FROM enrolment_tokens WHERE node = $1 AND spent_at IS NULL")
                .bind(node.as_str())
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "INSERT INTO enrolment_tokens (secret_hash, bus_hash, node, issued_at, expires_at) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(&hash)
            .bind(&bus_hash)
            .bind(node.as_str())
            .bind(issued_at)
            .bind(expires_at)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        })?;
        Ok(IssuedToken {
            node: node.clone(),
            secret,
            issued_at,
            expires_at,
        })
    }

    /// Spends `node`'s token and records its public key.
    ///
    /// One statement finds the unspent, unexpired token and marks it spent;
    /// only if it did is the key recorded, in the same transaction. Two
    /// concurrent enrolments with one token: exactly one wins. A spent,
    /// unknown or expired token is [`StoreError::TokenRefused`], whose message
    /// is the same for every reason.
    pub async fn spend_token(
        &self,
        node: &Name,
        secret: &str,
        public_key: &str,
    ) -> Result<Enrolled, StoreError> {
        let hash = token_hash(secret);
        let now = now_ms();
        let spent = with_pool!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            let won: Option<(String,)> = sqlx::query_as(
                "UPDATE enrolment_tokens SET spent_at = $1 \
                 WHERE node = $2 AND secret_hash = $3 AND spent_at IS NULL AND expires_at > $1 \
                 RETURNING node",
            )
            .bind(now)
            .bind(node.as_str())
            .bind(&hash)
            .fetch_optional(&mut *tx)
            .await?;
            if won.is_none() {
                tx.rollback().await?;
                return Ok(false);
            }
            // Only now that the token is ours: a key recorded for a token that
            // turned out to be spent would admit a machine that never had the
            // right to join.
            sqlx::query("UPDATE nodes SET public_key = $1, enrolled_at = $2 WHERE name = $3")
                .bind(public_key)
                .bind(now)
                .bind(node.as_str())
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(true)
        })?;
        if !spent {
            let reason = self.refusal_reason(node, &hash, now).await?;
            return Err(TokenRefused {
                node: node.to_string(),
                reason,
            }
            .into());
        }
        Ok(Enrolled {
            node: node.clone(),
            public_key: public_key.to_string(),
            enrolled_at: now,
        })
    }

    /// Why a spend found nothing — for the log; the refusal itself was decided
    /// by the spend statement.
    async fn refusal_reason(
        &self,
        node: &Name,
        hash: &str,
        now: Millis,
    ) -> Result<RefusalReason, StoreError> {
        let row = with_pool!(self, |pool| {
            let row: Option<(Option<i64>, i64)> = sqlx::query_as(
                "SELECT spent_at, expires_at FROM enrolment_tokens WHERE node = $1 AND secret_hash = $2",
            )
            .bind(node.as_str())
            .bind(hash)
            .fetch_optional(pool)
            .await?;
            Ok(row)
        })?;
        Ok(match row {
            None => RefusalReason::Unknown,
            Some((Some(at), _)) => RefusalReason::Spent { at },
            Some((None, expires)) if expires <= now => RefusalReason::Expired { at: expires },
            // Unspent and valid now, yet the spend missed it: it was issued
            // after the spend looked. Nothing was spent, so "unknown" is true.
            Some((None, _)) => RefusalReason::Unknown,
        })
    }

    /// Tokens not yet spent nor expired, by node: one enrolment user each.
    pub async fn live_tokens(&self) -> Result<Vec<LiveToken>, StoreError> {
        let now = now_ms();
        let rows = with_pool!(self, |pool| {
            let rows: Vec<(String, String, i64, i64)> = sqlx::query_as(
                "SELECT node, bus_hash, issued_at, expires_at FROM enrolment_tokens \
                 WHERE spent_at IS NULL AND expires_at > $1 ORDER BY node",
            )
            .bind(now)
            .fetch_all(pool)
            .await?;
            Ok(rows)
        })?;
        rows.into_iter()
            .map(|(n, bus_hash, issued_at, expires_at)| {
                Ok(LiveToken {
                    node: name("enrolment token", n)?,
                    bus_hash,
                    issued_at,
                    expires_at,
                })
            })
            .collect()
    }

    // ---------------------------------------------------------- credentials

    /// Mints (or rotates) the credential of the host on `node`.
    pub async fn mint_host_credential(&self, node: &Name) -> Result<Secret, StoreError> {
        self.mint(
            principal::host(node),
            CredentialKind::Machine,
            Some(node),
            None,
            None,
        )
        .await
    }

    /// Mints (or rotates) the credential of `module` on `node`; the module
    /// must be assigned there.
    pub async fn mint_module_credential(
        &self,
        node: &Name,
        module: &Name,
    ) -> Result<Secret, StoreError> {
        self.mint(
            principal::module(node, module),
            CredentialKind::Machine,
            Some(node),
            Some(module),
            None,
        )
        .await
    }

    /// Mints (or rotates) a person's credential; the person must be recorded.
    pub async fn mint_person_credential(&self, person: &Name) -> Result<Secret, StoreError> {
        self.mint(
            principal::person(person),
            CredentialKind::Person,
            None,
            None,
            Some(person),
        )
        .await
    }

    /// Mints (or rotates) the controller's credential.
    pub async fn mint_controller_credential(&self) -> Result<Secret, StoreError> {
        self.mint(
            principal::CONTROLLER.to_string(),
            CredentialKind::Machine,
            None,
            None,
            None,
        )
        .await
    }

    /// Records the hash of a machine credential minted elsewhere (the
    /// bootstrap credential the controller runs with at genesis) — only if
    /// none is recorded for `principal`, so a restart never puts the bootstrap
    /// secret back over a rotated one. Returns whether it was recorded.
    pub async fn adopt_credential_if_absent(
        &self,
        principal: &str,
        secret: &str,
    ) -> Result<bool, StoreError> {
        let kind = CredentialKind::Machine;
        let hash = bcrypt_hash(&Secret::new(secret), kind.bcrypt_cost()).await?;
        let now = now_ms();
        let done = with_pool!(self, |pool| {
            Ok(sqlx::query(
                "INSERT INTO credentials (principal, kind, bcrypt_hash, created_at) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (principal) DO NOTHING",
            )
            .bind(principal)
            .bind(kind.as_str())
            .bind(&hash)
            .bind(now)
            .execute(pool)
            .await?
            .rows_affected())
        })?;
        Ok(done == 1)
    }

    /// `node`, `module` on it and `person` are checked in the transaction that
    /// writes, after the slow hash: a removal committing during the hash would
    /// otherwise leave the new credential behind. The row's foreign keys hold
    /// the rest: on PostgreSQL a removal can still commit between the check
    /// and the insert, which the keys then refuse (reported as the same
    /// `NotFound` the check gives), and a removal after the insert takes the
    /// credential with it (ON DELETE CASCADE).
    async fn mint(
        &self,
        principal: String,
        kind: CredentialKind,
        node: Option<&Name>,
        module: Option<&Name>,
        person: Option<&Name>,
    ) -> Result<Secret, StoreError> {
        let secret = secret::generate();
        let hash = bcrypt_hash(&secret, kind.bcrypt_cost()).await?;
        let now = now_ms();
        let result = with_pool!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            if let Some(node) = node {
                must_exist!(tx, "node" in "nodes", node);
                if let Some(module) = module {
                    must_exist!(
                        tx,
                        "assignment",
                        assignment_key(node, module),
                        "SELECT module FROM assignments WHERE node = $1 AND module = $2",
                        node.as_str(),
                        module.as_str()
                    );
                }
            }
            if let Some(person) = person {
                must_exist!(tx, "person" in "persons", person);
            }
            // Minting again rotates: the old hash is replaced, never joined by
            // a second row the broker would also accept.
            sqlx::query(
                "INSERT INTO credentials \
                 (principal, kind, bcrypt_hash, node, module, person, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) \
                 ON CONFLICT (principal) DO UPDATE SET kind = excluded.kind, \
                 bcrypt_hash = excluded.bcrypt_hash, node = excluded.node, \
                 module = excluded.module, person = excluded.person, \
                 created_at = excluded.created_at",
            )
            .bind(&principal)
            .bind(kind.as_str())
            .bind(&hash)
            .bind(node.map(Name::as_str))
            .bind(module.map(Name::as_str))
            .bind(person.map(Name::as_str))
            .bind(now)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        });
        // What the checks found was removed before the insert: the same
        // answer the check gives when it finds nothing.
        let owner = match (node, module, person) {
            (_, _, Some(person)) => Some(("person", person.to_string())),
            (Some(node), Some(module), _) => Some(("assignment", assignment_key(node, module))),
            (Some(node), None, _) => Some(("node", node.to_string())),
            (None, _, None) => None,
        };
        match (result, owner) {
            (
                Err(StoreError::Refused {
                    kind: RefusalKind::ForeignKey,
                    ..
                }),
                Some((what, key)),
            ) => Err(not_found(what, key)),
            (other, _) => other.map(|()| secret),
        }
    }

    pub async fn credential(&self, principal: &str) -> Result<Option<Credential>, StoreError> {
        let row = with_pool!(self, |pool| {
            let row: Option<CredentialRow> = sqlx::query_as(&format!(
                "SELECT {CREDENTIAL_COLUMNS} FROM credentials WHERE principal = $1"
            ))
            .bind(principal)
            .fetch_optional(pool)
            .await?;
            Ok(row)
        })?;
        row.map(credential_from).transpose()
    }

    /// Every credential, by principal (what the users file is composed from).
    pub async fn credentials(&self) -> Result<Vec<Credential>, StoreError> {
        let rows = with_pool!(self, |pool| {
            let rows: Vec<CredentialRow> = sqlx::query_as(&format!(
                "SELECT {CREDENTIAL_COLUMNS} FROM credentials ORDER BY principal"
            ))
            .fetch_all(pool)
            .await?;
            Ok(rows)
        })?;
        rows.into_iter().map(credential_from).collect()
    }

    /// Does `secret` verify against `principal`'s recorded hash? `false` when
    /// no credential is recorded.
    pub async fn verify_credential(
        &self,
        principal: &str,
        secret: &str,
    ) -> Result<bool, StoreError> {
        match self.credential(principal).await? {
            Some(c) => bcrypt_verify(secret, &c.bcrypt_hash).await,
            None => Ok(false),
        }
    }

    // -------------------------------------------------------------- persons

    /// Records `person` with the tools they may call (replacing any earlier
    /// grant).
    pub async fn put_person(&self, person: &Name, tools: &ToolGrant) -> Result<(), StoreError> {
        let (all, list) = match tools {
            ToolGrant::All => (1i64, Vec::new()),
            ToolGrant::Tools(t) => {
                // A "*" inside a list would read as "every tool" to one reader
                // and as a tool named "*" to another.
                if let Some(bad) = t.iter().find(|t| t.is_empty() || t.contains('*')) {
                    return Err(StoreError::Invalid {
                        what: "tool grant",
                        detail: format!(
                            "{bad:?} is not a tool name; grant every tool with ToolGrant::All"
                        ),
                    });
                }
                let mut t = t.clone();
                t.sort();
                t.dedup();
                (0i64, t)
            }
        };
        let now = now_ms();
        with_pool!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            sqlx::query(
                "INSERT INTO persons (name, all_tools, created_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (name) DO UPDATE SET all_tools = excluded.all_tools",
            )
            .bind(person.as_str())
            .bind(all)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            sqlx::query("DELETE FROM person_tools WHERE person = $1")
                .bind(person.as_str())
                .execute(&mut *tx)
                .await?;
            for tool in &list {
                sqlx::query("INSERT INTO person_tools (person, tool) VALUES ($1, $2)")
                    .bind(person.as_str())
                    .bind(tool)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(())
        })
    }

    pub async fn person(&self, person: &Name) -> Result<Option<Person>, StoreError> {
        let (row, tools) = with_pool!(self, |pool| {
            let row: Option<PersonRow> = sqlx::query_as(&format!(
                "SELECT {PERSON_COLUMNS} FROM persons WHERE name = $1"
            ))
            .bind(person.as_str())
            .fetch_optional(pool)
            .await?;
            let tools: Vec<(String, String)> = sqlx::query_as(
                "SELECT person, tool FROM person_tools WHERE person = $1 ORDER BY tool",
            )
            .bind(person.as_str())
            .fetch_all(pool)
            .await?;
            Ok((row, tools))
        })?;
        let Some(row) = row else { return Ok(None) };
        person_from(row, tools.into_iter().map(|(_, t)| t).collect()).map(Some)
    }

    /// Every person, by name.
    pub async fn persons(&self) -> Result<Vec<Person>, StoreError> {
        let (rows, tools) = with_pool!(self, |pool| {
            let rows: Vec<PersonRow> = sqlx::query_as(&format!(
                "SELECT {PERSON_COLUMNS} FROM persons ORDER BY name"
            ))
            .fetch_all(pool)
            .await?;
            let tools: Vec<(String, String)> =
                sqlx::query_as("SELECT person, tool FROM person_tools ORDER BY person, tool")
                    .fetch_all(pool)
                    .await?;
            Ok((rows, tools))
        })?;
        let mut by_person: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (p, t) in tools {
            by_person.entry(p).or_default().push(t);
        }
        rows.into_iter()
            .map(|row| {
                let tools = by_person.remove(&row.0).unwrap_or_default();
                person_from(row, tools)
            })
            .collect()
    }

    /// Removes `person` and their credential. Returns whether they existed.
    pub async fn remove_person(&self, person: &Name) -> Result<bool, StoreError> {
        with_pool!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            sqlx::query("DELETE FROM credentials WHERE principal = $1 AND kind = 'person'")
                .bind(principal::person(person))
                .execute(&mut *tx)
                .await?;
            sqlx::query("DELETE FROM person_tools WHERE person = $1")
                .bind(person.as_str())
                .execute(&mut *tx)
                .await?;
            let gone = sqlx::query("DELETE FROM persons WHERE name = $1")
                .bind(person.as_str())
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(gone.rows_affected() == 1)
        })
    }

    // -------------------------------------------------------------- modules

    /// Registers `module` with its manifest text, or replaces the manifest of
    /// a registered one. The digest is computed here from the text kept.
    pub async fn register_module(
        &self,
        module: &Name,
        manifest_source: &str,
    ) -> Result<Module, StoreError> {
        let digest = sha256_digest(manifest_source);
        let now = now_ms();
        let row = with_pool!(self, |pool| {
            let row: ModuleRow = sqlx::query_as(&format!(
                "INSERT INTO modules ({MODULE_COLUMNS}) VALUES ($1, $2, $3, $4, $4) \
                 ON CONFLICT (name) DO UPDATE SET manifest_source = excluded.manifest_source, \
                 manifest_digest = excluded.manifest_digest, updated_at = excluded.updated_at \
                 RETURNING {MODULE_COLUMNS}"
            ))
            .bind(module.as_str())
            .bind(manifest_source)
            .bind(&digest)
            .bind(now)
            .fetch_one(pool)
            .await?;
            Ok(row)
        })?;
        module_from(row)
    }

    pub async fn module(&self, module: &Name) -> Result<Option<Module>, StoreError> {
        let row = with_pool!(self, |pool| {
            let row: Option<ModuleRow> = sqlx::query_as(&format!(
                "SELECT {MODULE_COLUMNS} FROM modules WHERE name = $1"
            ))
            .bind(module.as_str())
            .fetch_optional(pool)
            .await?;
            Ok(row)
        })?;
        row.map(module_from).transpose()
    }

    /// Every registered module, by name.
    pub async fn modules(&self) -> Result<Vec<Module>, StoreError> {
        let rows = with_pool!(self, |pool| {
            let rows: Vec<ModuleRow> = sqlx::query_as(&format!(
                "SELECT {MODULE_COLUMNS} FROM modules ORDER BY name"
            ))
            .fetch_all(pool)
            .await?;
            Ok(rows)
        })?;
        rows.into_iter().map(module_from).collect()
    }

    /// Removes a module from the catalogue (with its versions and the seats it
    /// declares). Refused while it is assigned to any node.
    pub async fn remove_module(&self, module: &Name) -> Result<bool, StoreError> {
        with_pool!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            let (assigned,): (i64,) =
                sqlx::query_as("SELECT COUNT(*) FROM assignments WHERE module = $1")
                    .bind(module.as_str())
                    .fetch_one(&mut *tx)
                    .await?;
            if assigned > 0 {
                return Err(StoreError::Invalid {
                    what: "module removal",
                    detail: format!(
                        "{module} is still assigned to {assigned} node(s); unassign it first"
                    ),
                }
                .into());
            }
            for sql in [
                "DELETE FROM seat_aliases WHERE seat IN (SELECT name FROM seats WHERE declared_by = $1)",
                "DELETE FROM seats WHERE declared_by = $1",
                "DELETE FROM module_versions WHERE module = $1",
            ] {
                sqlx::query(sql)
                    .bind(module.as_str())
                    .execute(&mut *tx)
                    .await?;
            }
            let gone = sqlx::query("DELETE FROM modules WHERE name = $1")
                .bind(module.as_str())
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(gone.rows_affected() == 1)
        })
    }

    /// Records that `module` has version `rev` (a commit), optionally built by
    /// build `build_id`. Recording a known version again keeps it, linking the
    /// build if one is given.
    pub async fn record_module_version(
        &self,
        module: &Name,
        rev: &str,
        build_id: Option<&str>,
    ) -> Result<ModuleVersion, StoreError> {
        let now = now_ms();
        let row = with_pool!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            must_exist!(tx, "module" in "modules", module);
            let row: ModuleVersionRow = sqlx::query_as(&format!(
                "INSERT INTO module_versions ({MODULE_VERSION_COLUMNS}) \
                 VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (module, rev) DO UPDATE SET \
                 build_id = COALESCE(excluded.build_id, module_versions.build_id) \
                 RETURNING {MODULE_VERSION_COLUMNS}"
            ))
            .bind(module.as_str())
            .bind(rev)
            .bind(build_id)
            .bind(now)
            .fetch_one(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(row)
        })?;
        module_version_from(row)
    }

    /// `module`'s versions, oldest first.
    pub async fn module_versions(&self, module: &Name) -> Result<Vec<ModuleVersion>, StoreError> {
        let rows = with_pool!(self, |pool| {
            let rows: Vec<ModuleVersionRow> = sqlx::query_as(&format!(
                "SELECT {MODULE_VERSION_COLUMNS} FROM module_versions \
                 WHERE module = $1 ORDER BY recorded_at, rev"
            ))
            .bind(module.as_str())
            .fetch_all(pool)
            .await?;
            Ok(rows)
        })?;
        rows.into_iter().map(module_version_from).collect()
    }

    // ---------------------------------------------------------------- seats

    /// Records a seat (or a role, with `declared_by` `None`), replacing an
    /// earlier record of the same name.
    pub async fn put_seat(&self, seat: &Seat) -> Result<(), StoreError> {
        let now = now_ms();
        with_pool!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            // One name, one meaning: a seat may not shadow an alias.
            let alias: Option<(String,)> =
                sqlx::query_as("SELECT seat FROM seat_aliases WHERE alias = $1")
                    .bind(seat.name.as_str())
                    .fetch_optional(&mut *tx)
                    .await?;
            if let Some((target,)) = alias {
                return Err(StoreError::AlreadyExists {
                    what: "seat alias",
                    key: format!("{} (for seat {target})", seat.name),
                }
                .into());
            }
            if let Some(m) = &seat.declared_by {
                must_exist!(tx, "module" in "modules", m);
            }
            sqlx::query(
                "INSERT INTO seats (name, declared_by, scope, protocol, created_at) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (name) DO UPDATE SET declared_by = excluded.declared_by, \
                 scope = excluded.scope, protocol = excluded.protocol",
            )
            .bind(seat.name.as_str())
            .bind(seat.declared_by.as_ref().map(Name::as_str))
            .bind(seat.scope.as_str())
            .bind(&seat.protocol)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    pub async fn seat(&self, seat: &Name) -> Result<Option<Seat>, StoreError> {
        let row = with_pool!(self, |pool| {
            let row: Option<SeatRow> =
                sqlx::query_as(&format!("SELECT {SEAT_COLUMNS} FROM seats WHERE name = $1"))
                    .bind(seat.as_str())
                    .fetch_optional(pool)
                    .await?;
            Ok(row)
        })?;
        row.map(seat_from).transpose()
    }

    /// Every seat and role, by name.
    pub async fn seats(&self) -> Result<Vec<Seat>, StoreError> {
        let rows = with_pool!(self, |pool| {
            let rows: Vec<SeatRow> =
                sqlx::query_as(&format!("SELECT {SEAT_COLUMNS} FROM seats ORDER BY name"))
                    .fetch_all(pool)
                    .await?;
            Ok(rows)
        })?;
        rows.into_iter().map(seat_from).collect()
    }

    /// Makes `alias` another name for `seat`.
    pub async fn add_seat_alias(&self, alias: &Name, seat: &Name) -> Result<(), StoreError> {
        with_pool!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            must_exist!(tx, "seat" in "seats", seat);
            let clash: Option<(String,)> = sqlx::query_as("SELECT name FROM seats WHERE name = $1")
                .bind(alias.as_str())
                .fetch_optional(&mut *tx)
                .await?;
            if clash.is_some() {
                return Err(StoreError::AlreadyExists {
                    what: "seat",
                    key: alias.to_string(),
                }
                .into());
            }
            let inserted = sqlx::query(
                "INSERT INTO seat_aliases (alias, seat) VALUES ($1, $2) ON CONFLICT (alias) DO NOTHING",
            )
            .bind(alias.as_str())
            .bind(seat.as_str())
            .execute(&mut *tx)
            .await?;
            if inserted.rows_affected() == 0 {
                return Err(StoreError::AlreadyExists {
                    what: "seat alias",
                    key: alias.to_string(),
                }
                .into());
            }
            tx.commit().await?;
            Ok(())
        })
    }

    /// Every alias and the seat it names, by alias.
    pub async fn seat_aliases(&self) -> Result<Vec<(Name, Name)>, StoreError> {
        let rows = with_pool!(self, |pool| {
            let rows: Vec<(String, String)> =
                sqlx::query_as("SELECT alias, seat FROM seat_aliases ORDER BY alias")
                    .fetch_all(pool)
                    .await?;
            Ok(rows)
        })?;
        rows.into_iter()
            .map(|(a, s)| Ok((name("seat alias", a)?, name("seat alias", s)?)))
            .collect()
    }

    /// The seat `name` means: itself if it is a seat, the aliased seat if it
    /// is an alias, `None` if neither.
    pub async fn resolve_seat(&self, seat: &Name) -> Result<Option<Name>, StoreError> {
        let row = with_pool!(self, |pool| {
            let row: Option<(String,)> = sqlx::query_as(
                "SELECT name FROM seats WHERE name = $1 \
                 UNION ALL SELECT seat FROM seat_aliases WHERE alias = $1",
            )
            .bind(seat.as_str())
            .fetch_optional(pool)
            .await?;
            Ok(row)
        })?;
        row.map(|(s,)| name("seat", s)).transpose()
    }

    // ---------------------------------------------------------- assignments

    /// Assigns `module` to `node`. Assigning twice changes nothing.
    pub async fn assign(&self, node: &Name, module: &Name) -> Result<(), StoreError> {
        let now = now_ms();
        with_pool!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            must_exist!(tx, "node" in "nodes", node);
            must_exist!(tx, "module" in "modules", module);
            sqlx::query(
                "INSERT INTO assignments (node, module, created_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (node, module) DO NOTHING",
            )
            .bind(node.as_str())
            .bind(module.as_str())
            .bind(now)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// Unassigns `module` from `node`, deleting that module's credential on
    /// the node. Returns whether it was assigned.
    pub async fn unassign(&self, node: &Name, module: &Name) -> Result<bool, StoreError> {
        with_pool!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            sqlx::query("DELETE FROM credentials WHERE node = $1 AND module = $2")
                .bind(node.as_str())
                .bind(module.as_str())
                .execute(&mut *tx)
                .await?;
            let gone = sqlx::query("DELETE FROM assignments WHERE node = $1 AND module = $2")
                .bind(node.as_str())
                .bind(module.as_str())
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(gone.rows_affected() == 1)
        })
    }

    /// Every assignment, by node then module.
    pub async fn assignments(&self) -> Result<Vec<Assignment>, StoreError> {
        let rows = with_pool!(self, |pool| {
            let rows: Vec<(String, String, i64)> = sqlx::query_as(
                "SELECT node, module, created_at FROM assignments ORDER BY node, module",
            )
            .fetch_all(pool)
            .await?;
            Ok(rows)
        })?;
        rows.into_iter()
            .map(|(n, m, at)| {
                Ok(Assignment {
                    node: name("assignment", n)?,
                    module: name("assignment", m)?,
                    created_at: at,
                })
            })
            .collect()
    }

    // --------------------------------------------------------- declarations

    /// Records a declaration. Refused unless its version is newer than every
    /// declaration recorded for the node (only the newest matters, and a
    /// version reused with another body would be two truths).
    pub async fn record_declaration(&self, d: &Declaration) -> Result<(), StoreError> {
        let now = now_ms();
        with_pool!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            must_exist!(tx, "node" in "nodes", &d.node);
            let done = sqlx::query(
                "INSERT INTO declarations (node, version, digest, body, created_at) \
                 SELECT $1, $2, $3, $4, $5 WHERE NOT EXISTS \
                 (SELECT 1 FROM declarations WHERE node = $1 AND version >= $2)",
            )
            .bind(d.node.as_str())
            .bind(d.version)
            .bind(&d.digest)
            .bind(&d.body)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() == 0 {
                let (newest,): (i64,) = sqlx::query_as(
                    "SELECT COALESCE(MAX(version), 0) FROM declarations WHERE node = $1",
                )
                .bind(d.node.as_str())
                .fetch_one(&mut *tx)
                .await?;
                return Err(StoreError::StaleDeclaration {
                    node: d.node.clone(),
                    version: d.version,
                    newest,
                }
                .into());
            }
            tx.commit().await?;
            Ok(())
        })
    }

    /// The newest declaration for `node`.
    pub async fn latest_declaration(&self, node: &Name) -> Result<Option<Declaration>, StoreError> {
        let row = with_pool!(self, |pool| {
            let row: Option<(String, i64, String, String)> = sqlx::query_as(
                "SELECT node, version, digest, body FROM declarations WHERE node = $1 \
                 ORDER BY version DESC LIMIT 1",
            )
            .bind(node.as_str())
            .fetch_optional(pool)
            .await?;
            Ok(row)
        })?;
        row.map(|(n, version, digest, body)| {
            Ok(Declaration {
                node: name("declaration", n)?,
                version,
                digest,
                body,
            })
        })
        .transpose()
    }

    // -------------------------------------------------------------- reports

    /// Records a report and returns its id.
    pub async fn record_report(&self, report: &Report) -> Result<i64, StoreError> {
        let mut modules: Vec<&str> = report.outcomes.iter().map(|o| o.module.as_str()).collect();
        modules.sort_unstable();
        if let Some(w) = modules.windows(2).find(|w| w[0] == w[1]) {
            return Err(StoreError::Invalid {
                what: "report",
                detail: format!("module {} has two outcomes", w[0]),
            });
        }
        let result = with_pool!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            let (id,): (i64,) = sqlx::query_as(
                "INSERT INTO reports (node, declaration_version, received_at) \
                 VALUES ($1, $2, $3) RETURNING id",
            )
            .bind(report.node.as_str())
            .bind(report.declaration_version)
            .bind(report.received_at)
            .fetch_one(&mut *tx)
            .await?;
            for o in &report.outcomes {
                let (state, reason) = match &o.state {
                    ModuleState::Running => ("running", None),
                    ModuleState::Failed { reason } => ("failed", Some(reason.as_str())),
                };
                sqlx::query(
                    "INSERT INTO report_outcomes (report_id, module, state, reason) \
                     VALUES ($1, $2, $3, $4)",
                )
                .bind(id)
                .bind(o.module.as_str())
                .bind(state)
                .bind(reason)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(id)
        });
        match result {
            // The only reference a report makes is to its node.
            Err(StoreError::Refused {
                kind: RefusalKind::ForeignKey,
                ..
            }) => Err(not_found("node", &report.node)),
            other => other,
        }
    }

    /// The newest report from `node`.
    pub async fn latest_report(&self, node: &Name) -> Result<Option<StoredReport>, StoreError> {
        Ok(self.reports(node, 1).await?.into_iter().next())
    }

    /// Up to `limit` reports from `node`, newest first.
    pub async fn reports(&self, node: &Name, limit: u32) -> Result<Vec<StoredReport>, StoreError> {
        let (rows, outcomes) = with_pool!(self, |pool| {
            let rows: Vec<(i64, String, i64, i64)> = sqlx::query_as(
                "SELECT id, node, declaration_version, received_at FROM reports \
                 WHERE node = $1 ORDER BY id DESC LIMIT $2",
            )
            .bind(node.as_str())
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await?;
            // Outcomes by the ids just read, not by the window again: a report
            // arriving in between would shift it and leave the oldest rows
            // without theirs. (A report commits with its outcomes.)
            let (Some(newest), Some(oldest)) = (rows.first(), rows.last()) else {
                return Ok((rows, Vec::new()));
            };
            let outcomes: Vec<(i64, String, String, Option<String>)> = sqlx::query_as(
                "SELECT o.report_id, o.module, o.state, o.reason FROM report_outcomes o \
                 JOIN reports r ON r.id = o.report_id \
                 WHERE r.node = $1 AND o.report_id BETWEEN $2 AND $3 \
                 ORDER BY o.report_id, o.module",
            )
            .bind(node.as_str())
            .bind(oldest.0)
            .bind(newest.0)
            .fetch_all(pool)
            .await?;
            Ok((rows, outcomes))
        })?;
        let mut by_report: BTreeMap<i64, Vec<ModuleOutcome>> = BTreeMap::new();
        for (id, module, state, reason) in outcomes {
            by_report
                .entry(id)
                .or_default()
                .push(outcome_from(module, state, reason)?);
        }
        rows.into_iter()
            .map(|(id, n, declaration_version, received_at)| {
                Ok(StoredReport {
                    id,
                    report: Report {
                        node: name("report", n)?,
                        declaration_version,
                        outcomes: by_report.remove(&id).unwrap_or_default(),
                        received_at,
                    },
                })
            })
            .collect()
    }

    // --------------------------------------------------------------- builds

    /// Records a finished build with its inputs and artifacts. A build id is
    /// recorded once: the same announcement heard twice is refused as
    /// [`StoreError::AlreadyExists`].
    pub async fn record_build(&self, build: &Build) -> Result<(), StoreError> {
        let mut sizes = Vec::with_capacity(build.artifacts.len());
        for a in &build.artifacts {
            sizes.push(i64::try_from(a.size).map_err(|_| StoreError::Invalid {
                what: "artifact",
                detail: format!("{} is {} bytes, more than can be stored", a.name, a.size),
            })?);
        }
        let (state, failure) = match &build.state {
            BuildState::Succeeded => ("succeeded", None),
            BuildState::Failed { reason } => ("failed", Some(reason.as_str())),
        };
        with_pool!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            let inserted = sqlx::query(
                "INSERT INTO builds (id, module, rev, state, failure, finished_at) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING",
            )
            .bind(&build.id)
            .bind(build.module.as_ref().map(Name::as_str))
            .bind(build.rev.as_deref())
            .bind(state)
            .bind(failure)
            .bind(build.finished_at)
            .execute(&mut *tx)
            .await?;
            if inserted.rows_affected() == 0 {
                return Err(StoreError::AlreadyExists {
                    what: "build",
                    key: build.id.clone(),
                }
                .into());
            }
            for (position, input) in build.inputs.iter().enumerate() {
                sqlx::query(
                    "INSERT INTO build_inputs (build_id, position, input) VALUES ($1, $2, $3)",
                )
                .bind(&build.id)
                .bind(i64::try_from(position).unwrap_or(i64::MAX))
                .bind(input)
                .execute(&mut *tx)
                .await?;
            }
            for (a, size) in build.artifacts.iter().zip(&sizes) {
                sqlx::query(
                    "INSERT INTO artifacts (build_id, name, digest, path, size) \
                     VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(&build.id)
                .bind(&a.name)
                .bind(&a.digest)
                .bind(&a.path)
                .bind(*size)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(())
        })
    }

    pub async fn build(&self, id: &str) -> Result<Option<Build>, StoreError> {
        type BuildRow = (
            String,
            Option<String>,
            Option<String>,
            String,
            Option<String>,
            i64,
        );
        let (row, inputs, artifacts) = with_pool!(self, |pool| {
            let row: Option<BuildRow> = sqlx::query_as(
                "SELECT id, module, rev, state, failure, finished_at FROM builds WHERE id = $1",
            )
            .bind(id)
            .fetch_optional(pool)
            .await?;
            let inputs: Vec<(String,)> = sqlx::query_as(
                "SELECT input FROM build_inputs WHERE build_id = $1 ORDER BY position",
            )
            .bind(id)
            .fetch_all(pool)
            .await?;
            let artifacts: Vec<(String, String, String, i64)> = sqlx::query_as(
                "SELECT name, digest, path, size FROM artifacts WHERE build_id = $1 ORDER BY name",
            )
            .bind(id)
            .fetch_all(pool)
            .await?;
            Ok((row, inputs, artifacts))
        })?;
        let Some((id, module, rev, state, failure, finished_at)) = row else {
            return Ok(None);
        };
        let state = match state.as_str() {
            "succeeded" => BuildState::Succeeded,
            "failed" => BuildState::Failed {
                reason: failure.unwrap_or_default(),
            },
            other => {
                return Err(StoreError::Malformed {
                    what: "build",
                    detail: format!("state {other:?} is neither succeeded nor failed"),
                });
            }
        };
        let artifacts = artifacts
            .into_iter()
            .map(artifact_from)
            .collect::<Result<_, _>>()?;
        Ok(Some(Build {
            id,
            module: opt_name("build", module)?,
            rev,
            state,
            inputs: inputs.into_iter().map(|(i,)| i).collect(),
            artifacts,
            finished_at,
        }))
    }

    /// Every artifact with `digest`, with the build that produced it.
    pub async fn artifacts_by_digest(
        &self,
        digest: &str,
    ) -> Result<Vec<(String, Artifact)>, StoreError> {
        let rows = with_pool!(self, |pool| {
            let rows: Vec<(String, String, String, String, i64)> = sqlx::query_as(
                "SELECT build_id, name, digest, path, size FROM artifacts \
                 WHERE digest = $1 ORDER BY build_id, name",
            )
            .bind(digest)
            .fetch_all(pool)
            .await?;
            Ok(rows)
        })?;
        rows.into_iter()
            .map(|(b, n, d, p, s)| Ok((b, artifact_from((n, d, p, s))?)))
            .collect()
    }
}

fn artifact_from(
    (name, digest, path, size): (String, String, String, i64),
) -> Result<Artifact, StoreError> {
    Ok(Artifact {
        size: u64::try_from(size).map_err(|_| StoreError::Malformed {
            what: "artifact",
            detail: format!("{name} has negative size {size}"),
        })?,
        name,
        digest,
        path,
    })
}

type PersonRow = (String, i64, i64);

fn person_from(row: PersonRow, tools: Vec<String>) -> Result<Person, StoreError> {
    let grant = match row.1 {
        1 => ToolGrant::All,
        0 => ToolGrant::Tools(tools),
        other => {
            return Err(StoreError::Malformed {
                what: "person",
                detail: format!("all_tools is {other}, not 0 or 1"),
            });
        }
    };
    Ok(Person {
        name: name("person", row.0)?,
        tools: grant,
        created_at: row.2,
    })
}

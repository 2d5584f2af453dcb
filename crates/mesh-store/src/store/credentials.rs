//! Credentials: the bcrypt hash of each principal's secret, minted here and
//! tied to the node, assignment or person it belongs to.

use mesh_core::names::Name;

use super::{not_found, opt_name};
use crate::error::{MalformedValue, RefusalKind, StoreError};
use crate::records::{Credential, CredentialKind};
use crate::secret::{self, Secret, bcrypt_hash, bcrypt_verify};
use crate::{BeginWrite, Store, now_ms, principal, with_pool};

/// How a missing assignment is named in `NotFound`.
fn assignment_key(node: &Name, module: &Name) -> String {
    format!("{module} on {node}")
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
    let kind = CredentialKind::parse(&row.1).ok_or_else(|| {
        StoreError::malformed(
            "credential",
            MalformedValue::UnknownText {
                field: "kind",
                found: row.1.clone(),
                either: ["machine", "person"],
            },
        )
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

const CREDENTIAL_COLUMNS: &str = "principal, kind, bcrypt_hash, node, module, person, created_at";

impl Store {
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
}

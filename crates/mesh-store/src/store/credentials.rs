//! Credentials, tied to the node, assignment or person they belong to: a
//! machine's NKey public key (its seed stays where it runs) or a person's
//! bcrypt hash (cost ≥ 11). A machine never gets a password.

use mesh_core::authority::PrincipalKind;
use mesh_core::names::Name;
use mesh_core::users_file::UserCredential;

use super::{not_found, opt_name};
use crate::error::{MalformedValue, RefusalKind, StoreError};
use crate::records::{Credential, CredentialKind};
use crate::secret::{
    self, PERSON_BCRYPT_COST, Secret, bcrypt_hash, bcrypt_verify, check_user_key, user_public_key,
};
use crate::{Store, now_ms, principal, with_pool};

/// How a missing assignment is named in `NotFound`.
fn assignment_key(node: &Name, module: &Name) -> String {
    format!("{module} on {node}")
}

/// What a credential row holds: exactly one of the two, by kind.
#[derive(Clone, Copy)]
enum Stored<'a> {
    Key(&'a str),
    Hash(&'a str),
}

/// Shared with the fleet change, which records credentials the same way.
pub(super) const UPSERT_CREDENTIAL: &str = "INSERT INTO credentials \
     (principal, kind, nkey, bcrypt_hash, node, module, person, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
     ON CONFLICT (principal) DO UPDATE SET kind = excluded.kind, \
     nkey = excluded.nkey, bcrypt_hash = excluded.bcrypt_hash, node = excluded.node, \
     module = excluded.module, person = excluded.person, \
     created_at = excluded.created_at";

type CredentialRow = (
    String,
    String,
    Option<String>,
    Option<String>,
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
    // The schema's checks pair a machine with a key and a person with a hash.
    let credential = match (kind, row.2, row.3) {
        (CredentialKind::Machine, Some(key), None) => UserCredential::NKey(key),
        (CredentialKind::Person, None, Some(hash)) => UserCredential::Password(hash),
        _ => {
            return Err(StoreError::malformed(
                "credential",
                MalformedValue::UnknownText {
                    field: "credential",
                    found: row.0,
                    either: ["nkey", "bcrypt_hash"],
                },
            ));
        }
    };
    Ok(Credential {
        principal: row.0,
        kind,
        credential,
        node: opt_name("credential", row.4)?,
        module: opt_name("credential", row.5)?,
        person: opt_name("credential", row.6)?,
        created_at: row.7,
    })
}

const CREDENTIAL_COLUMNS: &str =
    "principal, kind, nkey, bcrypt_hash, node, module, person, created_at";

/// A machine principal's owners, or why it has no NKey of its own to record.
fn machine_owner(principal: &PrincipalKind) -> Result<(Option<&Name>, Option<&Name>), StoreError> {
    match principal {
        PrincipalKind::Controller => Ok((None, None)),
        PrincipalKind::Host { node } => Ok((Some(node), None)),
        PrincipalKind::Module { node, module } => Ok((Some(node), Some(module))),
        PrincipalKind::Person { person } => Err(StoreError::Invalid {
            what: "a machine key",
            detail: format!("{} is a person, not a machine", principal::person(person)),
        }),
        PrincipalKind::Enrolment { node } => Err(StoreError::Invalid {
            what: "a machine key",
            detail: format!("the enrolment of {node} is its token; issue a token instead"),
        }),
        PrincipalKind::Login { person } => Err(StoreError::Invalid {
            what: "a machine key",
            detail: format!(
                "the login of {person} is its token; add the person with a role instead"
            ),
        }),
    }
}

impl Store {
    /// Records (or rotates to) `public_key` as the NKey of a machine
    /// principal — the controller, a host, or a module (which must be
    /// assigned to its node). Only a user public key is accepted.
    pub async fn record_machine_key(
        &self,
        principal: &PrincipalKind,
        public_key: &str,
    ) -> Result<(), StoreError> {
        let (node, module) = machine_owner(principal)?;
        check_user_key("a machine key", public_key)?;
        self.record(
            principal.principal_name(),
            Stored::Key(public_key),
            node,
            module,
            None,
        )
        .await
    }

    /// Mints (or rotates) a password for `principal` and records its bcrypt
    /// hash. Persons only: a machine's password would cost the broker a
    /// bcrypt check per client on every reload (DESIGN §8).
    pub async fn mint_password(&self, principal: &PrincipalKind) -> Result<Secret, StoreError> {
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
        self.record(
            principal::person(person),
            Stored::Hash(&hash),
            None,
            None,
            Some(person),
        )
        .await?;
        Ok(secret)
    }

    /// Mints (or rotates) a person's password; the person must be recorded.
    pub async fn mint_person_credential(&self, person: &Name) -> Result<Secret, StoreError> {
        self.mint_password(&PrincipalKind::Person {
            person: person.clone(),
        })
        .await
    }

    /// Records the controller's public key made elsewhere (at genesis) — only
    /// if none is recorded, so a restart never puts the genesis key back over
    /// a rotated one. Returns whether it was recorded.
    pub async fn adopt_controller_key_if_absent(
        &self,
        public_key: &str,
    ) -> Result<bool, StoreError> {
        check_user_key("a machine key", public_key)?;
        let now = now_ms();
        let done = with_pool!(self, |pool| {
            Ok(sqlx::query(
                "INSERT INTO credentials (principal, kind, nkey, created_at) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (principal) DO NOTHING",
            )
            .bind(principal::CONTROLLER)
            .bind(CredentialKind::Machine.as_str())
            .bind(public_key)
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
    async fn record(
        &self,
        principal: String,
        stored: Stored<'_>,
        node: Option<&Name>,
        module: Option<&Name>,
        person: Option<&Name>,
    ) -> Result<(), StoreError> {
        let (kind, key, hash) = match stored {
            Stored::Key(k) => (CredentialKind::Machine, Some(k), None),
            Stored::Hash(h) => (CredentialKind::Person, None, Some(h)),
        };
        let now = now_ms();
        let result = with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
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
            // Recording again rotates: the old key or hash is replaced, never
            // joined by a second row the broker would also accept.
            sqlx::query(UPSERT_CREDENTIAL)
                .bind(&principal)
                .bind(kind.as_str())
                .bind(key)
                .bind(hash)
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
            (other, _) => other,
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

    /// Does `secret` — a machine's NKey seed, a person's password — match
    /// `principal`'s recorded credential? `false` when none is recorded.
    pub async fn verify_credential(
        &self,
        principal: &str,
        secret: &str,
    ) -> Result<bool, StoreError> {
        match self.credential(principal).await?.map(|c| c.credential) {
            Some(UserCredential::NKey(key)) => Ok(user_public_key(secret) == Some(key)),
            Some(UserCredential::Password(hash)) => bcrypt_verify(secret, &hash).await,
            None => Ok(false),
        }
    }
}

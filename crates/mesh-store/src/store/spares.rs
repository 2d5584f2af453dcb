//! Spare module keys: what each host announced it holds, and giving one to
//! a module newly declared to its node (recorded as the module's
//! credential in the same transaction that takes it off the list).

use std::collections::{BTreeMap, BTreeSet};

use mesh_core::authority::PrincipalKind;
use mesh_core::names::Name;

use super::credentials::UPSERT_CREDENTIAL;
use super::name;
use crate::error::StoreError;
use crate::records::CredentialKind;
use crate::secret::check_user_key;
use crate::{Store, now_ms, with_pool};

/// Records whether node `$1`'s host makes spare keys (`$2`).
pub(super) const MAKES_SPARES: &str = "UPDATE nodes SET makes_spares = $2 WHERE name = $1";

impl Store {
    /// Records the spare keys each node announced (node → its whole set),
    /// replacing what was recorded for it. A key recorded already as a
    /// credential is not a spare (the host may announce a key the
    /// controller gave before its declaration arrived). Writes only what
    /// changed.
    pub async fn record_spare_keys(&self, sets: &[(Name, Vec<String>)]) -> Result<(), StoreError> {
        if sets.is_empty() {
            return Ok(());
        }
        for (_, keys) in sets {
            for k in keys {
                check_user_key("a spare key", k)?;
            }
        }
        let nodes: Vec<Name> = sets.iter().map(|(n, _)| n.clone()).collect();
        let recorded = self.spare_keys_on(&nodes).await?;
        let changed: Vec<&(Name, Vec<String>)> = sets
            .iter()
            .filter(|(node, keys)| {
                let now: BTreeSet<&String> = keys.iter().collect();
                let was: BTreeSet<&String> = recorded.get(node).into_iter().flatten().collect();
                now != was
            })
            .collect();
        if changed.is_empty() {
            return Ok(());
        }
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            for (node, keys) in &changed {
                sqlx::query("DELETE FROM spare_keys WHERE node = $1")
                    .bind(node.as_str())
                    .execute(&mut *tx)
                    .await?;
                // Announcing none now says nothing of the host: its
                // spares may all have been given.
                if !keys.is_empty() {
                    sqlx::query(MAKES_SPARES)
                        .bind(node.as_str())
                        .bind(true)
                        .execute(&mut *tx)
                        .await?;
                }
                for k in keys {
                    // Not a key in use, not another node's, and only for a
                    // node still recorded.
                    sqlx::query(
                        "INSERT INTO spare_keys (node, nkey) \
                         SELECT $1, $2 WHERE EXISTS (SELECT 1 FROM nodes WHERE name = $1) \
                         AND NOT EXISTS (SELECT 1 FROM credentials WHERE nkey = $2) \
                         ON CONFLICT DO NOTHING",
                    )
                    .bind(node.as_str())
                    .bind(k)
                    .execute(&mut *tx)
                    .await?;
                }
            }
            tx.commit().await?;
            Ok(())
        })
    }

    /// The nodes whose hosts make spare keys (announced some, even if every
    /// one has been given since): a module such a node has no spare left
    /// for waits for the next ones.
    pub async fn spare_makers(&self) -> Result<BTreeSet<Name>, StoreError> {
        let rows: Vec<(String,)> = with_pool!(self, |pool| {
            Ok(
                sqlx::query_as("SELECT name FROM nodes WHERE makes_spares ORDER BY name")
                    .fetch_all(pool)
                    .await?,
            )
        })?;
        rows.into_iter().map(|(n,)| name("node", n)).collect()
    }

    /// Every node's spare keys, sorted.
    pub async fn spare_keys(&self) -> Result<BTreeMap<Name, Vec<String>>, StoreError> {
        let rows: Vec<(String, String)> = with_pool!(self, |pool| {
            Ok(
                sqlx::query_as("SELECT node, nkey FROM spare_keys ORDER BY node, nkey")
                    .fetch_all(pool)
                    .await?,
            )
        })?;
        let mut out: BTreeMap<Name, Vec<String>> = BTreeMap::new();
        for (n, k) in rows {
            out.entry(name("spare key", n)?).or_default().push(k);
        }
        Ok(out)
    }

    /// Gives each (node, module) its key: recorded as the module's
    /// credential and taken off the node's spares, all in one transaction
    /// (one move of the records revision, one composition). A module no
    /// longer assigned, or a key no longer a spare of its node, is skipped;
    /// returns what was given.
    pub async fn give_keys(
        &self,
        gifts: &[(Name, Name, String)],
    ) -> Result<Vec<(Name, Name, String)>, StoreError> {
        if gifts.is_empty() {
            return Ok(Vec::new());
        }
        let now = now_ms();
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            let mut given = Vec::new();
            for (node, module, key) in gifts {
                let taken = sqlx::query(
                    "DELETE FROM spare_keys WHERE node = $1 AND nkey = $2 \
                     AND EXISTS (SELECT 1 FROM assignments WHERE node = $1 AND module = $3)",
                )
                .bind(node.as_str())
                .bind(key)
                .bind(module.as_str())
                .execute(&mut *tx)
                .await?;
                if taken.rows_affected() == 0 {
                    continue;
                }
                let principal = PrincipalKind::Module {
                    node: node.clone(),
                    module: module.clone(),
                }
                .principal_name();
                sqlx::query(UPSERT_CREDENTIAL)
                    .bind(&principal)
                    .bind(CredentialKind::Machine.as_str())
                    .bind(key)
                    .bind(None::<&str>)
                    .bind(node.as_str())
                    .bind(module.as_str())
                    .bind(None::<&str>)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                given.push((node.clone(), module.clone(), key.clone()));
            }
            tx.commit().await?;
            Ok(given)
        })
    }
}

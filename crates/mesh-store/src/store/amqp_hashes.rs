//! The RabbitMQ password hash announced for each machine key (DESIGN "the
//! bus seam"), by the key's public half: what a mesh on AMQP admits a
//! principal with, as a NATS mesh admits its recorded key.

use std::collections::BTreeMap;

use super::batch::PER_STATEMENT;
use crate::error::StoreError;
use crate::{Store, now_ms, with_pool};

/// Records (or replaces) the hash of key `$1`: `$2`, at `$3`. For a key
/// whose seed the store makes (a token's, a login's), in the transaction
/// recording the key.
pub(super) const UPSERT_AMQP_HASH: &str = "INSERT INTO amqp_hashes (nkey, hash, recorded_at) \
     VALUES ($1, $2, $3) ON CONFLICT (nkey) DO UPDATE SET hash = excluded.hash, \
     recorded_at = excluded.recorded_at";

/// The hash a seed made here announces.
pub(super) fn hash_of(seed: &crate::secret::Secret) -> String {
    mesh_core::authority::amqp::announced_hash(seed.expose())
}

impl Store {
    /// Records the hashes announced (public key → hash), writing only those
    /// not recorded so already: a host announces them in every report, and
    /// a write moves the records' revision (the users are composed again).
    /// Returns how many were written. A hash is checked before anything is.
    pub async fn record_amqp_hashes(
        &self,
        hashes: &BTreeMap<String, String>,
    ) -> Result<usize, StoreError> {
        for (key, hash) in hashes {
            crate::secret::check_user_key("a key announcing a hash", key)?;
            if !mesh_core::authority::amqp::is_password_hash(hash) {
                return Err(StoreError::Invalid {
                    what: "a RabbitMQ password hash",
                    detail: format!(
                        "the one announced for {key} is not base64 of a salt and a SHA-256"
                    ),
                });
            }
        }
        let keys: Vec<String> = hashes.keys().cloned().collect();
        let recorded = self.amqp_hashes_of(&keys).await?;
        let changed: Vec<(&String, &String)> = hashes
            .iter()
            .filter(|(k, h)| recorded.get(*k) != Some(*h))
            .collect();
        if changed.is_empty() {
            return Ok(0);
        }
        let now = now_ms();
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            for (key, hash) in &changed {
                put_amqp_hash_in!(tx, key.as_str(), hash.as_str(), now);
            }
            tx.commit().await?;
            Ok(())
        })?;
        Ok(changed.len())
    }

    /// The hash recorded for each of `keys` that has one.
    pub async fn amqp_hashes_of(
        &self,
        keys: &[String],
    ) -> Result<BTreeMap<String, String>, StoreError> {
        let mut out = BTreeMap::new();
        for chunk in keys.chunks(PER_STATEMENT) {
            let rows: Vec<(String, String)> = with_pool!(self, |pool| {
                let mut q =
                    sqlx::QueryBuilder::new("SELECT nkey, hash FROM amqp_hashes WHERE nkey IN (");
                let mut list = q.separated(", ");
                for k in chunk {
                    list.push_bind(k.as_str());
                }
                q.push(")");
                Ok(q.build_query_as().fetch_all(pool).await?)
            })?;
            out.extend(rows);
        }
        Ok(out)
    }

    /// Every hash recorded. One whose key no principal holds any more
    /// admits nobody: users are made for the derived principals alone.
    pub async fn amqp_hashes(&self) -> Result<BTreeMap<String, String>, StoreError> {
        let rows: Vec<(String, String)> = with_pool!(self, |pool| {
            Ok(
                sqlx::query_as("SELECT nkey, hash FROM amqp_hashes ORDER BY nkey")
                    .fetch_all(pool)
                    .await?,
            )
        })?;
        Ok(rows.into_iter().collect())
    }
}

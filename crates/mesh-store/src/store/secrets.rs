//! Secrets, sealed to the controller's XKey: the store never holds a
//! plaintext, and reading the table gives nobody a value without the
//! controller's seed.

use mesh_core::names::Name;

use super::name;
use crate::error::StoreError;
use crate::records::SealedSecret;
use crate::secret::check_xkey;
use crate::{Store, now_ms, with_pool};

impl Store {
    /// Records `secret`'s sealed value, replacing the one it had.
    pub async fn set_secret(
        &self,
        secret: &Name,
        sealed: &str,
        sender: &str,
    ) -> Result<(), StoreError> {
        check_xkey(sender)?;
        let at = now_ms();
        with_pool!(self, |pool| {
            sqlx::query(
                "INSERT INTO secrets (name, sealed, sender, set_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (name) DO UPDATE SET sealed = excluded.sealed, \
                 sender = excluded.sender, set_at = excluded.set_at",
            )
            .bind(secret.as_str())
            .bind(sealed)
            .bind(sender)
            .bind(at)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    /// Every secret, sealed, by name.
    pub async fn secrets(&self) -> Result<Vec<SealedSecret>, StoreError> {
        let rows = with_pool!(self, |pool| {
            let rows: Vec<(String, String, String, i64)> =
                sqlx::query_as("SELECT name, sealed, sender, set_at FROM secrets ORDER BY name")
                    .fetch_all(pool)
                    .await?;
            Ok(rows)
        })?;
        rows.into_iter()
            .map(|(n, sealed, sender, set_at)| {
                Ok(SealedSecret {
                    name: name("secret", n)?,
                    sealed,
                    sender,
                    set_at,
                })
            })
            .collect()
    }

    /// Forgets `secret`; whether it was there.
    pub async fn remove_secret(&self, secret: &Name) -> Result<bool, StoreError> {
        with_pool!(self, |pool| {
            let done = sqlx::query("DELETE FROM secrets WHERE name = $1")
                .bind(secret.as_str())
                .execute(pool)
                .await?;
            Ok(done.rows_affected() == 1)
        })
    }
}

//! A person's one-time login: issued with the person (`mesh person add
//! --role` without a key, `Store::record_person`), spent once by `mesh
//! login` on their machine, which makes their key there and sends only its public half. The login's
//! seed is a login principal's key; the store keeps its public key on the
//! person's row, which the spend matches.

use mesh_core::names::Name;

use super::name;
use crate::error::{RefusalReason, StoreError, TokenRefused};
use crate::secret::{Secret, check_user_key};
use crate::{Millis, Store, now_ms, with_pool};

/// A login issued: the seed its token carries, and when it expires.
#[derive(Debug)]
pub struct IssuedLogin {
    pub person: Name,
    /// The login principal's NKey seed (`SU…`).
    pub secret: Secret,
    pub login_key: String,
    pub expires_at: Millis,
}

/// A login not yet spent or expired: the login principal's entry in the
/// users file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveLogin {
    pub person: Name,
    pub login_key: String,
    pub expires_at: Millis,
}

impl Store {
    /// Spends `person`'s login — the one whose key the request names — and
    /// records `person_key` as theirs, in one transaction: of two spends
    /// of one login exactly one wins. A spent, unknown or expired login is
    /// [`StoreError::TokenRefused`], whose message is the same for every
    /// reason.
    pub async fn spend_login(
        &self,
        person: &Name,
        login_key: &str,
        person_key: &str,
    ) -> Result<(), StoreError> {
        // Checked before the spend: a malformed key must not use it up.
        check_user_key("a person's key", person_key)?;
        let now = now_ms();
        let spent = with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            let won = sqlx::query(
                "UPDATE persons SET login_key = NULL, login_expires_at = NULL \
                 WHERE name = $1 AND login_key = $2 AND login_expires_at > $3",
            )
            .bind(person.as_str())
            .bind(login_key)
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected()
                == 1;
            if !won {
                return Ok(false);
            }
            set_person_key_in!(tx, person, person_key, now);
            tx.commit().await?;
            Ok(true)
        })?;
        if spent {
            return Ok(());
        }
        Err(StoreError::TokenRefused(TokenRefused {
            node: format!("person {person}"),
            reason: RefusalReason::Unknown,
        }))
    }

    /// Every login that can still be spent, by person.
    pub async fn live_logins(&self) -> Result<Vec<LiveLogin>, StoreError> {
        let now = now_ms();
        let rows: Vec<(String, String, i64)> = with_pool!(self, |pool| {
            Ok(sqlx::query_as(
                "SELECT name, login_key, login_expires_at FROM persons \
                 WHERE login_key IS NOT NULL AND login_expires_at > $1 ORDER BY name",
            )
            .bind(now)
            .fetch_all(pool)
            .await?)
        })?;
        rows.into_iter()
            .map(|(p, login_key, expires_at)| {
                Ok(LiveLogin {
                    person: name("login", p)?,
                    login_key,
                    expires_at,
                })
            })
            .collect()
    }
}

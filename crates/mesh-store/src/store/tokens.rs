//! Enrolment tokens: issued once per node, spent once by the node's first
//! connection, refused alike for every reason. A token carries an NKey seed;
//! the store keeps its public key, which the spend matches.

use std::time::Duration;

use mesh_core::names::Name;

use super::credentials::UPSERT_CREDENTIAL;
use super::name;
use crate::error::{RefusalReason, StoreError, TokenRefused};
use crate::records::{CredentialKind, Enrolled, HostKeys, IssuedToken, LiveToken};
use crate::secret::{check_user_key, check_xkey, new_user_key};
use crate::{Millis, Store, duration_ms, now_ms, principal, with_pool};

impl Store {
    /// Issues a one-time enrolment token for `node`, valid for `ttl`. Any
    /// earlier unspent token of the node is revoked: a node has one live
    /// claim, and its enrolment user is named after the node.
    pub async fn issue_token(&self, node: &Name, ttl: Duration) -> Result<IssuedToken, StoreError> {
        // The seed is the enrolment principal's key: the node's first
        // connection is already authenticated by it.
        let (secret, enrolment_key) = new_user_key();
        let issued_at = now_ms();
        let expires_at = issued_at.saturating_add(duration_ms(ttl));
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            must_exist!(tx, "node" in "nodes", node);
            sqlx::query("DELETE FROM enrolment_tokens WHERE node = $1 AND spent_at IS NULL")
                .bind(node.as_str())
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "INSERT INTO enrolment_tokens (enrolment_key, node, issued_at, expires_at) \
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(&enrolment_key)
            .bind(node.as_str())
            .bind(issued_at)
            .bind(expires_at)
            .execute(&mut *tx)
            .await?;
            put_amqp_hash_in!(
                tx,
                &enrolment_key,
                super::amqp_hashes::hash_of(&secret),
                issued_at
            );
            tx.commit().await?;
            Ok(())
        })?;
        Ok(IssuedToken {
            node: node.clone(),
            secret,
            enrolment_key,
            issued_at,
            expires_at,
        })
    }

    /// Spends `node`'s token — the one whose enrolment public key the
    /// request names — and records the host's keys: its NKey (the host
    /// principal's credential) and its XKey (what its secrets are sealed to).
    ///
    /// One statement finds the unspent, unexpired token of (node, key) and
    /// marks it spent; only if it did are the keys recorded, in the same
    /// transaction. Two concurrent enrolments with one token: exactly one
    /// wins. A spent, unknown or expired token is [`StoreError::TokenRefused`],
    /// whose message is the same for every reason.
    pub async fn spend_token(
        &self,
        node: &Name,
        enrolment_key: &str,
        keys: &HostKeys,
    ) -> Result<Enrolled, StoreError> {
        // Checked before the spend: a malformed key must not use up a token.
        check_user_key("a host key", &keys.host_key)?;
        check_xkey(&keys.xkey)?;
        for k in &keys.spare_keys {
            check_user_key("a spare key", k)?;
        }
        let now = now_ms();
        let host = principal::host(node);
        let spent = with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            let won: Option<(String,)> = sqlx::query_as(
                "UPDATE enrolment_tokens SET spent_at = $1 \
                 WHERE node = $2 AND enrolment_key = $3 AND spent_at IS NULL AND expires_at > $1 \
                 RETURNING node",
            )
            .bind(now)
            .bind(node.as_str())
            .bind(enrolment_key)
            .fetch_optional(&mut *tx)
            .await?;
            if won.is_none() {
                tx.rollback().await?;
                return Ok(false);
            }
            // Only now that the token is ours: a key recorded for a token that
            // turned out to be spent would admit a machine that never had the
            // right to join.
            sqlx::query(
                "UPDATE nodes SET public_key = $1, xkey = $2, enrolled_at = $3 WHERE name = $4",
            )
            .bind(&keys.host_key)
            .bind(&keys.xkey)
            .bind(now)
            .bind(node.as_str())
            .execute(&mut *tx)
            .await?;
            // The module keys it made ahead: the first modules declared to
            // it are given these.
            sqlx::query("DELETE FROM spare_keys WHERE node = $1")
                .bind(node.as_str())
                .execute(&mut *tx)
                .await?;
            // An enrolling host says what it is: one that announces no
            // spares makes its modules' keys itself, and is not waited for.
            sqlx::query(super::spares::MAKES_SPARES)
                .bind(node.as_str())
                .bind(!keys.spare_keys.is_empty())
                .execute(&mut *tx)
                .await?;
            for k in &keys.spare_keys {
                sqlx::query(
                    "INSERT INTO spare_keys (node, nkey) SELECT $1, $2 \
                     WHERE NOT EXISTS (SELECT 1 FROM credentials WHERE nkey = $2) \
                     ON CONFLICT DO NOTHING",
                )
                .bind(node.as_str())
                .bind(k)
                .execute(&mut *tx)
                .await?;
            }
            // The credential the users file names the host by; a re-enrolment
            // replaces the old key rather than adding a second.
            sqlx::query(UPSERT_CREDENTIAL)
                .bind(&host)
                .bind(CredentialKind::Machine.as_str())
                .bind(&keys.host_key)
                .bind(None::<&str>)
                .bind(node.as_str())
                .bind(None::<&str>)
                .bind(None::<&str>)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(true)
        })?;
        if !spent {
            // The same enrolment delivered again (the answer was lost, or
            // the controller handed it back while it waited): the token was
            // spent on exactly these keys, so the node is enrolled, not
            // refused — else the host hears "refused" of an enrolment the
            // records keep.
            if let Some(enrolled) = self.spent_on(node, enrolment_key, keys).await? {
                return Ok(enrolled);
            }
            let reason = self.refusal_reason(node, enrolment_key, now).await?;
            return Err(TokenRefused {
                node: node.to_string(),
                reason,
            }
            .into());
        }
        Ok(Enrolled {
            node: node.clone(),
            public_key: keys.host_key.clone(),
            enrolled_at: now,
        })
    }

    /// The enrolment `node`'s token `enrolment_key` was spent on, if it was
    /// spent on exactly `keys`.
    async fn spent_on(
        &self,
        node: &Name,
        enrolment_key: &str,
        keys: &HostKeys,
    ) -> Result<Option<Enrolled>, StoreError> {
        let row = with_pool!(self, |pool| {
            let row: Option<(Option<String>, Option<String>, Option<i64>)> = sqlx::query_as(
                "SELECT n.public_key, n.xkey, n.enrolled_at FROM enrolment_tokens t \
                 JOIN nodes n ON n.name = t.node \
                 WHERE t.node = $1 AND t.enrolment_key = $2 AND t.spent_at IS NOT NULL",
            )
            .bind(node.as_str())
            .bind(enrolment_key)
            .fetch_optional(pool)
            .await?;
            Ok(row)
        })?;
        Ok(match row {
            Some((Some(key), Some(xkey), Some(at)))
                if key == keys.host_key && xkey == keys.xkey =>
            {
                Some(Enrolled {
                    node: node.clone(),
                    public_key: key,
                    enrolled_at: at,
                })
            }
            _ => None,
        })
    }

    /// Issues a new token for a node recorded as enrolled whose host was
    /// never heard from (it gave up before it kept its enrolment): the host
    /// key recorded is forgotten with its credential, the assignments stay.
    /// `Ok(None)`: the node's host has been heard from, so it holds its
    /// enrolment (forget the node to enrol another machine in its place).
    pub async fn reissue_token(
        &self,
        node: &Name,
        ttl: Duration,
    ) -> Result<Option<IssuedToken>, StoreError> {
        let host = principal::host(node);
        let reset = with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            must_exist!(tx, "node" in "nodes", node);
            let done = sqlx::query(
                "UPDATE nodes SET public_key = NULL, xkey = NULL, enrolled_at = NULL \
                 WHERE name = $1 AND last_seen_at IS NULL",
            )
            .bind(node.as_str())
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() == 0 {
                tx.rollback().await?;
                return Ok(false);
            }
            sqlx::query("DELETE FROM credentials WHERE principal = $1")
                .bind(&host)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(true)
        })?;
        if !reset {
            return Ok(None);
        }
        self.issue_token(node, ttl).await.map(Some)
    }

    /// Why a spend found nothing — for the log; the refusal itself was decided
    /// by the spend statement.
    async fn refusal_reason(
        &self,
        node: &Name,
        enrolment_key: &str,
        now: Millis,
    ) -> Result<RefusalReason, StoreError> {
        let row = with_pool!(self, |pool| {
            let row: Option<(Option<i64>, i64)> = sqlx::query_as(
                "SELECT spent_at, expires_at FROM enrolment_tokens WHERE node = $1 AND enrolment_key = $2",
            )
            .bind(node.as_str())
            .bind(enrolment_key)
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
                "SELECT node, enrolment_key, issued_at, expires_at FROM enrolment_tokens \
                 WHERE spent_at IS NULL AND expires_at > $1 ORDER BY node",
            )
            .bind(now)
            .fetch_all(pool)
            .await?;
            Ok(rows)
        })?;
        rows.into_iter()
            .map(|(n, enrolment_key, issued_at, expires_at)| {
                Ok(LiveToken {
                    node: name("enrolment token", n)?,
                    enrolment_key,
                    issued_at,
                    expires_at,
                })
            })
            .collect()
    }
}

//! Declarations: each node's desired state, by strictly rising version.

use mesh_core::names::Name;

use super::name;
use crate::error::StoreError;
use crate::records::Declaration;
use crate::{Millis, Store, now_ms, with_pool};

impl Store {
    /// Records a declaration. Refused unless its version is newer than every
    /// declaration recorded for the node (only the newest matters, and a
    /// version reused with another body would be two truths).
    pub async fn record_declaration(&self, d: &Declaration) -> Result<(), StoreError> {
        let now = now_ms();
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
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

    /// Records `ds` in one transaction (one commit for a whole change's
    /// declarations), each under [`Store::record_declaration`]'s rule: all
    /// or nothing, so one that is not newer than its node's newest fails
    /// the batch.
    pub async fn record_declarations(&self, ds: &[Declaration]) -> Result<(), StoreError> {
        let now = now_ms();
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            for d in ds {
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
                    return Err(StoreError::StaleDeclaration {
                        node: d.node.clone(),
                        version: d.version,
                        newest: d.version,
                    }
                    .into());
                }
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

    /// When each declaration made at or after `since` (unix ms) was
    /// recorded: node, version, created at.
    pub async fn declarations_made_since(
        &self,
        since: Millis,
    ) -> Result<Vec<(Name, i64, Millis)>, StoreError> {
        let rows: Vec<(String, i64, i64)> = with_pool!(self, |pool| {
            Ok(sqlx::query_as(
                "SELECT node, version, created_at FROM declarations \
                 WHERE created_at >= $1 ORDER BY created_at",
            )
            .bind(since)
            .fetch_all(pool)
            .await?)
        })?;
        rows.into_iter()
            .map(|(n, v, at)| Ok((name("declaration", n)?, v, at)))
            .collect()
    }

    /// Every node's newest declaration, in one read (the controller compares
    /// each node's composition against it after every change of the
    /// records: one query per node is 10,000 at 10,000 nodes).
    pub async fn latest_declarations(
        &self,
    ) -> Result<std::collections::BTreeMap<Name, Declaration>, StoreError> {
        let rows: Vec<(String, i64, String, String)> = with_pool!(self, |pool| {
            Ok(sqlx::query_as(
                "SELECT d.node, d.version, d.digest, d.body FROM declarations d \
                 JOIN (SELECT node, MAX(version) AS version FROM declarations GROUP BY node) m \
                 ON d.node = m.node AND d.version = m.version",
            )
            .fetch_all(pool)
            .await?)
        })?;
        rows.into_iter()
            .map(|(n, version, digest, body)| {
                let node = name("declaration", n)?;
                Ok((
                    node.clone(),
                    Declaration {
                        node,
                        version,
                        digest,
                        body,
                    },
                ))
            })
            .collect()
    }
}

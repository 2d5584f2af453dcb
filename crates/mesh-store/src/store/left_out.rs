//! What the controller leaves out of the nodes' declarations, and why: the
//! answer `mesh assign --wait` prints instead of timing out, and what `mesh
//! status` lists under "needs action".

use std::collections::BTreeSet;

use mesh_core::names::Name;

use super::name;
use crate::records::LeftOut;
use crate::{Store, StoreError, now_ms, with_pool};

impl Store {
    /// Replaces the record of what is left out with `now` (node, module,
    /// reason), in one transaction; a module left out already keeps its
    /// `since`. Writes nothing when nothing changed.
    pub async fn record_left_out(&self, now: &[(Name, Name, String)]) -> Result<(), StoreError> {
        let recorded = self.left_out().await?;
        let was: BTreeSet<(&str, &str, &str)> = recorded
            .iter()
            .map(|l| (l.node.as_str(), l.module.as_str(), l.reason.as_str()))
            .collect();
        let is: BTreeSet<(&str, &str, &str)> = now
            .iter()
            .map(|(n, m, r)| (n.as_str(), m.as_str(), r.as_str()))
            .collect();
        if was == is {
            return Ok(());
        }
        let at = now_ms();
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            for (node, module, _) in was
                .iter()
                .filter(|w| !is.iter().any(|i| (i.0, i.1) == (w.0, w.1)))
            {
                sqlx::query("DELETE FROM left_out WHERE node = $1 AND module = $2")
                    .bind(*node)
                    .bind(*module)
                    .execute(&mut *tx)
                    .await?;
            }
            for (node, module, reason) in is.difference(&was) {
                // A node forgotten meanwhile has nothing to be left out of.
                sqlx::query(
                    "INSERT INTO left_out (node, module, reason, since) \
                     SELECT $1, $2, $3, $4 WHERE EXISTS (SELECT 1 FROM nodes WHERE name = $1) \
                     ON CONFLICT (node, module) DO UPDATE SET reason = excluded.reason",
                )
                .bind(*node)
                .bind(*module)
                .bind(*reason)
                .bind(at)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(())
        })
    }

    /// Every module left out, by node and module.
    pub async fn left_out(&self) -> Result<Vec<LeftOut>, StoreError> {
        let rows = with_pool!(self, |pool| {
            let rows: Vec<(String, String, String, i64)> = sqlx::query_as(
                "SELECT node, module, reason, since FROM left_out ORDER BY node, module",
            )
            .fetch_all(pool)
            .await?;
            Ok(rows)
        })?;
        rows.into_iter()
            .map(|(node, module, reason, since)| {
                Ok(LeftOut {
                    node: name("left out", node)?,
                    module: name("left out", module)?,
                    reason,
                    since,
                })
            })
            .collect()
    }
}

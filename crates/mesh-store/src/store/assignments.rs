//! Assignments: which module runs on which node.

use mesh_core::names::Name;

use super::name;
use crate::error::StoreError;
use crate::records::Assignment;
use crate::{BeginWrite, Store, now_ms, with_pool};

impl Store {
    /// Assigns `module` to `node`. Assigning twice changes nothing. A
    /// second holder of a seat the module holds is refused
    /// ([`StoreError::SeatHeld`]): decided in the same transaction as the
    /// insert, so two assigns at once cannot both pass.
    pub async fn assign(&self, node: &Name, module: &Name) -> Result<(), StoreError> {
        let now = now_ms();
        let refused = with_pool!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            must_exist!(tx, "node" in "nodes", node);
            must_exist!(tx, "module" in "modules", module);
            // Refused: the transaction is dropped, nothing written.
            if let Some(conflict) = holder_conflict!(tx, [(node, module)]) {
                return Ok(Some(conflict));
            }
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
            Ok(None)
        })?;
        match refused {
            Some(conflict) => Err(StoreError::SeatHeld(conflict)),
            None => Ok(()),
        }
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
}

//! Assignments: which module runs on which node.

use mesh_core::names::Name;

use super::name;
use crate::error::StoreError;
use crate::records::Assignment;
use crate::{Store, now_ms, with_pool};

impl Store {
    /// Assigns `module` to `node`. Assigning twice changes nothing. A
    /// second holder of a seat the module holds is refused
    /// ([`StoreError::SeatHeld`]): decided in the same transaction as the
    /// insert, so two assigns at once cannot both pass.
    pub async fn assign(&self, node: &Name, module: &Name) -> Result<(), StoreError> {
        self.assign_version(node, module, None).await.map(|_| ())
    }

    /// Assigns `module` to `node`, pinned to `version` (which must be a
    /// recorded version of the module), or, when none is given, to the
    /// newest version recorded now if the assignment has no pin yet: a
    /// later upload never moves what a node runs by itself. Assigning again
    /// with another version moves the pin. Returns the pin.
    pub async fn assign_version(
        &self,
        node: &Name,
        module: &Name,
        version: Option<&str>,
    ) -> Result<Option<String>, StoreError> {
        self.assign_moving(None, node, module, version).await
    }

    /// Moves `module` from node `from` to `node` in one transaction: its
    /// assignment (and credential) on `from` goes as the one on `node` is
    /// made, so a seat it holds is never held twice nor by nobody, and the
    /// modules addressing the seat are never left without a holder. Pinned
    /// to `version`, else to the version it ran on `from`, else as
    /// [`Store::assign_version`] pins. A move is refused as an assignment
    /// is (a second holder, an unknown node or version) and when the module
    /// is not assigned to `from` (`NotFound { what: "assignment" }`).
    /// Returns the pin.
    pub async fn move_assignment(
        &self,
        from: &Name,
        node: &Name,
        module: &Name,
        version: Option<&str>,
    ) -> Result<Option<String>, StoreError> {
        self.assign_moving(Some(from), node, module, version).await
    }

    async fn assign_moving(
        &self,
        from: Option<&Name>,
        node: &Name,
        module: &Name,
        version: Option<&str>,
    ) -> Result<Option<String>, StoreError> {
        let now = now_ms();
        let refused = with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            must_exist!(tx, "node" in "nodes", node);
            must_exist!(tx, "module" in "modules", module);
            // What it ran where it was: the version a move keeps.
            let mut ran: Option<String> = None;
            if let Some(from) = from {
                let was: Option<(Option<String>,)> = sqlx::query_as(
                    "SELECT version FROM assignments WHERE node = $1 AND module = $2",
                )
                .bind(from.as_str())
                .bind(module.as_str())
                .fetch_optional(&mut *tx)
                .await?;
                let Some((was,)) = was else {
                    return Err(
                        super::not_found("assignment", format!("{module} on {from}")).into(),
                    );
                };
                ran = was;
                let _ = unassign_in!(tx, from.as_str(), module.as_str());
            }
            // Refused: the transaction is dropped, nothing written.
            if let Some(conflict) = holder_conflict!(tx, [(node, module)]) {
                return Ok(Err(conflict));
            }
            let pin: Option<String> = match version {
                Some(v) => {
                    must_exist!(
                        tx,
                        "version",
                        format!("{v} of module {module}"),
                        "SELECT rev FROM module_versions WHERE module = $1 AND rev = $2",
                        module.as_str(),
                        v
                    );
                    Some(v.to_string())
                }
                // The newest version with an artifact, read in this
                // transaction.
                None if ran.is_some() => ran,
                None => sqlx::query_as::<_, (Option<String>,)>(
                    "SELECT b.rev FROM builds b WHERE b.module = $1 AND b.state = 'succeeded' \
                     AND EXISTS (SELECT 1 FROM artifacts a WHERE a.build_id = b.id) \
                     ORDER BY b.finished_at DESC, b.seq DESC LIMIT 1",
                )
                .bind(module.as_str())
                .fetch_optional(&mut *tx)
                .await?
                .and_then(|(r,)| r),
            };
            sqlx::query(
                "INSERT INTO assignments (node, module, created_at, version, seq) VALUES ($1, $2, $3, $4, \
                 (SELECT COALESCE(MAX(seq), 0) + 1 FROM assignments)) ON CONFLICT (node, module) DO NOTHING",
            )
            .bind(node.as_str())
            .bind(module.as_str())
            .bind(now)
            .bind(pin.as_deref())
            .execute(&mut *tx)
            .await?;
            // Already assigned: an explicit version moves the pin; none
            // given pins only an assignment that has none.
            let moved = if version.is_some() {
                "UPDATE assignments SET version = $3 WHERE node = $1 AND module = $2 \
                 AND (version IS NULL OR version <> $3)"
            } else {
                "UPDATE assignments SET version = $3 WHERE node = $1 AND module = $2 \
                 AND version IS NULL AND $3 IS NOT NULL"
            };
            sqlx::query(moved)
                .bind(node.as_str())
                .bind(module.as_str())
                .bind(pin.as_deref())
                .execute(&mut *tx)
                .await?;
            let (now_pinned,): (Option<String>,) =
                sqlx::query_as("SELECT version FROM assignments WHERE node = $1 AND module = $2")
                    .bind(node.as_str())
                    .bind(module.as_str())
                    .fetch_one(&mut *tx)
                    .await?;
            tx.commit().await?;
            Ok(Ok(now_pinned))
        })?;
        refused.map_err(StoreError::SeatHeld)
    }

    /// Moves the pin of `module` on each node of `pins` to its version, in
    /// one transaction (one change of the records, one composition, however
    /// many nodes: a deployment's batch). Only assignments that exist move:
    /// a node unassigned meanwhile is not assigned again. Each version must
    /// be recorded. Returns how many pins moved.
    pub async fn pin_assigned(
        &self,
        module: &Name,
        pins: &[(Name, String)],
    ) -> Result<usize, StoreError> {
        if pins.is_empty() {
            return Ok(0);
        }
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            let moved = pin_in!(tx, module, pins);
            tx.commit().await?;
            Ok(moved)
        })
    }

    /// Unassigns `module` from `node`, deleting that module's credential on
    /// the node. Returns whether it was assigned.
    pub async fn unassign(&self, node: &Name, module: &Name) -> Result<bool, StoreError> {
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            let gone = unassign_in!(tx, node.as_str(), module.as_str());
            tx.commit().await?;
            Ok(gone)
        })
    }

    /// Every assignment, by node then module.
    pub async fn assignments(&self) -> Result<Vec<Assignment>, StoreError> {
        let rows = with_pool!(self, |pool| {
            let rows: Vec<(String, String, i64, Option<String>)> = sqlx::query_as(
                "SELECT node, module, created_at, version FROM assignments ORDER BY node, module",
            )
            .fetch_all(pool)
            .await?;
            Ok(rows)
        })?;
        rows.into_iter()
            .map(|(n, m, at, version)| {
                Ok(Assignment {
                    node: name("assignment", n)?,
                    module: name("assignment", m)?,
                    created_at: at,
                    version,
                })
            })
            .collect()
    }
}

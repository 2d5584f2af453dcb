//! Modules: the catalogue's manifests as registered, and the versions
//! (commits) recorded for each.

use mesh_core::names::Name;

use super::name;
use crate::error::StoreError;
use crate::records::{Module, ModuleVersion};
use crate::secret::sha256_digest;
use crate::{Store, now_ms, with_pool};

type ModuleRow = (String, String, String, i64, i64);

fn module_from(row: ModuleRow) -> Result<Module, StoreError> {
    Ok(Module {
        name: name("module", row.0)?,
        manifest_source: row.1,
        manifest_digest: row.2,
        registered_at: row.3,
        updated_at: row.4,
    })
}

type ModuleVersionRow = (String, String, Option<String>, i64);

fn module_version_from(row: ModuleVersionRow) -> Result<ModuleVersion, StoreError> {
    Ok(ModuleVersion {
        module: name("module version", row.0)?,
        rev: row.1,
        build_id: row.2,
        recorded_at: row.3,
    })
}

const MODULE_COLUMNS: &str = "name, manifest_source, manifest_digest, registered_at, updated_at";
const MODULE_VERSION_COLUMNS: &str = "module, rev, build_id, recorded_at";

impl Store {
    /// Registers `module` with its manifest text, or replaces the manifest of
    /// a registered one. The digest is computed here from the text kept.
    pub async fn register_module(
        &self,
        module: &Name,
        manifest_source: &str,
    ) -> Result<Module, StoreError> {
        let digest = sha256_digest(manifest_source);
        let now = now_ms();
        let row = with_pool!(self, |pool| {
            let row: ModuleRow = sqlx::query_as(&format!(
                "INSERT INTO modules ({MODULE_COLUMNS}) VALUES ($1, $2, $3, $4, $4) \
                 ON CONFLICT (name) DO UPDATE SET manifest_source = excluded.manifest_source, \
                 manifest_digest = excluded.manifest_digest, updated_at = excluded.updated_at \
                 RETURNING {MODULE_COLUMNS}"
            ))
            .bind(module.as_str())
            .bind(manifest_source)
            .bind(&digest)
            .bind(now)
            .fetch_one(pool)
            .await?;
            Ok(row)
        })?;
        module_from(row)
    }

    pub async fn module(&self, module: &Name) -> Result<Option<Module>, StoreError> {
        let row = with_pool!(self, |pool| {
            let row: Option<ModuleRow> = sqlx::query_as(&format!(
                "SELECT {MODULE_COLUMNS} FROM modules WHERE name = $1"
            ))
            .bind(module.as_str())
            .fetch_optional(pool)
            .await?;
            Ok(row)
        })?;
        row.map(module_from).transpose()
    }

    /// Every registered module, by name.
    pub async fn modules(&self) -> Result<Vec<Module>, StoreError> {
        let rows = with_pool!(self, |pool| {
            let rows: Vec<ModuleRow> = sqlx::query_as(&format!(
                "SELECT {MODULE_COLUMNS} FROM modules ORDER BY name"
            ))
            .fetch_all(pool)
            .await?;
            Ok(rows)
        })?;
        rows.into_iter().map(module_from).collect()
    }

    /// Removes a module from the catalogue (with its versions and the seats it
    /// declares). Refused while it is assigned to any node.
    pub async fn remove_module(&self, module: &Name) -> Result<bool, StoreError> {
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            let (assigned,): (i64,) =
                sqlx::query_as("SELECT COUNT(*) FROM assignments WHERE module = $1")
                    .bind(module.as_str())
                    .fetch_one(&mut *tx)
                    .await?;
            if assigned > 0 {
                return Err(StoreError::Invalid {
                    what: "module removal",
                    detail: format!(
                        "{module} is still assigned to {assigned} node(s); unassign it first"
                    ),
                }
                .into());
            }
            for sql in [
                "DELETE FROM seat_aliases WHERE seat IN (SELECT name FROM seats WHERE declared_by = $1)",
                "DELETE FROM seats WHERE declared_by = $1",
                "DELETE FROM module_versions WHERE module = $1",
            ] {
                sqlx::query(sql)
                    .bind(module.as_str())
                    .execute(&mut *tx)
                    .await?;
            }
            let gone = sqlx::query("DELETE FROM modules WHERE name = $1")
                .bind(module.as_str())
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(gone.rows_affected() == 1)
        })
    }

    /// Records that `module` has version `rev` (a commit), optionally built by
    /// build `build_id`. Recording a known version again keeps it, linking the
    /// build if one is given.
    pub async fn record_module_version(
        &self,
        module: &Name,
        rev: &str,
        build_id: Option<&str>,
    ) -> Result<ModuleVersion, StoreError> {
        let now = now_ms();
        let row = with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            must_exist!(tx, "module" in "modules", module);
            let row: ModuleVersionRow = sqlx::query_as(&format!(
                "INSERT INTO module_versions ({MODULE_VERSION_COLUMNS}) \
                 VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (module, rev) DO UPDATE SET \
                 build_id = COALESCE(excluded.build_id, module_versions.build_id) \
                 RETURNING {MODULE_VERSION_COLUMNS}"
            ))
            .bind(module.as_str())
            .bind(rev)
            .bind(build_id)
            .bind(now)
            .fetch_one(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(row)
        })?;
        module_version_from(row)
    }

    /// `module`'s versions, oldest first.
    pub async fn module_versions(&self, module: &Name) -> Result<Vec<ModuleVersion>, StoreError> {
        let rows = with_pool!(self, |pool| {
            let rows: Vec<ModuleVersionRow> = sqlx::query_as(&format!(
                "SELECT {MODULE_VERSION_COLUMNS} FROM module_versions \
                 WHERE module = $1 ORDER BY recorded_at, rev"
            ))
            .bind(module.as_str())
            .fetch_all(pool)
            .await?;
            Ok(rows)
        })?;
        rows.into_iter().map(module_version_from).collect()
    }
}

//! Artifacts put by an operator (`mesh artifact put`), each recorded under a
//! version of its module, and what every version holds: what a pinned
//! assignment's declaration names. An upload is recorded as a build with no
//! build machine (id `upload:<module>:<version>`), so a version is a version
//! whoever made it.

use std::collections::BTreeMap;

use mesh_core::artifact::{Recorded, Reference, Versions};
use mesh_core::names::Name;

use super::name;
use crate::error::StoreError;
use crate::{Store, now_ms, with_pool};

/// An artifact to record: its version, name, digest, size and chunk token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    pub module: Name,
    pub version: String,
    pub name: Name,
    /// 64 lowercase hex digits.
    pub sha256: String,
    pub size: u64,
    pub nuid: String,
}

/// One recorded artifact, as `mesh artifact list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactRow {
    pub module: Name,
    pub version: String,
    pub name: Name,
    pub sha256: String,
    pub size: u64,
    pub nuid: Option<String>,
    pub recorded_at: i64,
}

impl ArtifactRow {
    pub fn reference(&self) -> Reference {
        Reference {
            module: self.module.clone(),
            artifact: self.name.clone(),
            sha256: self.sha256.clone(),
        }
    }
}

/// Whether a version string may be recorded: what `--version` takes and a
/// commit id is (a name read in a terminal and a URL-safe token).
pub use mesh_core::build::version_ok;

type Row = (
    String,
    Option<String>,
    String,
    String,
    i64,
    Option<String>,
    i64,
);

fn read_row(r: Row) -> Result<ArtifactRow, StoreError> {
    let (module, version, artifact, digest, size, nuid, at) = r;
    Ok(ArtifactRow {
        module: name("artifact", module)?,
        version: version.unwrap_or_default(),
        name: name("artifact", artifact)?,
        sha256: digest,
        size: u64::try_from(size).unwrap_or(0),
        nuid,
        recorded_at: at,
    })
}

/// The next recording position of a build, read inside the writing
/// transaction: what orders builds finished in the same millisecond.
pub(crate) const NEXT_SEQ: &str = "(SELECT COALESCE(MAX(seq), 0) + 1 FROM builds)";

const ROWS: &str = "SELECT b.module, b.rev, a.name, a.digest, a.size, a.nuid, b.finished_at \
     FROM artifacts a JOIN builds b ON b.id = a.build_id \
     WHERE b.module IS NOT NULL AND b.state = 'succeeded'";

impl Store {
    /// Records `u` under its version. The same artifact recorded again is no
    /// change (`Ok(false)`); another digest under the same version and name
    /// is refused: a version names the same bytes wherever it is pinned.
    pub async fn record_upload(&self, u: &Upload) -> Result<bool, StoreError> {
        if !version_ok(&u.version) {
            return Err(StoreError::Invalid {
                what: "version",
                detail: format!(
                    "{:?}: use letters, digits, `.`, `-` and `_`, at most 64",
                    u.version
                ),
            });
        }
        let size = i64::try_from(u.size).map_err(|_| StoreError::Invalid {
            what: "artifact",
            detail: format!("{} is {} bytes, more than can be stored", u.name, u.size),
        })?;
        let id = format!("upload:{}:{}", u.module, u.version);
        let reference = Reference {
            module: u.module.clone(),
            artifact: u.name.clone(),
            sha256: u.sha256.clone(),
        };
        let now = now_ms();
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            must_exist!(tx, "module" in "modules", &u.module);
            // A build machine's build of the same version is the same
            // version: its artifacts and the uploads' are one set.
            let existing: Option<(String, String, Option<String>)> = sqlx::query_as(
                "SELECT a.build_id, a.digest, a.nuid FROM artifacts a JOIN builds b ON b.id = a.build_id \
                 WHERE b.module = $1 AND b.rev = $2 AND a.name = $3",
            )
            .bind(u.module.as_str())
            .bind(&u.version)
            .bind(u.name.as_str())
            .fetch_optional(&mut *tx)
            .await?;
            if let Some((build_id, digest, nuid)) = existing {
                if digest == u.sha256 && nuid.as_deref() == Some(u.nuid.as_str()) {
                    return Ok(false);
                }
                // The same bytes stored again (the object was deleted from
                // the bus, or the bus wiped): their chunks are under a new
                // token, and the hosts' grants must follow it.
                if digest == u.sha256 {
                    sqlx::query("UPDATE artifacts SET nuid = $1 WHERE build_id = $2 AND name = $3")
                        .bind(&u.nuid)
                        .bind(&build_id)
                        .bind(u.name.as_str())
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    return Ok(true);
                }
                return Err(StoreError::AlreadyExists {
                    what: "artifact",
                    key: format!(
                        "{} of version {} of {} (with other bytes: put these under another --version)",
                        u.name, u.version, u.module
                    ),
                }
                .into());
            }
            sqlx::query(&format!(
                "INSERT INTO builds (id, module, rev, state, failure, finished_at, seq) \
                     VALUES ($1, $2, $3, 'succeeded', NULL, $4, {NEXT_SEQ}) \
                     ON CONFLICT (id) DO UPDATE SET finished_at = excluded.finished_at, \
                     seq = excluded.seq"
            ))
            .bind(&id)
            .bind(u.module.as_str())
            .bind(&u.version)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "INSERT INTO module_versions (module, rev, build_id, recorded_at) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (module, rev) DO NOTHING",
            )
            .bind(u.module.as_str())
            .bind(&u.version)
            .bind(&id)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "INSERT INTO artifacts (build_id, name, digest, path, size, nuid) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(&id)
            .bind(u.name.as_str())
            .bind(&u.sha256)
            .bind(reference.object_name())
            .bind(size)
            .bind(&u.nuid)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(true)
        })
    }

    /// Every recorded artifact of a module that succeeded (of `module`
    /// alone if given), newest version first, then by name.
    pub async fn artifacts(&self, module: Option<&Name>) -> Result<Vec<ArtifactRow>, StoreError> {
        let rows: Vec<Row> = with_pool!(self, |pool| {
            let sql = format!(
                "{ROWS} AND ($1 IS NULL OR b.module = $1) \
                 ORDER BY b.finished_at DESC, b.seq DESC, a.name"
            );
            let rows: Vec<Row> = sqlx::query_as(&sql)
                .bind(module.map(Name::as_str))
                .fetch_all(pool)
                .await?;
            Ok(rows)
        })?;
        rows.into_iter().map(read_row).collect()
    }

    /// The newest version of `module` with an artifact, if any.
    pub async fn newest_version(&self, module: &Name) -> Result<Option<String>, StoreError> {
        Ok(self
            .artifacts(Some(module))
            .await?
            .into_iter()
            .next()
            .map(|r| r.version))
    }

    /// What every version holds, for composing and deriving: only artifacts
    /// with a chunk token (a host can be granted nothing else).
    pub async fn versions(&self) -> Result<Versions, StoreError> {
        let mut out: Versions = BTreeMap::new();
        for r in self.artifacts(None).await? {
            let Some(nuid) = r.nuid.clone() else {
                continue;
            };
            out.entry((r.module.clone(), r.version.clone()))
                .or_default()
                .insert(
                    r.name.clone(),
                    Recorded {
                        reference: r.reference(),
                        size: r.size,
                        nuid,
                    },
                );
        }
        Ok(out)
    }
}

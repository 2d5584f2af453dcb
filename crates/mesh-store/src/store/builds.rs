//! Builds: finished builds as the build machine announced them, with their
//! inputs and the artifacts they produced.

use mesh_core::names::Name;

use super::artifacts::NEXT_SEQ;
use super::opt_name;
use crate::error::{MalformedValue, StoreError};
use crate::records::{Artifact, Build, BuildState};
use crate::{Store, with_pool};

impl Store {
    /// Records a finished build with its inputs and artifacts, and a
    /// successful one's version of its module (what `mesh assign` pins). A
    /// build id is recorded once: the same announcement heard twice is
    /// refused as [`StoreError::AlreadyExists`] and writes nothing.
    pub async fn record_build(&self, build: &Build) -> Result<(), StoreError> {
        let mut sizes = Vec::with_capacity(build.artifacts.len());
        for a in &build.artifacts {
            sizes.push(i64::try_from(a.size).map_err(|_| StoreError::Invalid {
                what: "artifact",
                detail: format!("{} is {} bytes, more than can be stored", a.name, a.size),
            })?);
        }
        let (state, failure) = match &build.state {
            BuildState::Succeeded => ("succeeded", None),
            BuildState::Failed { reason } => ("failed", Some(reason.as_str())),
        };
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            if let (Some(module), BuildState::Succeeded) = (&build.module, &build.state) {
                must_exist!(tx, "module" in "modules", module);
            }
            let inserted = sqlx::query(&format!(
                "INSERT INTO builds (id, module, rev, state, failure, finished_at, seq) \
                 VALUES ($1, $2, $3, $4, $5, $6, {NEXT_SEQ}) ON CONFLICT (id) DO NOTHING"
            ))
            .bind(&build.id)
            .bind(build.module.as_ref().map(Name::as_str))
            .bind(build.rev.as_deref())
            .bind(state)
            .bind(failure)
            .bind(build.finished_at)
            .execute(&mut *tx)
            .await?;
            if inserted.rows_affected() == 0 {
                return Err(StoreError::AlreadyExists {
                    what: "build",
                    key: build.id.clone(),
                }
                .into());
            }
            for (position, input) in build.inputs.iter().enumerate() {
                sqlx::query(
                    "INSERT INTO build_inputs (build_id, position, input) VALUES ($1, $2, $3)",
                )
                .bind(&build.id)
                .bind(i64::try_from(position).unwrap_or(i64::MAX))
                .bind(input)
                .execute(&mut *tx)
                .await?;
            }
            for (a, size) in build.artifacts.iter().zip(&sizes) {
                sqlx::query(
                    "INSERT INTO artifacts (build_id, name, digest, path, size, nuid) \
                     VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .bind(&build.id)
                .bind(&a.name)
                .bind(&a.digest)
                .bind(&a.path)
                .bind(*size)
                .bind(a.nuid.as_deref())
                .execute(&mut *tx)
                .await?;
            }
            // A version is its first build's: a rebuild of a recorded commit
            // is kept as a build, and the version still names what it did.
            if let (Some(module), Some(rev), BuildState::Succeeded) =
                (&build.module, &build.rev, &build.state)
            {
                sqlx::query(
                    "INSERT INTO module_versions (module, rev, build_id, recorded_at) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (module, rev) DO NOTHING",
                )
                .bind(module.as_str())
                .bind(rev)
                .bind(&build.id)
                .bind(build.finished_at)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(())
        })
    }

    pub async fn build(&self, id: &str) -> Result<Option<Build>, StoreError> {
        type BuildRow = (
            String,
            Option<String>,
            Option<String>,
            String,
            Option<String>,
            i64,
        );
        let (row, inputs, artifacts) = with_pool!(self, |pool| {
            let row: Option<BuildRow> = sqlx::query_as(
                "SELECT id, module, rev, state, failure, finished_at FROM builds WHERE id = $1",
            )
            .bind(id)
            .fetch_optional(pool)
            .await?;
            let inputs: Vec<(String,)> = sqlx::query_as(
                "SELECT input FROM build_inputs WHERE build_id = $1 ORDER BY position",
            )
            .bind(id)
            .fetch_all(pool)
            .await?;
            let artifacts: Vec<ArtifactCols> = sqlx::query_as(
                "SELECT name, digest, path, size, nuid FROM artifacts WHERE build_id = $1 ORDER BY name",
            )
            .bind(id)
            .fetch_all(pool)
            .await?;
            Ok((row, inputs, artifacts))
        })?;
        let Some((id, module, rev, state, failure, finished_at)) = row else {
            return Ok(None);
        };
        let state = match state.as_str() {
            "succeeded" => BuildState::Succeeded,
            "failed" => BuildState::Failed {
                reason: failure.unwrap_or_default(),
            },
            other => {
                return Err(StoreError::malformed(
                    "build",
                    MalformedValue::UnknownText {
                        field: "state",
                        found: other.to_string(),
                        either: ["succeeded", "failed"],
                    },
                ));
            }
        };
        let artifacts = artifacts
            .into_iter()
            .map(artifact_from)
            .collect::<Result<_, _>>()?;
        Ok(Some(Build {
            id,
            module: opt_name("build", module)?,
            rev,
            state,
            inputs: inputs.into_iter().map(|(i,)| i).collect(),
            artifacts,
            finished_at,
        }))
    }

    /// Every recorded build (of `module` alone if given), newest first:
    /// what `mesh builds` lists and the version graph is drawn from.
    pub async fn builds(&self, module: Option<&Name>) -> Result<Vec<Build>, StoreError> {
        let ids: Vec<(String,)> = with_pool!(self, |pool| {
            let ids: Vec<(String,)> = sqlx::query_as(
                "SELECT id FROM builds WHERE ($1 IS NULL OR module = $1) \
                 ORDER BY finished_at DESC, seq DESC",
            )
            .bind(module.map(Name::as_str))
            .fetch_all(pool)
            .await?;
            Ok(ids)
        })?;
        let mut out = Vec::with_capacity(ids.len());
        for (id,) in ids {
            // A build removed between the two reads is simply not listed.
            if let Some(b) = self.build(&id).await? {
                out.push(b);
            }
        }
        Ok(out)
    }

    /// Every artifact with `digest`, with the build that produced it.
    pub async fn artifacts_by_digest(
        &self,
        digest: &str,
    ) -> Result<Vec<(String, Artifact)>, StoreError> {
        let rows = with_pool!(self, |pool| {
            let rows: Vec<(String, String, String, String, i64, Option<String>)> = sqlx::query_as(
                "SELECT build_id, name, digest, path, size, nuid FROM artifacts \
                 WHERE digest = $1 ORDER BY build_id, name",
            )
            .bind(digest)
            .fetch_all(pool)
            .await?;
            Ok(rows)
        })?;
        rows.into_iter()
            .map(|(b, n, d, p, s, nuid)| Ok((b, artifact_from((n, d, p, s, nuid))?)))
            .collect()
    }
}

type ArtifactCols = (String, String, String, i64, Option<String>);

fn artifact_from((name, digest, path, size, nuid): ArtifactCols) -> Result<Artifact, StoreError> {
    Ok(Artifact {
        size: u64::try_from(size).map_err(|_| {
            StoreError::malformed(
                "artifact",
                MalformedValue::NegativeSize {
                    artifact: name.clone(),
                    size,
                },
            )
        })?,
        name,
        digest,
        path,
        nuid,
    })
}

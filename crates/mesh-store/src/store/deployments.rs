//! Deployments (DESIGN "health and deploys"): each a row holding the
//! deployment as `mesh-core` defines it, JSON, and whether it is active
//! (running or paused). One active deployment per module, held by a
//! unique index. A state is written only over the one it was read as, so
//! an operator's pause and the controller's step never overwrite each
//! other: the loser reads again.

use mesh_core::deploy::{Deployment, State, Step};
use mesh_core::names::Name;

use crate::error::{MalformedValue, RefusalKind};
use crate::{Millis, Store, StoreError, now_ms, with_pool};

/// A deployment as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeploymentRow {
    pub id: i64,
    pub deployment: Deployment,
    pub created_at: Millis,
    pub updated_at: Millis,
}

impl DeploymentRow {
    pub fn active(&self) -> bool {
        is_active(&self.deployment.state)
    }
}

fn is_active(s: &State) -> bool {
    matches!(s, State::Running { .. } | State::Paused { .. })
}

type Row = (i64, String, i64, i64);

fn row((id, record, created_at, updated_at): Row) -> Result<DeploymentRow, StoreError> {
    let deployment = serde_json::from_str(&record).map_err(|source| {
        StoreError::malformed(
            "deployment",
            MalformedValue::Json {
                field: "record",
                source,
            },
        )
    })?;
    Ok(DeploymentRow {
        id,
        deployment,
        created_at,
        updated_at,
    })
}

const COLUMNS: &str = "id, record, created_at, updated_at";

impl Store {
    /// Records a new deployment; its id. A module with an active one is
    /// refused ([`StoreError::AlreadyExists`] naming it).
    pub async fn create_deployment(&self, d: &Deployment) -> Result<i64, StoreError> {
        let record = serde_json::to_string(d).expect("deployment JSON");
        let module = d.spec.module.as_str();
        let at = now_ms();
        let result = with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            let running: Option<(i64,)> =
                sqlx::query_as("SELECT id FROM deployments WHERE module = $1 AND active = 1")
                    .bind(module)
                    .fetch_optional(&mut *tx)
                    .await?;
            if let Some((id,)) = running {
                return Err(StoreError::AlreadyExists {
                    what: "active deployment",
                    key: format!("#{id} of {module}"),
                }
                .into());
            }
            let (id,): (i64,) = sqlx::query_as(
                "INSERT INTO deployments (module, record, active, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $4) RETURNING id",
            )
            .bind(module)
            .bind(&record)
            .bind(i64::from(is_active(&d.state)))
            .bind(at)
            .fetch_one(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(id)
        });
        match result {
            // Two at once: the index held; the loser is told as above.
            Err(StoreError::Refused {
                kind: RefusalKind::Unique,
                ..
            }) => Err(StoreError::AlreadyExists {
                what: "active deployment",
                key: format!("of {module}"),
            }),
            other => other,
        }
    }

    /// Writes `now` over deployment `id` if it still is `was`; whether it
    /// was (false: someone wrote it meanwhile, read it again).
    pub async fn update_deployment(
        &self,
        id: i64,
        was: &Deployment,
        now: &Deployment,
    ) -> Result<bool, StoreError> {
        let was = serde_json::to_string(was).expect("deployment JSON");
        let record = serde_json::to_string(now).expect("deployment JSON");
        let at = now_ms();
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            let done = sqlx::query(
                "UPDATE deployments SET record = $1, active = $2, updated_at = $3 \
                 WHERE id = $4 AND record = $5",
            )
            .bind(&record)
            .bind(i64::from(is_active(&now.state)))
            .bind(at)
            .bind(id)
            .bind(&was)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            tx.commit().await?;
            Ok(done == 1)
        })
    }

    /// Carries out `steps` of deployment `row` (read as it is), in one
    /// change of the records: the state written only over the one read,
    /// and every pin with it (one composition for a whole batch). The state
    /// recorded; none when there was none to record, or when someone wrote
    /// another meanwhile (an operator's pause: read it again) — then
    /// nothing is pinned either, so a revert's pins never outlive a record
    /// that says otherwise.
    pub async fn carry_out_deployment(
        &self,
        row: &DeploymentRow,
        steps: Vec<Step>,
    ) -> Result<Option<State>, StoreError> {
        let d = &row.deployment;
        let mut pins = Vec::new();
        let mut states = Vec::new();
        for step in steps {
            match step {
                Step::Pin { node, version } => pins.push((node, version)),
                Step::Record { state } => states.push(state),
            }
        }
        let at = now_ms();
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            let mut was = serde_json::to_string(d).expect("deployment JSON");
            let mut recorded = None;
            for state in &states {
                let now = Deployment {
                    state: state.clone(),
                    ..d.clone()
                };
                let record = serde_json::to_string(&now).expect("deployment JSON");
                let done = sqlx::query(
                    "UPDATE deployments SET record = $1, active = $2, updated_at = $3 \
                     WHERE id = $4 AND record = $5",
                )
                .bind(&record)
                .bind(i64::from(is_active(state)))
                .bind(at)
                .bind(row.id)
                .bind(&was)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if done != 1 {
                    tx.rollback().await?;
                    return Ok(None);
                }
                was = record;
                recorded = Some(state.clone());
            }
            if !pins.is_empty() {
                pin_in!(tx, &d.spec.module, &pins);
            }
            tx.commit().await?;
            Ok(recorded)
        })
    }

    /// Deployment `id`.
    pub async fn deployment(&self, id: i64) -> Result<Option<DeploymentRow>, StoreError> {
        let r: Option<Row> = with_pool!(self, |pool| {
            Ok(
                sqlx::query_as(&format!("SELECT {COLUMNS} FROM deployments WHERE id = $1"))
                    .bind(id)
                    .fetch_optional(pool)
                    .await?,
            )
        })?;
        r.map(row).transpose()
    }

    /// Up to `limit` deployments, newest first; of `module` alone if given.
    pub async fn deployments(
        &self,
        module: Option<&Name>,
        limit: u32,
    ) -> Result<Vec<DeploymentRow>, StoreError> {
        let rows: Vec<Row> = with_pool!(self, |pool| {
            Ok(sqlx::query_as(&format!(
                "SELECT {COLUMNS} FROM deployments WHERE module = COALESCE($1, module) \
                 ORDER BY id DESC LIMIT $2"
            ))
            .bind(module.map(Name::as_str))
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await?)
        })?;
        rows.into_iter().map(row).collect()
    }

    /// Every active (running or paused) deployment, oldest first.
    pub async fn active_deployments(&self) -> Result<Vec<DeploymentRow>, StoreError> {
        let rows: Vec<Row> = with_pool!(self, |pool| {
            Ok(sqlx::query_as(&format!(
                "SELECT {COLUMNS} FROM deployments WHERE active = 1 ORDER BY id"
            ))
            .fetch_all(pool)
            .await?)
        })?;
        rows.into_iter().map(row).collect()
    }
}

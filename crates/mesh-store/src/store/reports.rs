//! Reports: what a host said after applying a declaration, one outcome per
//! module, written and read together.

use std::collections::BTreeMap;

use mesh_core::names::Name;
use mesh_core::report::ModuleHealth;

use super::{name, not_found};
use crate::error::{MalformedValue, RefusalKind, StoreError};
use crate::records::{ModuleOutcome, ModuleState, Recorded, Report, StoredReport};
use crate::{Millis, Store, with_pool};

/// An outcome row as read: module, state, reason, restarts, pinned,
/// health, health reason, healthy for (ms).
type OutcomeRow = (
    String,
    String,
    Option<String>,
    i64,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<i64>,
);

fn outcome_from(row: OutcomeRow) -> Result<ModuleOutcome, StoreError> {
    let (module, state, reason, restarts, pinned, health, health_reason, healthy_for_ms) = row;
    let health = match health.as_deref() {
        None => None,
        Some("starting") => Some(ModuleHealth::Starting),
        Some("healthy") => Some(ModuleHealth::Healthy {
            for_ms: u64::try_from(healthy_for_ms.unwrap_or(0)).unwrap_or(0),
        }),
        Some("unhealthy") => Some(ModuleHealth::Unhealthy {
            reason: health_reason.unwrap_or_default(),
        }),
        Some(other) => {
            return Err(StoreError::malformed(
                "report",
                MalformedValue::UnknownText {
                    field: "module health",
                    found: other.to_string(),
                    either: ["healthy", "unhealthy"],
                },
            ));
        }
    };
    let state = match (state.as_str(), reason) {
        ("starting", _) => ModuleState::Starting,
        ("stopped", _) => ModuleState::Stopped,
        ("running", _) => ModuleState::Running,
        ("failed", reason) => ModuleState::Failed {
            reason: reason.unwrap_or_default(),
        },
        (other, _) => {
            return Err(StoreError::malformed(
                "report",
                MalformedValue::UnknownText {
                    field: "module state",
                    found: other.to_string(),
                    either: ["running", "failed"],
                },
            ));
        }
    };
    Ok(ModuleOutcome {
        module: name("report", module)?,
        state,
        restarts: u32::try_from(restarts).unwrap_or(u32::MAX),
        pinned,
        health,
    })
}

/// The health columns of an outcome: health, its reason, healthy for (ms).
fn health_text(h: Option<&ModuleHealth>) -> (Option<&'static str>, Option<&str>, Option<i64>) {
    match h {
        None => (None, None, None),
        Some(h @ ModuleHealth::Starting) => (Some(h.as_str()), None, None),
        Some(h @ ModuleHealth::Healthy { for_ms }) => (
            Some(h.as_str()),
            None,
            Some(i64::try_from(*for_ms).unwrap_or(i64::MAX)),
        ),
        Some(h @ ModuleHealth::Unhealthy { reason }) => (Some(h.as_str()), Some(reason), None),
    }
}

/// Rows per multi-row insert: under SQLite's 32,766 bound parameters (6
/// per report row, 9 per outcome row) and PostgreSQL's 65,535.
const REPORTS_PER_STATEMENT: usize = 1000;
const OUTCOMES_PER_STATEMENT: usize = 1000;

const INSERT_REPORT: &str = "INSERT INTO reports (node, declaration_version, received_at, refused, report_id, epoch) \
     VALUES ($1, $2, $3, $4, $5, $6) \
     ON CONFLICT (node, report_id) DO NOTHING RETURNING id";
const INSERT_OUTCOME: &str = "INSERT INTO report_outcomes (report_id, module, state, reason, restarts, pinned, health, health_reason, healthy_for_ms) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";

fn state_text(state: &ModuleState) -> (&'static str, Option<&str>) {
    match state {
        ModuleState::Starting => ("starting", None),
        ModuleState::Running => ("running", None),
        ModuleState::Failed { reason } => ("failed", Some(reason.as_str())),
        ModuleState::Stopped => ("stopped", None),
    }
}

/// A report naming one module twice is refused before anything is written.
fn check_outcomes(report: &Report) -> Result<(), StoreError> {
    let mut modules: Vec<&str> = report.outcomes.iter().map(|o| o.module.as_str()).collect();
    modules.sort_unstable();
    if let Some(w) = modules.windows(2).find(|w| w[0] == w[1]) {
        return Err(StoreError::Invalid {
            what: "report",
            detail: format!("module {} has two outcomes", w[0]),
        });
    }
    Ok(())
}

/// id, node, declaration version, received at, refused, report id.
type ReportRow = (i64, String, i64, i64, Option<String>, Option<String>);

impl Store {
    /// Records a report, once: a report whose (node, report id) is
    /// recorded already is [`Recorded::Duplicate`] and writes nothing.
    pub async fn record_report(&self, report: &Report) -> Result<Recorded, StoreError> {
        let mut recorded = self.record_reports(std::slice::from_ref(report)).await?;
        Ok(recorded.pop().expect("one outcome per report"))
    }

    /// Records `reports` in one transaction (one commit, one fsync, for a
    /// batch the controller took from CONTROL), each once: one whose (node,
    /// report id) is recorded already, or earlier in the batch, is
    /// [`Recorded::Duplicate`]. All or nothing: a report the store refuses
    /// (its node forgotten) fails the batch, and nothing of it is written.
    pub async fn record_reports(&self, reports: &[Report]) -> Result<Vec<Recorded>, StoreError> {
        for r in reports {
            check_outcomes(r)?;
        }
        // A report without an id (older hosts) cannot be matched to the row
        // a multi-row insert returns: those go one statement each.
        if reports.iter().any(|r| r.report_id.is_none()) {
            return self.record_reports_one_by_one(reports).await;
        }
        // The first of two with one (node, id) in the batch is the one.
        let mut first: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        let mut out: Vec<Option<Recorded>> = vec![None; reports.len()];
        let mut fresh = Vec::new();
        for (i, r) in reports.iter().enumerate() {
            let key = (r.node.as_str(), r.report_id.as_deref().unwrap_or_default());
            match first.entry(key) {
                std::collections::btree_map::Entry::Occupied(_) => {
                    out[i] = Some(Recorded::Duplicate);
                }
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(i);
                    fresh.push(i);
                }
            }
        }
        let epoch = self.fence_epoch();
        let result = with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            // A handful of statements for the whole batch: one insert of the
            // reports, one of their outcomes per chunk (bind limits).
            let mut ids: BTreeMap<usize, i64> = BTreeMap::new();
            for chunk in fresh.chunks(REPORTS_PER_STATEMENT) {
                let mut q = sqlx::QueryBuilder::new(
                    "INSERT INTO reports (node, declaration_version, received_at, refused, report_id, epoch) ",
                );
                q.push_values(chunk, |mut b, &i| {
                    let r = &reports[i];
                    b.push_bind(r.node.as_str())
                        .push_bind(r.declaration_version)
                        .push_bind(r.received_at)
                        .push_bind(r.refused.as_deref())
                        .push_bind(r.report_id.as_deref())
                        .push_bind(epoch);
                });
                q.push(" ON CONFLICT (node, report_id) DO NOTHING RETURNING id, node, report_id");
                let rows: Vec<(i64, String, Option<String>)> =
                    q.build_query_as().fetch_all(&mut *tx).await?;
                for (id, node, report_id) in rows {
                    if let Some(&i) =
                        first.get(&(node.as_str(), report_id.as_deref().unwrap_or_default()))
                    {
                        ids.insert(i, id);
                    }
                }
            }
            let outcomes: Vec<(i64, &ModuleOutcome)> = ids
                .iter()
                .flat_map(|(&i, &id)| reports[i].outcomes.iter().map(move |o| (id, o)))
                .collect();
            for chunk in outcomes.chunks(OUTCOMES_PER_STATEMENT) {
                let mut q = sqlx::QueryBuilder::new(
                    "INSERT INTO report_outcomes (report_id, module, state, reason, restarts, pinned, health, health_reason, healthy_for_ms) ",
                );
                q.push_values(chunk, |mut b, (id, o)| {
                    let (state, reason) = state_text(&o.state);
                    let (health, health_reason, healthy_for) = health_text(o.health.as_ref());
                    b.push_bind(*id)
                        .push_bind(o.module.as_str())
                        .push_bind(state)
                        .push_bind(reason)
                        .push_bind(i64::from(o.restarts))
                        .push_bind(o.pinned.as_deref())
                        .push_bind(health)
                        .push_bind(health_reason)
                        .push_bind(healthy_for);
                });
                q.build().execute(&mut *tx).await?;
            }
            if ids.is_empty() {
                tx.rollback().await?;
            } else {
                tx.commit().await?;
            }
            Ok(ids)
        });
        let ids = match result {
            // The only reference a report makes is to its node.
            Err(StoreError::Refused {
                kind: RefusalKind::ForeignKey,
                ..
            }) if reports.len() == 1 => return Err(not_found("node", &reports[0].node)),
            other => other?,
        };
        Ok(out
            .into_iter()
            .enumerate()
            .map(|(i, o)| {
                o.unwrap_or(match ids.get(&i) {
                    Some(&id) => Recorded::New(id),
                    None => Recorded::Duplicate,
                })
            })
            .collect())
    }

    /// [`Store::record_reports`] a statement per report and outcome.
    async fn record_reports_one_by_one(
        &self,
        reports: &[Report],
    ) -> Result<Vec<Recorded>, StoreError> {
        let result = with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            let mut out = Vec::with_capacity(reports.len());
            for report in reports {
                let inserted: Option<(i64,)> = sqlx::query_as(INSERT_REPORT)
                    .bind(report.node.as_str())
                    .bind(report.declaration_version)
                    .bind(report.received_at)
                    .bind(report.refused.as_deref())
                    .bind(report.report_id.as_deref())
                    .bind(self.fence_epoch())
                    .fetch_optional(&mut *tx)
                    .await?;
                let Some((id,)) = inserted else {
                    out.push(Recorded::Duplicate);
                    continue;
                };
                for o in &report.outcomes {
                    let (state, reason) = state_text(&o.state);
                    let (health, health_reason, healthy_for) = health_text(o.health.as_ref());
                    sqlx::query(INSERT_OUTCOME)
                        .bind(id)
                        .bind(o.module.as_str())
                        .bind(state)
                        .bind(reason)
                        .bind(i64::from(o.restarts))
                        .bind(o.pinned.as_deref())
                        .bind(health)
                        .bind(health_reason)
                        .bind(healthy_for)
                        .execute(&mut *tx)
                        .await?;
                }
                out.push(Recorded::New(id));
            }
            if out.iter().all(|r| *r == Recorded::Duplicate) {
                tx.rollback().await?;
            } else {
                tx.commit().await?;
            }
            Ok(out)
        });
        match result {
            Err(StoreError::Refused {
                kind: RefusalKind::ForeignKey,
                ..
            }) if reports.len() == 1 => Err(not_found("node", &reports[0].node)),
            other => other,
        }
    }

    /// `module`'s outcome in each node's newest report, with when that
    /// report was received: what a deployment observes, in one read for
    /// the whole fleet. A node whose newest report does not name the
    /// module is absent.
    pub async fn newest_outcomes(
        &self,
        module: &Name,
    ) -> Result<BTreeMap<Name, (ModuleOutcome, Millis)>, StoreError> {
        #[allow(clippy::type_complexity)]
        let rows: Vec<(
            String,
            i64,
            String,
            String,
            Option<String>,
            i64,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<i64>,
        )> = with_pool!(self, |pool| {
            Ok(sqlx::query_as(
                    "SELECT r.node, r.received_at, o.module, o.state, o.reason, o.restarts, o.pinned, o.health, o.health_reason, o.healthy_for_ms \
                     FROM (SELECT node, MAX(id) AS id FROM reports GROUP BY node) newest \
                     JOIN reports r ON r.id = newest.id \
                     JOIN report_outcomes o ON o.report_id = r.id AND o.module = $1",
                )
                .bind(module.as_str())
                .fetch_all(pool)
                .await?)
        })?;
        rows.into_iter()
            .map(
                |(node, at, m, state, reason, restarts, pinned, health, health_reason, for_ms)| {
                    let o = outcome_from((
                        m,
                        state,
                        reason,
                        restarts,
                        pinned,
                        health,
                        health_reason,
                        for_ms,
                    ))?;
                    Ok((name("report", node)?, (o, at)))
                },
            )
            .collect()
    }

    /// How many modules each node's newest report gives each health
    /// (`starting`, `healthy`, `unhealthy`; `unknown` from a host that
    /// reports none), in one read for the fleet: what `/metrics` counts.
    pub async fn health_counts(&self) -> Result<BTreeMap<String, i64>, StoreError> {
        let rows: Vec<(String, i64)> = with_pool!(self, |pool| {
            Ok(sqlx::query_as(
                "SELECT COALESCE(o.health, 'unknown'), COUNT(*) \
                 FROM (SELECT node, MAX(id) AS id FROM reports GROUP BY node) newest \
                 JOIN report_outcomes o ON o.report_id = newest.id \
                 GROUP BY COALESCE(o.health, 'unknown')",
            )
            .fetch_all(pool)
            .await?)
        })?;
        Ok(rows.into_iter().collect())
    }

    /// The newest report from `node`.
    pub async fn latest_report(&self, node: &Name) -> Result<Option<StoredReport>, StoreError> {
        Ok(self.reports(node, 1).await?.into_iter().next())
    }

    /// Up to `limit` reports from `node`, newest first.
    pub async fn reports(&self, node: &Name, limit: u32) -> Result<Vec<StoredReport>, StoreError> {
        let (rows, outcomes) = with_pool!(self, |pool| {
            let rows: Vec<ReportRow> = sqlx::query_as(
                "SELECT id, node, declaration_version, received_at, refused, report_id FROM reports \
                 WHERE node = $1 ORDER BY id DESC LIMIT $2",
            )
            .bind(node.as_str())
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await?;
            // Outcomes by the ids just read, not by the window again: a report
            // arriving in between would shift it and leave the oldest rows
            // without theirs. (A report commits with its outcomes.)
            let (Some(newest), Some(oldest)) = (rows.first(), rows.last()) else {
                return Ok((rows, Vec::new()));
            };
            #[allow(clippy::type_complexity)]
            let outcomes: Vec<(i64, String, String, Option<String>, i64, Option<String>, Option<String>, Option<String>, Option<i64>)> = sqlx::query_as(
                "SELECT o.report_id, o.module, o.state, o.reason, o.restarts, o.pinned, o.health, o.health_reason, o.healthy_for_ms FROM report_outcomes o \
                 JOIN reports r ON r.id = o.report_id \
                 WHERE r.node = $1 AND o.report_id BETWEEN $2 AND $3 \
                 ORDER BY o.report_id, o.module",
            )
            .bind(node.as_str())
            .bind(oldest.0)
            .bind(newest.0)
            .fetch_all(pool)
            .await?;
            Ok((rows, outcomes))
        })?;
        let mut by_report: BTreeMap<i64, Vec<ModuleOutcome>> = BTreeMap::new();
        for (id, module, state, reason, restarts, pinned, health, health_reason, for_ms) in outcomes
        {
            by_report.entry(id).or_default().push(outcome_from((
                module,
                state,
                reason,
                restarts,
                pinned,
                health,
                health_reason,
                for_ms,
            ))?);
        }
        rows.into_iter()
            .map(
                |(id, n, declaration_version, received_at, refused, report_id)| {
                    Ok(StoredReport {
                        id,
                        report: Report {
                            node: name("report", n)?,
                            declaration_version,
                            outcomes: by_report.remove(&id).unwrap_or_default(),
                            received_at,
                            refused,
                            report_id,
                        },
                    })
                },
            )
            .collect()
    }

    /// Every report received at or after `since` (unix ms), by when it was
    /// received: node, the declaration it answers, when it was received
    /// and its id. One read for a whole fleet (`mesh-bench` follows a
    /// fan-out with it).
    pub async fn reports_received_since(
        &self,
        since: Millis,
    ) -> Result<Vec<ReportSeen>, StoreError> {
        let rows: Vec<(String, i64, i64, Option<String>)> = with_pool!(self, |pool| {
            Ok(sqlx::query_as(
                "SELECT node, declaration_version, received_at, report_id FROM reports \
                 WHERE received_at >= $1 ORDER BY received_at, id",
            )
            .bind(since)
            .fetch_all(pool)
            .await?)
        })?;
        rows.into_iter()
            .map(|(n, declaration_version, received_at, report_id)| {
                Ok(ReportSeen {
                    node: name("report", n)?,
                    declaration_version,
                    received_at,
                    report_id,
                })
            })
            .collect()
    }
}

/// A report as [`Store::reports_received_since`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportSeen {
    pub node: Name,
    pub declaration_version: i64,
    pub received_at: Millis,
    pub report_id: Option<String>,
}

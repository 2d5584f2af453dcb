//! The audit trail: appended, listed, never changed (the table's triggers
//! refuse an update or a delete from any writer; this API has neither).

use crate::error::StoreError;
use crate::{Millis, Store, now_ms, with_pool};

/// Who asked for a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    /// A person, as the bus said (the subject they were granted).
    Person(String),
    /// An OS user on the controller's machine, through the mesh directory.
    Local(String),
}

impl Actor {
    /// As the `who` column holds it: `person ada`, `local root`.
    pub fn written(&self) -> String {
        match self {
            Actor::Person(p) => format!("person {p}"),
            Actor::Local(u) => format!("local {u}"),
        }
    }
}

/// What an audit row says happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done; the records revision it produced.
    Done { revision: Option<i64> },
    /// Refused for a failed precondition (the person was permitted to ask).
    Refused { reason: String },
}

/// A row to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    pub who: Actor,
    /// The operation's name (`assign`, `secret-set`, …).
    pub operation: String,
    /// Its arguments as JSON, secret values left out (names kept).
    pub arguments: serde_json::Value,
    pub outcome: Outcome,
    /// The request's id: a request retried after its answer was lost is
    /// recorded once.
    pub request_id: Option<String>,
}

/// A row as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AuditRow {
    pub id: i64,
    pub at: Millis,
    pub who: String,
    pub operation: String,
    pub arguments: String,
    /// `done` or `refused: REASON`.
    pub outcome: String,
    pub revision: Option<i64>,
    pub request_id: Option<String>,
}

/// Whether an append made a row, or found its request's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    New(i64),
    /// The request's row was already there (a retry): nothing appended.
    Seen(i64),
}

/// Which rows to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    pub since: Option<Millis>,
    /// `who` as written (`person ada`).
    pub who: Option<String>,
    pub limit: Option<i64>,
}

type Row = (
    i64,
    i64,
    String,
    String,
    String,
    String,
    Option<i64>,
    Option<String>,
);

impl Store {
    /// Appends `entry` (fenced, as every write of a controller's store).
    pub async fn append_audit(&self, entry: &AuditEntry) -> Result<Appended, StoreError> {
        let (outcome, revision) = match &entry.outcome {
            Outcome::Done { revision } => ("done".to_string(), *revision),
            Outcome::Refused { reason } => (format!("refused: {reason}"), None),
        };
        let now = now_ms();
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            if let Some(id) = &entry.request_id {
                let seen: Option<(i64,)> =
                    sqlx::query_as("SELECT id FROM audit WHERE request_id = $1")
                        .bind(id)
                        .fetch_optional(&mut *tx)
                        .await?;
                if let Some((row,)) = seen {
                    return Ok(Appended::Seen(row));
                }
            }
            let (id,): (i64,) = sqlx::query_as(
                "INSERT INTO audit (at, who, operation, arguments, outcome, revision, request_id) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
            )
            .bind(now)
            .bind(entry.who.written())
            .bind(&entry.operation)
            .bind(entry.arguments.to_string())
            .bind(&outcome)
            .bind(revision)
            .bind(entry.request_id.as_deref())
            .fetch_one(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(Appended::New(id))
        })
    }

    /// The row of request `id`, if one was appended: how a retried request
    /// is answered without being carried out again.
    pub async fn audit_of_request(&self, id: &str) -> Result<Option<AuditRow>, StoreError> {
        let row: Option<Row> = with_pool!(self, |pool| {
            Ok(sqlx::query_as(
                "SELECT id, at, who, operation, arguments, outcome, revision, request_id \
                 FROM audit WHERE request_id = $1",
            )
            .bind(id)
            .fetch_optional(pool)
            .await?)
        })?;
        Ok(row.map(row_from))
    }

    /// The rows `filter` selects, oldest first (the newest `limit` of them).
    pub async fn audit(&self, filter: &AuditFilter) -> Result<Vec<AuditRow>, StoreError> {
        let rows: Vec<Row> = with_pool!(self, |pool| {
            Ok(sqlx::query_as(
                "SELECT id, at, who, operation, arguments, outcome, revision, request_id \
                 FROM audit WHERE at >= $1 AND ($2 IS NULL OR who = $2) \
                 ORDER BY id DESC LIMIT $3",
            )
            .bind(filter.since.unwrap_or(0))
            .bind(filter.who.as_deref())
            .bind(filter.limit.unwrap_or(i64::MAX))
            .fetch_all(pool)
            .await?)
        })?;
        Ok(rows.into_iter().rev().map(row_from).collect())
    }
}

fn row_from((id, at, who, operation, arguments, outcome, revision, request_id): Row) -> AuditRow {
    AuditRow {
        id,
        at,
        who,
        operation,
        arguments,
        outcome,
        revision,
        request_id,
    }
}

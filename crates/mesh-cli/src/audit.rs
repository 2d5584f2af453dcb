//! `mesh audit`: the audit trail, oldest first; and the row a command on
//! the controller's machine appends for the change it made there (as the
//! local OS user: no person asked over the bus).

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use mesh_store::{Actor, AuditEntry, AuditFilter, AuditRow, Outcome, Store};
use serde::Serialize;

use crate::authority::open_existing_store;
use crate::output::{self, ListFormat, print_json};
use crate::state::MeshArgs;

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only rows this recent (`30m`, `2h`, `7d`).
    #[arg(long, value_parser = crate::node::parse_ttl)]
    pub since: Option<Duration>,
    /// Only what this person asked for.
    #[arg(long, value_name = "NAME")]
    pub person: Option<String>,
    /// At most this many, the newest.
    #[arg(long, default_value_t = 100)]
    pub limit: i64,
    #[arg(long, value_enum, default_value_t = ListFormat::Text)]
    pub output: ListFormat,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

/// A row as `--output json` prints it.
#[derive(Debug, Serialize)]
struct Row {
    id: i64,
    at: i64,
    who: String,
    operation: String,
    arguments: serde_json::Value,
    outcome: String,
    revision: Option<i64>,
}

impl From<AuditRow> for Row {
    fn from(r: AuditRow) -> Row {
        Row {
            id: r.id,
            at: r.at,
            who: r.who,
            operation: r.operation,
            // Written by the store from a JSON value; text that does not
            // read is shown as the text it is.
            arguments: serde_json::from_str(&r.arguments)
                .unwrap_or(serde_json::Value::String(r.arguments)),
            outcome: r.outcome,
            revision: r.revision,
        }
    }
}

pub fn run(args: &AuditArgs) -> anyhow::Result<ExitCode> {
    if let Some(ctx) = args.mesh.remote()? {
        let request = mesh_core::operation::wire::AuditArgs {
            since: args
                .since
                .map(|d| mesh_store::now_ms() - i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            person: args
                .person
                .as_deref()
                .map(|p| {
                    mesh_core::names::Name::new(p)
                        .map_err(|e| anyhow::anyhow!("{p:?} is not a person name: {e}"))
                })
                .transpose()?,
            limit: Some(args.limit),
        };
        let rows: Vec<AuditRow> = crate::block_on(crate::remote::read_with(
            ctx,
            mesh_core::operation::Operation::Audit,
            serde_json::to_value(request)?,
        ))??;
        let rows: Vec<Row> = rows.into_iter().map(Row::from).collect();
        match args.output {
            ListFormat::Json => print_json(&rows)?,
            ListFormat::Text => print_rows(&rows)?,
        }
        return Ok(ExitCode::SUCCESS);
    }
    let filter = AuditFilter {
        since: args
            .since
            .map(|d| mesh_store::now_ms() - i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        who: args
            .person
            .as_ref()
            .map(|p| Actor::Person(p.clone()).written()),
        limit: Some(args.limit),
    };
    crate::block_on(async {
        let store = open_existing_store(&args.mesh.store_url()?).await?;
        let read = store.audit(&filter).await;
        store.close().await;
        let rows: Vec<Row> = read?.into_iter().map(Row::from).collect();
        match args.output {
            ListFormat::Json => print_json(&rows)?,
            ListFormat::Text => print_rows(&rows)?,
        }
        Ok(ExitCode::SUCCESS)
    })?
}

fn print_rows(rows: &[Row]) -> anyhow::Result<()> {
    let mut out = output::Stdout::lock();
    if rows.is_empty() {
        out.line("no change recorded")?;
        out.flush()?;
        return Ok(());
    }
    let now = mesh_store::now_ms();
    for r in rows {
        let ago = crate::node::humane(Duration::from_millis((now - r.at).max(0) as u64));
        let revision = r
            .revision
            .map(|v| format!(" (revision {v})"))
            .unwrap_or_default();
        out.line(format_args!(
            "{:>6}  {:>5} ago  {:<14} {:<18} {}  {}{revision}",
            r.id, ago, r.who, r.operation, r.arguments, r.outcome
        ))?;
    }
    out.flush()?;
    Ok(())
}

/// The OS user running this command: who a change made on the
/// controller's machine is recorded as.
pub fn local_user() -> String {
    // SAFETY: getpwuid returns a pointer into static storage or null; it
    // is read at once, on this thread, before any other call could
    // overwrite it.
    let name = unsafe {
        let pw = libc::getpwuid(libc::geteuid());
        (!pw.is_null() && !(*pw).pw_name.is_null()).then(|| {
            std::ffi::CStr::from_ptr((*pw).pw_name)
                .to_string_lossy()
                .into_owned()
        })
    };
    // SAFETY: geteuid has no preconditions.
    name.unwrap_or_else(|| format!("uid {}", unsafe { libc::geteuid() }))
}

/// Appends the row for a change made here by the local OS user, with the
/// records revision it produced.
pub async fn record_local(
    store: &Store,
    operation: impl std::fmt::Display,
    arguments: serde_json::Value,
) -> anyhow::Result<()> {
    let revision = store.records_revision().await?;
    store
        .append_audit(&AuditEntry {
            who: Actor::Local(local_user()),
            operation: operation.to_string(),
            arguments,
            outcome: Outcome::Done {
                revision: Some(revision),
            },
            request_id: None,
        })
        .await?;
    Ok(())
}

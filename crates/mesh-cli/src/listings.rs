//! `mesh modules` and `mesh reports NODE`: what runs where, as the hosts
//! last said, from the store (read-only). Every listing takes
//! `--output json`.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use mesh_core::names::Name;
use serde::Serialize;

use crate::authority::open_existing_store;
use crate::node::ListFormat;
use crate::output;
use crate::state::MeshArgs;

#[derive(Debug, Args)]
pub struct ModulesArgs {
    #[arg(long, value_enum, default_value_t = ListFormat::Text)]
    pub output: ListFormat,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

#[derive(Debug, Args)]
pub struct ReportsArgs {
    /// The node whose reports to show.
    pub node: String,
    /// How many, newest first.
    #[arg(long, default_value_t = 10)]
    pub limit: u32,
    #[arg(long, value_enum, default_value_t = ListFormat::Text)]
    pub output: ListFormat,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

/// One assignment and what its node's newest report says of it.
#[derive(Debug, Serialize)]
pub struct ModuleRow {
    pub module: String,
    pub node: String,
    /// `starting`, `running`, `failed`, `stopped`, or `unreported`.
    pub state: String,
    pub restarts: u32,
    pub reason: Option<String>,
    /// The declaration the report answers.
    pub sequence: Option<i64>,
}

#[derive(Debug, Serialize)]
pub struct ReportRow {
    pub id: i64,
    pub sequence: i64,
    pub received_at: i64,
    pub refused: Option<String>,
    pub modules: Vec<OutcomeRow>,
}

#[derive(Debug, Serialize)]
pub struct OutcomeRow {
    pub module: String,
    pub state: String,
    pub restarts: u32,
    pub reason: Option<String>,
}

fn outcome(o: &mesh_store::ModuleOutcome) -> OutcomeRow {
    let (state, reason) = match &o.state {
        mesh_store::ModuleState::Starting => ("starting", None),
        mesh_store::ModuleState::Running => ("running", None),
        mesh_store::ModuleState::Failed { reason } => ("failed", Some(reason.clone())),
        mesh_store::ModuleState::Stopped => ("stopped", None),
    };
    OutcomeRow {
        module: o.module.to_string(),
        state: state.into(),
        restarts: o.restarts,
        reason,
    }
}

pub fn run_modules(args: &ModulesArgs) -> anyhow::Result<ExitCode> {
    crate::block_on(async {
        let store = open_existing_store(&args.mesh.store_url()).await?;
        let read = async {
            let mut rows = Vec::new();
            for a in store.assignments().await? {
                let latest = store.latest_report(&a.node).await?;
                let o = latest
                    .as_ref()
                    .and_then(|r| r.report.outcomes.iter().find(|o| o.module == a.module));
                let row = o.map(outcome);
                rows.push(ModuleRow {
                    module: a.module.to_string(),
                    node: a.node.to_string(),
                    state: row
                        .as_ref()
                        .map_or("unreported".into(), |r| r.state.clone()),
                    restarts: row.as_ref().map_or(0, |r| r.restarts),
                    reason: row.and_then(|r| r.reason),
                    sequence: latest.map(|r| r.report.declaration_version),
                });
            }
            Ok::<_, mesh_store::StoreError>(rows)
        }
        .await;
        store.close().await;
        let rows = read?;
        match args.output {
            ListFormat::Json => print_json(&rows)?,
            ListFormat::Text => {
                let mut out = output::Stdout::lock();
                if rows.is_empty() {
                    out.line("nothing assigned; `mesh assign MODULE NODE` runs one")?;
                }
                for r in &rows {
                    out.line(format_args!(
                        "{:<24} {:<16} {:<10} restarts {:<3} {}",
                        r.module,
                        r.node,
                        r.state,
                        r.restarts,
                        r.reason.as_deref().unwrap_or("")
                    ))?;
                }
                out.flush()?;
            }
        }
        Ok(ExitCode::SUCCESS)
    })?
}

pub fn run_reports(args: &ReportsArgs) -> anyhow::Result<ExitCode> {
    let node =
        Name::new(&args.node).with_context(|| format!("{:?} is not a node name", args.node))?;
    crate::block_on(async {
        let store = open_existing_store(&args.mesh.store_url()).await?;
        let read = store.reports(&node, args.limit).await;
        store.close().await;
        let rows: Vec<ReportRow> = read?
            .into_iter()
            .map(|r| ReportRow {
                id: r.id,
                sequence: r.report.declaration_version,
                received_at: r.report.received_at,
                refused: r.report.refused.clone(),
                modules: r.report.outcomes.iter().map(outcome).collect(),
            })
            .collect();
        match args.output {
            ListFormat::Json => print_json(&rows)?,
            ListFormat::Text => {
                let mut out = output::Stdout::lock();
                if rows.is_empty() {
                    out.line(format_args!("no reports from {node}"))?;
                }
                for r in &rows {
                    match &r.refused {
                        Some(why) => out.line(format_args!(
                            "#{} declaration {}: refused: {why}",
                            r.id, r.sequence
                        ))?,
                        None => out.line(format_args!("#{} declaration {}", r.id, r.sequence))?,
                    }
                    for m in &r.modules {
                        out.line(format_args!(
                            "    {:<24} {:<10} restarts {:<3} {}",
                            m.module,
                            m.state,
                            m.restarts,
                            m.reason.as_deref().unwrap_or("")
                        ))?;
                    }
                }
                out.flush()?;
            }
        }
        Ok(ExitCode::SUCCESS)
    })?
}

fn print_json(rows: &impl Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(rows).context("writing JSON")?;
    output::print(&format!("{text}\n"))?;
    Ok(())
}

//! `mesh modules` and `mesh reports NODE`: what runs where, as the hosts
//! last said, from the store (read-only). Every listing takes
//! `--output json`.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use mesh_core::names::Name;
use mesh_state::views;

use crate::authority::open_existing_store;
use crate::output;
use crate::output::{ListFormat, print_json};
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

pub fn run_modules(args: &ModulesArgs) -> anyhow::Result<ExitCode> {
    crate::block_on(async {
        let rows: Vec<views::ModuleView> = if let Some(ctx) = args.mesh.remote()? {
            crate::remote::read(ctx, mesh_core::operation::Operation::Modules).await?
        } else {
            let store = open_existing_store(&args.mesh.store_url()?).await?;
            let read = views::modules(&store).await;
            store.close().await;
            read?
        };
        match args.output {
            ListFormat::Json => print_json(&rows)?,
            ListFormat::Text => print_modules(&rows)?,
        }
        Ok(ExitCode::SUCCESS)
    })?
}

/// The assignments as a table under a header, as `mesh nodes` prints.
fn print_modules(rows: &[views::ModuleView]) -> anyhow::Result<()> {
    let mut out = output::Stdout::lock();
    if rows.is_empty() {
        out.line("nothing assigned; `mesh assign MODULE NODE` runs one")?;
        out.flush()?;
        return Ok(());
    }
    let width = |head: &str, f: fn(&views::ModuleView) -> &str| {
        rows.iter()
            .map(|r| f(r).len())
            .max()
            .unwrap_or(0)
            .max(head.len())
    };
    let (m, n, s) = (
        width("MODULE", |r| &r.module),
        width("NODE", |r| &r.node),
        width("STATE", |r| &r.state),
    );
    let h = width("HEALTH", |r| r.health.as_deref().unwrap_or("-"));
    let v = width("VERSION", |r| r.version.as_deref().unwrap_or("-"));
    out.line(format_args!(
        "{:<m$}  {:<n$}  {:<s$}  {:<h$}  {:<v$}  {:<8}  REASON",
        "MODULE", "NODE", "STATE", "HEALTH", "VERSION", "RESTARTS"
    ))?;
    for r in rows {
        let line = format!(
            "{:<m$}  {:<n$}  {:<s$}  {:<h$}  {:<v$}  {:<8}  {}",
            r.module,
            r.node,
            r.state,
            r.health.as_deref().unwrap_or("-"),
            r.version.as_deref().unwrap_or("-"),
            r.restarts,
            r.reason.as_deref().unwrap_or("-")
        );
        out.line(line.trim_end())?;
    }
    out.flush()?;
    Ok(())
}

pub fn run_reports(args: &ReportsArgs) -> anyhow::Result<ExitCode> {
    let node =
        Name::new(&args.node).with_context(|| format!("{:?} is not a node name", args.node))?;
    crate::block_on(async {
        let store = open_existing_store(&args.mesh.store_url()?).await?;
        let read = views::reports(&store, &node, args.limit).await;
        store.close().await;
        let rows = read?;
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
                            "    {:<24} {:<10} {:<9} restarts {:<3} {}",
                            m.module,
                            m.state,
                            m.health.as_deref().unwrap_or("-"),
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

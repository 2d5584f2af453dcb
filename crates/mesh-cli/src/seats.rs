//! `mesh seats`: every declared seat and role of the registered catalogue —
//! scope, the work it accepts, what it emits — and who holds it on which
//! node, from the assignments.

use std::process::ExitCode;

use clap::Args;

use crate::output;
use crate::output::ListFormat;
use crate::state::MeshArgs;

#[derive(Debug, Args)]
pub struct SeatsArgs {
    #[arg(long, value_enum, default_value_t = ListFormat::Text)]
    pub output: ListFormat,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

fn or_dash(v: &[String]) -> String {
    if v.is_empty() {
        "-".into()
    } else {
        v.join(",")
    }
}

pub fn run(args: &SeatsArgs) -> anyhow::Result<ExitCode> {
    let rows =
        crate::authority::read_store(&args.mesh, async |s| mesh_state::views::seats(s).await)?;
    if args.output == ListFormat::Json {
        crate::output::print_json(&rows)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = output::Stdout::lock();
    let width = rows.iter().map(|r| r.seat.len()).max().unwrap_or(4).max(4);
    out.line(format_args!(
        "{:<width$}  {:<5}  {:<5}  {:<16}  {:<16}  HELD BY",
        "SEAT", "KIND", "SCOPE", "ACCEPTS", "EMITS"
    ))?;
    for r in &rows {
        let held: Vec<String> = r
            .holders
            .iter()
            .map(|h| format!("{} on {}", h.module, h.node))
            .collect();
        out.line(format_args!(
            "{:<width$}  {:<5}  {:<5}  {:<16}  {:<16}  {}",
            r.seat,
            r.kind,
            r.scope,
            or_dash(&r.accepts),
            or_dash(&r.emits),
            if held.is_empty() {
                "nobody".into()
            } else {
                held.join(", ")
            }
        ))?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

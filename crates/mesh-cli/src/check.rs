//! `mesh check [PATH]...`: parses every manifest found, checks them one by
//! one and as a catalogue, and prints what is wrong where.
//!
//! A PATH may be a manifest file, an aliases file (named `aliases.toml`), or a
//! directory: every `mesh.toml` below it is read (hidden directories and
//! `target/` skipped, symlinked directories not followed), and an
//! `aliases.toml` directly in it is read as the catalogue's seat renames.
//!
//! Exit status: 0 when nothing is refused (warnings allowed), 1 when any
//! diagnostic is an error, 2 when the paths cannot be read or hold no
//! manifest at all (checking nothing must not look like success).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use mesh_core::diagnostic;
use mesh_state::CatalogueCheck;

use crate::output::{self, Stdout};

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Manifests, aliases files, or directories to search for `mesh.toml`.
    #[arg(default_value = ".")]
    pub paths: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// `file:line:col: error[kind]: message`, the source line and a caret.
    Text,
    /// A JSON array of diagnostics.
    Json,
}

/// Runs `mesh check`, printing to stdout.
pub fn run(args: &CheckArgs) -> anyhow::Result<ExitCode> {
    let report = mesh_state::load(&args.paths)?;
    match args.format {
        Format::Json => {
            let mut json = diagnostic::render_json(&report.diagnostics);
            json.push('\n');
            output::print(&json)?
        }
        Format::Text => print_text(&report)?,
    }
    Ok(if report.errors() > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Prints each diagnostic with its source line and a caret (at most
/// [`diagnostic::MAX_PER_FILE`] per file, the rest counted), then a summary.
pub fn print_text(report: &CatalogueCheck) -> anyhow::Result<()> {
    let mut out = Stdout::lock();
    for text in report.rendered() {
        out.line(text)?;
    }
    out.line(format_args!(
        "checked {} manifest{}: {} error{}, {} warning{}",
        diagnostic::thousands(report.manifests),
        plural(report.manifests),
        diagnostic::thousands(report.errors()),
        plural(report.errors()),
        diagnostic::thousands(report.warnings()),
        plural(report.warnings()),
    ))?;
    Ok(out.flush()?)
}

pub fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

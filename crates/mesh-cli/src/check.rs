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

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use mesh_core::catalogue::{self, Aliases, Catalogue};
use mesh_core::diagnostic::{self, Diagnostic, Severity};
use mesh_core::manifest;

/// File name of a module manifest.
pub const MANIFEST_FILE: &str = "mesh.toml";
/// File name of a catalogue's seat aliases.
pub const ALIASES_FILE: &str = "aliases.toml";

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

/// What a check found.
#[derive(Debug)]
pub struct Report {
    pub manifests: usize,
    pub diagnostics: Vec<Diagnostic>,
    /// The text of every file read, by the path diagnostics name it with.
    pub sources: BTreeMap<String, String>,
    /// The manifests that parsed, indexed with the roles and aliases: what
    /// authority is derived from once the check is clean.
    pub catalogue: Catalogue,
}

impl Report {
    pub fn errors(&self) -> usize {
        self.count(Severity::Error)
    }

    pub fn warnings(&self) -> usize {
        self.count(Severity::Warning)
    }

    fn count(&self, s: Severity) -> usize {
        self.diagnostics.iter().filter(|d| d.severity == s).count()
    }
}

/// Runs `mesh check`, printing to stdout.
pub fn run(args: &CheckArgs) -> anyhow::Result<ExitCode> {
    let report = check_paths(&args.paths)?;
    match args.format {
        Format::Json => writeln!(
            std::io::stdout().lock(),
            "{}",
            diagnostic::render_json(&report.diagnostics)
        )?,
        Format::Text => print_text(&report)?,
    }
    Ok(if report.errors() > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Prints each diagnostic with its source line and a caret, then a summary.
pub fn print_text(report: &Report) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    for d in &report.diagnostics {
        let source = report.sources.get(d.file()).map(String::as_str);
        writeln!(out, "{}", diagnostic::render_text(d, source))?;
    }
    writeln!(
        out,
        "checked {} manifest{}: {} error{}, {} warning{}",
        report.manifests,
        plural(report.manifests),
        report.errors(),
        plural(report.errors()),
        report.warnings(),
        plural(report.warnings()),
    )?;
    Ok(())
}

pub fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Reads and checks everything under `paths`.
pub fn check_paths(paths: &[PathBuf]) -> anyhow::Result<Report> {
    let mut manifest_files = Vec::new();
    let mut alias_files = Vec::new();
    for p in paths {
        discover(p, &mut manifest_files, &mut alias_files)?;
    }
    manifest_files.sort();
    manifest_files.dedup();
    alias_files.sort();
    alias_files.dedup();
    if manifest_files.is_empty() {
        let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        bail!("no {MANIFEST_FILE} found in {}", shown.join(", "));
    }

    let mut diagnostics = Vec::new();
    let mut sources = BTreeMap::new();
    let mut aliases = Aliases::new();
    for f in &alias_files {
        let (name, text) = read(f)?;
        match Aliases::parse(&name, &text) {
            Ok(a) => aliases.extend(a),
            Err(d) => diagnostics.extend(d),
        }
        sources.insert(name, text);
    }
    let mut manifests = Vec::new();
    for f in &manifest_files {
        let bytes = fs::read(f).with_context(|| format!("reading {}", f.display()))?;
        let name = f.display().to_string();
        match manifest::parse_bytes(&name, &bytes) {
            Ok(m) => manifests.push(m),
            Err(d) => diagnostics.extend(d),
        }
        sources.insert(name, String::from_utf8_lossy(&bytes).into_owned());
    }
    let catalogue = Catalogue::build(manifests, aliases);
    diagnostics.extend(catalogue::check(&catalogue));
    diagnostic::sort(&mut diagnostics);
    Ok(Report {
        manifests: manifest_files.len(),
        diagnostics,
        sources,
        catalogue,
    })
}

fn read(path: &Path) -> anyhow::Result<(String, String)> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok((path.display().to_string(), text))
}

fn discover(
    path: &Path,
    manifests: &mut Vec<PathBuf>,
    aliases: &mut Vec<PathBuf>,
) -> anyhow::Result<()> {
    let meta = fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if meta.is_file() {
        if path.file_name().is_some_and(|n| n == ALIASES_FILE) {
            aliases.push(path.to_path_buf());
        } else {
            manifests.push(path.to_path_buf());
        }
        return Ok(());
    }
    let top_aliases = path.join(ALIASES_FILE);
    if top_aliases.is_file() {
        aliases.push(top_aliases);
    }
    walk(path, manifests)
}

fn walk(dir: &Path, manifests: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let mut entries = fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("reading {}", dir.display()))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name();
        let path = e.path();
        // file_type does not follow symlinks, so a link cycle cannot recurse.
        let ty = e.file_type()?;
        if ty.is_dir() {
            let hidden = name.to_string_lossy().starts_with('.');
            if !hidden && name != "target" {
                walk(&path, manifests)?;
            }
        } else if name == MANIFEST_FILE && path.is_file() {
            manifests.push(path);
        }
    }
    Ok(())
}

//! Reading a catalogue from disk: every `mesh.toml` under the given paths,
//! and the seat renames of an `aliases.toml`, parsed and checked one by one
//! and together.
//!
//! A path may be a manifest file, an aliases file (named `aliases.toml`), or
//! a directory: every `mesh.toml` below it is read (hidden directories and
//! `target/` skipped, symlinked directories not followed), and an
//! `aliases.toml` directly in it is read as the catalogue's seat renames.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use mesh_core::catalogue::{self, Aliases, Catalogue};
use mesh_core::diagnostic::{self, Diagnostic, Severity};
use mesh_core::manifest;

/// File name of a module manifest.
pub const MANIFEST_FILE: &str = "mesh.toml";
/// File name of a catalogue's seat aliases.
pub const ALIASES_FILE: &str = "aliases.toml";

/// What reading and checking a catalogue found.
#[derive(Debug)]
pub struct CatalogueCheck {
    pub manifests: usize,
    pub diagnostics: Vec<Diagnostic>,
    /// The text of every file read, by the path diagnostics name it with.
    pub sources: BTreeMap<String, String>,
    /// The manifests that parsed, indexed with the roles and aliases: what
    /// authority is derived from once the check is clean.
    pub catalogue: Catalogue,
}

impl CatalogueCheck {
    pub fn errors(&self) -> usize {
        self.count(Severity::Error)
    }

    pub fn warnings(&self) -> usize {
        self.count(Severity::Warning)
    }

    /// Each diagnostic rendered where it is, with its source's lines (at
    /// most [`diagnostic::MAX_PER_FILE`] a file, then how many more).
    pub fn rendered(&self) -> Vec<String> {
        diagnostic::cap_per_file(&self.diagnostics, diagnostic::MAX_PER_FILE)
            .into_iter()
            .map(|entry| match entry {
                diagnostic::Entry::Shown(d) => {
                    let source = self.sources.get(d.file()).map(String::as_str);
                    diagnostic::render_text(d, source)
                }
                diagnostic::Entry::More(more) => format!("{more}\n"),
            })
            .collect()
    }

    fn count(&self, s: Severity) -> usize {
        self.diagnostics.iter().filter(|d| d.severity == s).count()
    }
}

/// Why a catalogue could not be read at all (as opposed to read and found
/// wanting, which is what [`CatalogueCheck::diagnostics`] says).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("reading {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Checking nothing must not look like success.
    #[error("no {MANIFEST_FILE} found in {}", paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    NoManifest { paths: Vec<PathBuf> },
}

fn read_err(path: &Path) -> impl FnOnce(std::io::Error) -> LoadError + '_ {
    move |source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    }
}

/// Reads and checks everything under `paths`.
pub fn load(paths: &[PathBuf]) -> Result<CatalogueCheck, LoadError> {
    let mut report = read(paths)?;
    report
        .diagnostics
        .extend(catalogue::check(&report.catalogue));
    diagnostic::sort(&mut report.diagnostics);
    Ok(report)
}

/// Reads everything under `paths`, each file parsed on its own; the
/// catalogue-wide checks are left to the caller (a registration runs them
/// with the registered catalogue in view: a manifest may hold a seat a
/// registered one declares).
pub fn read(paths: &[PathBuf]) -> Result<CatalogueCheck, LoadError> {
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
        return Err(LoadError::NoManifest {
            paths: paths.to_vec(),
        });
    }

    let mut alias_texts = Vec::new();
    for f in &alias_files {
        let text = fs::read_to_string(f).map_err(read_err(f))?;
        alias_texts.push((f.display().to_string(), text));
    }
    let mut manifest_texts = Vec::new();
    for f in &manifest_files {
        let bytes = fs::read(f).map_err(read_err(f))?;
        manifest_texts.push((f.display().to_string(), bytes));
    }
    Ok(from_texts(&manifest_texts, &alias_texts))
}

/// Manifests and alias files given as texts (each by the name diagnostics
/// give it), parsed one by one as [`read`] parses files: what the
/// controller registers for a person who read them on their own machine.
pub fn from_texts(manifests: &[(String, Vec<u8>)], aliases: &[(String, String)]) -> CatalogueCheck {
    let mut diagnostics = Vec::new();
    let mut sources = BTreeMap::new();
    let mut renames = Aliases::new();
    for (name, text) in aliases {
        match Aliases::parse(name, text) {
            Ok(a) => renames.extend(a),
            Err(d) => diagnostics.extend(d),
        }
        sources.insert(name.clone(), text.clone());
    }
    let mut parsed = Vec::new();
    for (name, bytes) in manifests {
        match manifest::parse_bytes(name, bytes) {
            Ok(m) => parsed.push(m),
            Err(d) => diagnostics.extend(d),
        }
        sources.insert(name.clone(), String::from_utf8_lossy(bytes).into_owned());
    }
    let catalogue = Catalogue::build(parsed, renames);
    diagnostic::sort(&mut diagnostics);
    CatalogueCheck {
        manifests: manifests.len(),
        diagnostics,
        sources,
        catalogue,
    }
}

fn discover(
    path: &Path,
    manifests: &mut Vec<PathBuf>,
    aliases: &mut Vec<PathBuf>,
) -> Result<(), LoadError> {
    let meta = fs::metadata(path).map_err(read_err(path))?;
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

fn walk(dir: &Path, manifests: &mut Vec<PathBuf>) -> Result<(), LoadError> {
    let mut entries = fs::read_dir(dir)
        .map_err(read_err(dir))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read_err(dir))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name();
        let path = e.path();
        // file_type does not follow symlinks, so a link cycle cannot recurse.
        let ty = e.file_type().map_err(read_err(&path))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_catalogue_loads_clean() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/catalogue");
        let c = load(&[dir]).unwrap();
        assert_eq!(c.errors(), 0, "{:?}", c.diagnostics);
        assert!(c.manifests >= 8, "{}", c.manifests);
        assert_eq!(c.catalogue.manifests().len(), c.manifests);
    }

    #[test]
    fn nothing_to_check_is_an_error_not_success() {
        let dir = tempfile::tempdir().unwrap();
        let e = load(&[dir.path().to_path_buf()]).unwrap_err();
        assert!(matches!(e, LoadError::NoManifest { .. }), "{e}");
        assert!(e.to_string().starts_with("no mesh.toml found in "), "{e}");
        let missing = dir.path().join("nope");
        assert!(matches!(
            load(&[missing]).unwrap_err(),
            LoadError::Read { .. }
        ));
    }
}

//! One fixture per refusal, under `tests/fixtures/refusals/`:
//!
//! - `<case>.toml`: a single manifest, parsed alone (its errors, or the
//!   warnings of `manifest::lint` when it parses);
//! - `<case>/`: a catalogue: every `*.toml` in it is a manifest, except
//!   `aliases.toml`; parsed, built into a catalogue with the mesh's roles,
//!   and checked.
//!
//! Each file states what it must produce, one line per diagnostic:
//! `# expect: <kind> <line> [<text>]`. The diagnostics found must be exactly
//! those — kind and line — so a guard that stops firing, or fires somewhere
//! else, turns this red. The optional text must appear in the diagnostic's
//! message or help: it pins a specific guard where a more general one would
//! otherwise report the same kind on the same line.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use mesh_core::catalogue::{self, Aliases, Catalogue};
use mesh_core::diagnostic::{Diagnostic, Kind, render_text};
use mesh_core::manifest;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/refusals")
}

/// (file name, kind, line)
type Found = (String, Kind, usize);

/// An expectation: where, and text the message or help must contain.
struct Expect {
    at: Found,
    text: Option<String>,
}

fn file_name(p: &str) -> String {
    Path::new(p)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn expectations(path: &Path) -> Vec<Expect> {
    let bytes = fs::read(path).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    let name = file_name(&path.to_string_lossy());
    text.lines()
        .filter_map(|l| l.strip_prefix("# expect:"))
        .map(|rest| {
            let mut it = rest.trim().splitn(3, ' ');
            let kind = it
                .next()
                .and_then(Kind::from_code)
                .unwrap_or_else(|| panic!("{}: bad expectation `{rest}`", path.display()));
            let line = it
                .next()
                .and_then(|l| l.parse().ok())
                .unwrap_or_else(|| panic!("{}: bad expectation `{rest}`", path.display()));
            let text = it
                .next()
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty());
            Expect {
                at: (name.clone(), kind, line),
                text,
            }
        })
        .collect()
}

fn toml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

/// Runs a fixture; returns what was found, and the rendered diagnostics for
/// a failure message.
fn run(path: &Path) -> (Vec<Diagnostic>, String) {
    let mut diags = Vec::new();
    let mut sources = Vec::new();
    let mut manifests = Vec::new();
    let mut aliases = Aliases::new();
    let files = if path.is_dir() {
        toml_files(path)
    } else {
        vec![path.to_path_buf()]
    };
    for f in &files {
        let bytes = fs::read(f).unwrap();
        let name = f.to_string_lossy().into_owned();
        sources.push((name.clone(), String::from_utf8_lossy(&bytes).into_owned()));
        if f.file_name().is_some_and(|n| n == "aliases.toml") {
            match Aliases::parse(&name, std::str::from_utf8(&bytes).unwrap()) {
                Ok(a) => aliases.extend(a),
                Err(d) => diags.extend(d),
            }
            continue;
        }
        match manifest::parse_bytes(&name, &bytes) {
            Ok(m) => manifests.push(m),
            Err(d) => diags.extend(d),
        }
    }
    if path.is_dir() {
        diags.extend(catalogue::check(&Catalogue::build(manifests, aliases)));
    } else {
        diags.extend(manifests.iter().flat_map(manifest::lint));
    }
    let rendered = diags
        .iter()
        .map(|d| {
            let src = sources
                .iter()
                .find(|(n, _)| n == d.file())
                .map(|(_, s)| s.as_str());
            render_text(d, src)
        })
        .collect::<Vec<_>>()
        .join("");
    (diags, rendered)
}

fn cases() -> Vec<PathBuf> {
    let mut cases: Vec<PathBuf> = fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() || p.extension().is_some_and(|e| e == "toml"))
        .collect();
    cases.sort();
    cases
}

#[test]
fn every_refusal_fixture_reports_its_kind_at_its_line() {
    let mut failures = Vec::new();
    let cases = cases();
    for case in &cases {
        let files = if case.is_dir() {
            toml_files(case)
        } else {
            vec![case.clone()]
        };
        let expects: Vec<Expect> = files.iter().flat_map(|f| expectations(f)).collect();
        let mut expected: Vec<Found> = expects.iter().map(|e| e.at.clone()).collect();
        assert!(
            !expected.is_empty(),
            "{}: a fixture must state what it expects",
            case.display()
        );
        let (diags, rendered) = run(case);
        let mut found: Vec<Found> = diags
            .iter()
            .map(|d| (file_name(d.file()), d.kind, d.line()))
            .collect();
        expected.sort();
        found.sort();
        // Every diagnostic has a real location.
        for d in &diags {
            assert!(d.location.line >= 1 && d.location.col >= 1, "{d:?}");
        }
        if expected != found {
            failures.push(format!(
                "{}:\n  expected {expected:?}\n  found    {found:?}\n{rendered}",
                case.display()
            ));
            continue;
        }
        for e in &expects {
            let Some(text) = &e.text else { continue };
            let said = diags.iter().any(|d| {
                (file_name(d.file()), d.kind, d.line()) == e.at
                    && (d.message.contains(text.as_str())
                        || d.help.as_deref().is_some_and(|h| h.contains(text.as_str())))
            });
            if !said {
                failures.push(format!(
                    "{}: {:?} does not say `{text}`\n{rendered}",
                    case.display(),
                    e.at
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} fixtures failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    assert!(cases.len() >= 15, "only {} fixtures", cases.len());
    eprintln!("{} refusal fixtures passed", cases.len());
}

#[test]
fn every_kind_has_a_fixture() {
    let mut covered = BTreeSet::new();
    for case in cases() {
        let files = if case.is_dir() {
            toml_files(&case)
        } else {
            vec![case]
        };
        for f in files {
            covered.extend(expectations(&f).into_iter().map(|e| e.at.1));
        }
    }
    let missing: Vec<&str> = Kind::ALL
        .iter()
        .filter(|k| !covered.contains(k))
        .map(|k| k.code())
        .collect();
    assert!(missing.is_empty(), "kinds without a fixture: {missing:?}");
}

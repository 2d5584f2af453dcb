//! The parser and the catalogue check on hostile input: arbitrary bytes,
//! mutations of real manifests, and structured TOML built from the manifest's
//! own vocabulary. Properties: no panic; a refusal carries at least one
//! error; every diagnostic has a location inside the file (line ≥ 1, col ≥ 1)
//! and renders.
//!
//! Case counts are explicit and each test prints how many cases ran
//! (`cargo test -p mesh-core --test parser_props -- --nocapture`).

use std::sync::atomic::{AtomicUsize, Ordering};

use mesh_core::catalogue::{self, Aliases, Catalogue};
use mesh_core::diagnostic::{Diagnostic, render_json, render_text};
use mesh_core::manifest;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

const CASES: u32 = 5_000;

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: CASES,
        // No regression files written into the source tree.
        failure_persistence: None,
        ..Config::default()
    })
}

fn assert_located(text: &str, diags: &[Diagnostic]) -> Result<(), TestCaseError> {
    let lines = text.split('\n').count();
    for d in diags {
        let l = &d.location;
        prop_assert!(
            l.line >= 1 && l.line <= lines,
            "line {} of {lines}: {d:?}",
            l.line
        );
        prop_assert!(l.col >= 1, "{d:?}");
        prop_assert!(!l.file.is_empty(), "{d:?}");
        let rendered = render_text(d, Some(text));
        let head = format!("{}:{}:{}: ", l.file, l.line, l.col);
        prop_assert!(rendered.starts_with(&head), "{rendered}");
    }
    let _ = render_json(diags);
    Ok(())
}

/// Parses, and when that succeeds runs the catalogue check over the result.
fn check_text(text: &str) -> Result<(), TestCaseError> {
    match manifest::parse("fuzz/mesh.toml", text) {
        Ok(m) => {
            let cat = Catalogue::build(vec![m], Aliases::new());
            assert_located(text, &catalogue::check(&cat))
        }
        Err(diags) => {
            prop_assert!(
                diags.iter().any(Diagnostic::is_error),
                "refused without an error"
            );
            assert_located(text, &diags)
        }
    }
}

fn run<S: Strategy>(name: &str, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    let ran = AtomicUsize::new(0);
    let result = runner().run(&strategy, |v| {
        ran.fetch_add(1, Ordering::Relaxed);
        test(v)
    });
    let ran = ran.load(Ordering::Relaxed);
    eprintln!("{name}: {ran} cases ran");
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
    assert!(ran >= CASES as usize, "{name}: only {ran} cases ran");
}

#[test]
fn arbitrary_bytes_never_panic_and_every_error_is_located() {
    run(
        "arbitrary bytes",
        proptest::collection::vec(any::<u8>(), 0..600),
        |bytes| {
            // As bytes (the UTF-8 check) and as lossy text (the parser).
            if let Err(d) = manifest::parse_bytes("fuzz/mesh.toml", &bytes) {
                assert_located(&String::from_utf8_lossy(&bytes), &d)?;
            }
            check_text(&String::from_utf8_lossy(&bytes))?;
            let text = String::from_utf8_lossy(&bytes);
            if let Err(d) = Aliases::parse("fuzz/aliases.toml", &text) {
                assert_located(&text, &d)?;
            }
            Ok(())
        },
    );
}

const SEED: &str = include_str!("../../../examples/catalogue/audit-log/mesh.toml");

#[test]
fn mutated_manifests_never_panic_and_every_error_is_located() {
    // Random edits of a real manifest reach far deeper than random bytes.
    let edit = (any::<prop::sample::Index>(), 0u8..3, any::<char>());
    let outcomes = outcomes();
    run(
        "mutated manifests",
        proptest::collection::vec(edit, 1..8),
        |edits| {
            let mut chars: Vec<char> = SEED.chars().collect();
            for (at, op, c) in edits {
                if chars.is_empty() {
                    break;
                }
                let i = at.index(chars.len());
                match op {
                    0 => chars[i] = c,
                    1 => chars.insert(i, c),
                    _ => {
                        chars.remove(i);
                    }
                }
            }
            let text: String = chars.into_iter().collect();
            outcomes[outcome(&text)].fetch_add(1, Ordering::Relaxed);
            check_text(&text)
        },
    );
    report("mutated manifests", &outcomes);
}

/// 0: parsed, 1: refused as TOML, 2: refused by a manifest rule.
fn outcome(text: &str) -> usize {
    match manifest::parse("fuzz/mesh.toml", text) {
        Ok(_) => 0,
        Err(d)
            if d.iter()
                .all(|d| d.kind == mesh_core::diagnostic::Kind::TomlSyntax) =>
        {
            1
        }
        Err(_) => 2,
    }
}

/// Prints how deep the cases got. A generator that only ever produced
/// syntax errors would test nothing past the TOML parser.
fn report(name: &str, outcomes: &[AtomicUsize; 3]) {
    let [parsed, syntax, rules] = [0, 1, 2].map(|i| outcomes[i].load(Ordering::Relaxed));
    eprintln!(
        "{name}: {parsed} parsed, {syntax} refused as TOML, {rules} refused by a manifest rule"
    );
    assert!(
        parsed > 0 && rules > 0,
        "{name}: the generator no longer reaches the manifest rules"
    );
}

fn outcomes() -> [AtomicUsize; 3] {
    [
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    ]
}

/// Strings from the manifest's vocabulary and its edge cases.
fn tricky() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "audit-log",
            "git-server",
            "git",
            "git.pushed",
            "audit-log.written",
            "seat:git.pushed",
            "seat:mesh-build-machine.built",
            "seat:mesh-build-machine.finished",
            "mesh-build-machine.built",
            "seat:git.**",
            "git.*",
            "a.**.b",
            "*.x",
            "seat:",
            "seat:.",
            ".",
            "..",
            "${seat:git:22}",
            "${seat:mesh-store:5432}",
            "${secret:k}",
            "${file:data}",
            "${file:retention}",
            "x ${",
            "$${x}",
            "${}",
            "${seat::}",
            "",
            "é",
            "mesh.mod.a.event.b",
            "bus-users",
            "mesh-broker",
            "node",
            "mesh",
            "process",
            "../x",
            "/abs",
            "C:\\x",
        ])
        .prop_map(str::to_string),
        "[ -~]{0,16}",
        "\\PC{0,8}",
    ]
}

fn quoted(s: String, literal: bool) -> String {
    if literal && !s.contains('\'') && !s.chars().any(char::is_control) {
        return format!("'{s}'");
    }
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "name",
            "description",
            "command",
            "env",
            "driver",
            "secrets-in-environment",
            "artifacts",
            "scope",
            "protocol",
            "accepts",
            "emits",
            "tools",
            "seats",
            "consumes",
            "serves",
            "uses",
            "path",
            "comand",
            "DATABASE_URL",
        ])
        .prop_map(str::to_string),
        "[a-zA-Z_-]{1,8}",
    ]
}

fn value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        4 => (tricky(), any::<bool>()).prop_map(|(s, l)| quoted(s, l)),
        1 => any::<i64>().prop_map(|i| i.to_string()),
        1 => any::<bool>().prop_map(|b| b.to_string()),
        1 => Just("1979-05-27T07:32:00Z".to_string()),
        1 => Just("3.5".to_string()),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            3 => proptest::collection::vec(inner.clone(), 0..5)
                .prop_map(|v| format!("[{}]", v.join(", "))),
            1 => proptest::collection::vec((key(), inner), 0..3).prop_map(|kv| {
                let body: Vec<String> = kv.into_iter().map(|(k, v)| format!("{k} = {v}")).collect();
                format!("{{ {} }}", body.join(", "))
            }),
        ]
    })
}

const HEADERS: &[&str] = &[
    "[run]",
    "[build]",
    "[[seat]]",
    "[holds]",
    "[events]",
    "[tools]",
    "[uses]",
    "[[file]]",
    "[run.env]",
    "[extra]",
    "[[module]]",
    "[[seat]]",
    "[[file]]",
];

fn body() -> impl Strategy<Value = String> {
    // Distinct keys, so most documents are valid TOML and reach the rules.
    proptest::collection::btree_map(key(), value(), 0..6).prop_map(|kv| {
        kv.into_iter()
            .map(|(k, v)| format!("{k} = {v}\n"))
            .collect::<String>()
    })
}

fn sections() -> impl Strategy<Value = String> {
    // Each header at most once (bar the arrays of tables, listed twice).
    prop::sample::subsequence(HEADERS.to_vec(), 0..HEADERS.len())
        .prop_flat_map(|headers| {
            let n = headers.len();
            (Just(headers), proptest::collection::vec(body(), n))
        })
        .prop_map(|(headers, bodies)| {
            headers
                .iter()
                .zip(bodies)
                .map(|(h, b)| format!("{h}\n{b}"))
                .collect::<String>()
        })
}

#[test]
fn structured_toml_never_panics_and_every_error_is_located() {
    let module = prop_oneof![
        3 => tricky().prop_map(|n| format!("[module]\nname = {}\n", quoted(n, false))),
        1 => Just(String::new()),
    ];
    let outcomes = outcomes();
    run(
        "structured toml",
        (module, sections()),
        |(module, sections)| {
            let text = format!("{module}{sections}");
            outcomes[outcome(&text)].fetch_add(1, Ordering::Relaxed);
            check_text(&text)
        },
    );
    report("structured toml", &outcomes);
}

const POOL: &[&str] = &[
    "a",
    "b",
    "git",
    "git-server",
    "artifacts",
    "artifact-store",
    "mesh-broker",
    "mesh-build-machine",
];
const EVENTS: &[&str] = &["pushed", "built", "stored", "x"];

fn subset(items: &'static [&'static str]) -> impl Strategy<Value = Vec<&'static str>> {
    prop::sample::subsequence(items.to_vec(), 0..=items.len().min(3))
}

fn list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("\"{s}\"")).collect();
    format!("[{}]", quoted.join(", "))
}

fn strs(items: Vec<&str>) -> Vec<String> {
    items.into_iter().map(str::to_string).collect()
}

/// A well-formed manifest over a small shared vocabulary, so that manifests
/// in one catalogue refer to each other, collide, and hit every catalogue rule.
fn catalogue_manifest() -> impl Strategy<Value = String> {
    let seat = (
        prop::sample::select(POOL),
        subset(EVENTS),
        subset(EVENTS),
        subset(EVENTS),
    );
    let reference = (
        any::<bool>(),
        prop::sample::select(POOL),
        prop::sample::select(vec!["pushed", "built", "stored", "x", "*", "**"]),
    )
        .prop_map(|(seat, n, e)| format!("{}{n}.{e}", if seat { "seat:" } else { "" }));
    (
        prop::sample::select(POOL),
        proptest::collection::vec(seat, 0..3),
        subset(POOL),
        subset(EVENTS),
        proptest::collection::btree_set(reference.clone(), 0..4),
        subset(EVENTS),
        proptest::collection::btree_set(
            reference.prop_filter("tools take no wildcards", |r| !r.ends_with('*')),
            0..3,
        ),
        subset(POOL),
        any::<bool>(),
    )
        .prop_map(
            |(name, seats, holds, emits, consumes, serves, uses, uses_seats, users_file)| {
                let mut t = format!("[module]\nname = \"{name}\"\n");
                for (s, accepts, emits, tools) in seats {
                    t += &format!(
                        "[[seat]]\nname = \"{s}\"\nscope = \"mesh\"\nprotocol = \"\"\naccepts = {}\nemits = {}\ntools = {}\n",
                        list(&strs(accepts)),
                        list(&strs(emits)),
                        list(&strs(tools))
                    );
                }
                let consumes: Vec<String> = consumes.into_iter().collect();
                let uses: Vec<String> = uses.into_iter().collect();
                t += &format!("[holds]\nseats = {}\n", list(&strs(holds)));
                t += &format!(
                    "[events]\nemits = {}\nconsumes = {}\n",
                    list(&strs(emits)),
                    list(&consumes)
                );
                t += &format!(
                    "[tools]\nserves = {}\nuses = {}\n",
                    list(&strs(serves)),
                    list(&uses)
                );
                t += &format!("[uses]\nseats = {}\n", list(&strs(uses_seats)));
                if users_file {
                    t += "[[file]]\nname = \"bus-users\"\npath = \"accounts.conf\"\n";
                }
                t
            },
        )
}

#[test]
fn generated_catalogues_never_panic_and_check_deterministically() {
    let aliases = proptest::collection::btree_map(
        prop::sample::select(POOL),
        prop::sample::select(POOL),
        0..4,
    );
    let checked = AtomicUsize::new(0);
    run(
        "generated catalogues",
        (
            proptest::collection::vec(catalogue_manifest(), 1..6),
            aliases,
        ),
        |(texts, aliases)| {
            let alias_text: String = std::iter::once("[seats]\n".to_string())
                .chain(aliases.iter().map(|(o, n)| format!("\"{o}\" = \"{n}\"\n")))
                .collect();
            let parse_aliases = || {
                Aliases::parse("aliases.toml", &alias_text)
                    .map_err(|d| TestCaseError::fail(format!("{d:?}")))
            };
            let mut manifests = Vec::new();
            for (i, text) in texts.iter().enumerate() {
                match manifest::parse(&format!("m{i}/mesh.toml"), text) {
                    Ok(m) => manifests.push(m),
                    Err(d) => assert_located(text, &d)?,
                }
            }
            let cat = Catalogue::build(manifests.clone(), parse_aliases()?);
            let diags = catalogue::check(&cat);
            for d in &diags {
                let text = texts
                    .iter()
                    .enumerate()
                    .find(|(i, _)| d.file() == format!("m{i}/mesh.toml"))
                    .map(|(_, t)| t.as_str())
                    .unwrap_or(&alias_text);
                assert_located(text, std::slice::from_ref(d))?;
            }
            // Same records, any order: same diagnostics.
            manifests.reverse();
            let again = catalogue::check(&Catalogue::build(manifests, parse_aliases()?));
            prop_assert_eq!(&diags, &again);
            checked.fetch_add(1, Ordering::Relaxed);
            Ok(())
        },
    );
    eprintln!(
        "generated catalogues: {} catalogues checked",
        checked.load(Ordering::Relaxed)
    );
}

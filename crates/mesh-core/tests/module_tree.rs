//! mesh-core's top-level modules form a tree (no import circle): a module
//! that reaches back into one that uses it cannot be understood, tested or
//! moved on its own, and circles grow silently (`artifact` → `manifest` →
//! `artifact` did).
//!
//! Read from the source: every `crate::<module>` path (also inside
//! `use crate::{a, b::C}`) outside comments and test code is an edge from the
//! file's top-level module to `<module>`. Test code may reach anywhere (a
//! test composes several modules), so test files and `#[cfg(test)] mod`
//! bodies are not read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// module → (module it uses → the first file that does).
type Graph = BTreeMap<String, BTreeMap<String, String>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn is_test_file(relative: &Path) -> bool {
    let stem = relative.file_stem().unwrap().to_string_lossy();
    stem == "tests"
        || stem.ends_with("_tests")
        || stem == "testing"
        || relative.components().any(|c| c.as_os_str() == "tests")
}

/// The code of a file: comments dropped, a trailing `#[cfg(test)] mod` cut.
fn code(source: &str) -> String {
    let mut kept = Vec::new();
    let mut lines = source.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            break;
        }
        if !trimmed.starts_with("//") {
            kept.push(line.split(" //").next().unwrap());
        }
    }
    kept.join("\n")
}

fn identifier(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The top-level modules a piece of code names through `crate::`.
fn used_modules(code: &str) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let preceded_by_word = code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if preceded_by_word {
            continue; // `mesh_core::…`, `other_crate::…`
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a::X, b}`: the first identifier of each top-level item.
            let (mut depth, mut item_start) = (0usize, true);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && !c.is_whitespace() => {
                        used.insert(identifier(&group[i..]).to_string());
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            used.insert(identifier(rest).to_string());
        }
    }
    used.retain(|m| !m.is_empty());
    used
}

fn graph_of(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut graph = Graph::new();
    for file in files {
        let relative = file.strip_prefix(src).unwrap();
        if relative == Path::new("lib.rs") || is_test_file(relative) {
            continue;
        }
        let first = relative.components().next().unwrap().as_os_str();
        let module = Path::new(first).file_stem().unwrap().to_string_lossy();
        let source = std::fs::read_to_string(&file).unwrap();
        for used in used_modules(&code(&source)) {
            if used != module {
                graph
                    .entry(module.to_string())
                    .or_default()
                    .entry(used)
                    .or_insert_with(|| relative.display().to_string());
            }
        }
    }
    graph
}

/// One circle, as the modules along it (the first repeated at the end).
fn a_circle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        module: &str,
        graph: &Graph,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|m| m == module) {
            let mut circle = path[at..].to_vec();
            circle.push(module.to_string());
            return Some(circle);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_string());
        for next in graph.get(module).into_iter().flat_map(|uses| uses.keys()) {
            if let Some(circle) = visit(next, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(module.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
}

fn describe(circle: &[String], graph: &Graph) -> String {
    circle
        .windows(2)
        .map(|pair| format!("{} → {} ({})", pair[0], pair[1], graph[&pair[0]][&pair[1]]))
        .collect::<Vec<_>>()
        .join(", ")
}

#[test]
fn mesh_cores_modules_form_a_tree() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = graph_of(&src);
    assert!(
        graph
            .get("artifact")
            .is_some_and(|u| u.contains_key("manifest")),
        "the reader no longer sees `artifact` using `manifest`: {graph:?}"
    );
    if let Some(circle) = a_circle(&graph) {
        panic!(
            "mesh-core's modules import each other in a circle: {}; move the shared piece \
             into a module both can use",
            describe(&circle, &graph)
        );
    }
}

#[test]
fn the_reader_sees_grouped_paths_and_skips_comments_and_tests() {
    let source = "use crate::{names::Name, digest};\n\
                  // crate::comment\n\
                  let x = crate::placeholders::Placeholder::Secret; // crate::trailing\n\
                  let y = mesh_core::subjects::x;\n\
                  #[cfg(test)]\n\
                  mod tests { use crate::testing; }\n";
    let used: Vec<_> = used_modules(&code(source)).into_iter().collect();
    assert_eq!(used, ["digest", "names", "placeholders"]);
}

#[test]
fn a_circle_is_found_and_named_with_its_files() {
    let mut graph = Graph::new();
    for (from, to, file) in [
        ("artifact", "manifest", "artifact.rs"),
        ("manifest", "names", "manifest.rs"),
        ("manifest", "artifact", "manifest/run_section.rs"),
    ] {
        graph
            .entry(from.to_string())
            .or_default()
            .insert(to.to_string(), file.to_string());
    }
    let circle = a_circle(&graph).expect("artifact → manifest → artifact");
    assert_eq!(
        describe(&circle, &graph),
        "artifact → manifest (artifact.rs), manifest → artifact (manifest/run_section.rs)"
    );
    graph.get_mut("manifest").unwrap().remove("artifact");
    assert_eq!(a_circle(&graph), None);
}

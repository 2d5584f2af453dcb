//! The catalogue as a graph (`mesh catalogue graph`, the dashboard): modules
//! and seats as nodes; who holds and uses which seat, who consumes whose
//! events and who calls whose tools as edges. A consumer of an event no
//! registered module emits, or a call no one answers, is marked dangling —
//! the edge an operator has to look at.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;

use super::Catalogue;
use crate::manifest::Target;
use crate::subjects::pattern;

#[path = "graph_layout.rs"]
mod layout;
#[path = "graph_svg.rs"]
mod svg;
#[path = "graph_versions.rs"]
mod versions;

pub use versions::{VersionInputs, published_by};

/// What a graph node stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeKind {
    Module,
    /// A seat a registered module declares.
    Seat,
    /// A seat the mesh itself declares.
    Role,
    /// Named by a manifest, registered by no one.
    Missing,
    /// A built version of a module (`mesh catalogue graph --versions`).
    Version,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct GraphNode {
    /// `module:<name>`, `seat:<name>`, or `missing:<as written>`.
    pub id: String,
    pub kind: NodeKind,
    pub label: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EdgeKind {
    /// `[holds] seats`.
    Holds,
    /// `[uses] seats`: submits work there.
    Uses,
    /// `[events] consumes`: from the consumer to the emitter.
    Consumes,
    /// `[tools] uses`: from the caller to the provider.
    Calls,
    /// From a version to its module.
    VersionOf,
    /// From a version to the version that published one of its inputs;
    /// labelled with the input's artifact.
    BuiltOn,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub kind: EdgeKind,
    /// The event or tool, as the manifest writes it; empty for seats.
    pub label: String,
    /// Nothing registered answers it.
    pub dangling: bool,
}

/// Nodes sorted by id, edges sorted: the same catalogue draws the same
/// bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Graph {
    pub nodes: Vec<GraphNode>,
    pub edges: Vec<Edge>,
}

fn target_id(t: &Target) -> String {
    match t {
        Target::Module(m) => format!("module:{m}"),
        Target::Seat(s) => format!("seat:{s}"),
    }
}

/// The graph of `catalogue`: every module and declared seat, and each role
/// some module names.
pub fn graph(catalogue: &Catalogue) -> Graph {
    let mut nodes: BTreeMap<String, GraphNode> = BTreeMap::new();
    let mut edges: BTreeSet<Edge> = BTreeSet::new();
    for entry in catalogue.seats() {
        if entry.module.is_some() {
            let id = format!("seat:{}", entry.decl.name.value);
            nodes.insert(
                id.clone(),
                GraphNode {
                    id,
                    kind: NodeKind::Seat,
                    label: entry.decl.name.value.to_string(),
                },
            );
        }
    }
    // A target that is registered gets its own node; one that is not gets a
    // `missing:` node, so the edge still has somewhere to point.
    let endpoint = |t: &Target, nodes: &mut BTreeMap<String, GraphNode>| -> String {
        let registered = match t {
            Target::Module(m) => catalogue.module(m).is_some(),
            Target::Seat(s) => catalogue.seat(s).is_some(),
        };
        let (id, kind) = match (t, registered) {
            (Target::Module(_), true) => (target_id(t), NodeKind::Module),
            (Target::Seat(s), true) => {
                let role = catalogue.seat(s).is_some_and(|e| e.module.is_none());
                (
                    target_id(t),
                    if role { NodeKind::Role } else { NodeKind::Seat },
                )
            }
            (_, false) => (format!("missing:{t}"), NodeKind::Missing),
        };
        nodes.entry(id.clone()).or_insert_with(|| GraphNode {
            id: id.clone(),
            kind,
            label: match t {
                Target::Module(m) => m.to_string(),
                Target::Seat(s) => s.to_string(),
            },
        });
        id
    };
    for m in catalogue.manifests() {
        // A duplicate module is indexed once; its second manifest is not drawn.
        if catalogue
            .module(&m.name.value)
            .is_none_or(|first| first.path != m.path)
        {
            continue;
        }
        let from = format!("module:{}", m.name.value);
        nodes.insert(
            from.clone(),
            GraphNode {
                id: from.clone(),
                kind: NodeKind::Module,
                label: m.name.value.to_string(),
            },
        );
        for (kind, seats) in [
            (EdgeKind::Holds, catalogue.held_seats(m)),
            (EdgeKind::Uses, catalogue.used_seats(m)),
        ] {
            for r in seats {
                let t = Target::Seat(r.seat.clone());
                let dangling = catalogue.seat(&r.seat).is_none();
                edges.insert(Edge {
                    from: from.clone(),
                    to: endpoint(&t, &mut nodes),
                    kind,
                    label: String::new(),
                    dangling,
                });
            }
        }
        for c in catalogue.consumes(m) {
            let dangling = catalogue.publications(&c.emitter).is_none_or(|pubs| {
                !pubs
                    .iter()
                    .any(|p| pattern::overlap(&c.subject, &p.subject))
            });
            edges.insert(Edge {
                from: from.clone(),
                to: endpoint(&c.emitter, &mut nodes),
                kind: EdgeKind::Consumes,
                label: c.event.written().to_string(),
                dangling,
            });
        }
        for u in catalogue.tool_uses(m) {
            let dangling = catalogue
                .served_tools(&u.provider)
                .is_none_or(|tools| !tools.iter().any(|(t, _)| *t == u.tool));
            edges.insert(Edge {
                from: from.clone(),
                to: endpoint(&u.provider, &mut nodes),
                kind: EdgeKind::Calls,
                label: u.tool.to_string(),
                dangling,
            });
        }
    }
    Graph {
        nodes: nodes.into_values().collect(),
        edges: edges.into_iter().collect(),
    }
}

/// A string as a DOT double-quoted string.
fn dot_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\n' => out.push_str("\\n"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl EdgeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EdgeKind::Holds => "holds",
            EdgeKind::Uses => "uses",
            EdgeKind::Consumes => "consumes",
            EdgeKind::Calls => "calls",
            EdgeKind::VersionOf => "version of",
            EdgeKind::BuiltOn => "built on",
        }
    }
}

impl Edge {
    /// `consumes built`, `holds`, with `(dangling)` when nothing answers.
    pub fn caption(&self) -> String {
        let mut s = self.kind.as_str().to_string();
        if !self.label.is_empty() {
            s.push(' ');
            s.push_str(&self.label);
        }
        if self.dangling {
            s.push_str(" (dangling)");
        }
        s
    }
}

impl Graph {
    /// Graphviz DOT text.
    pub fn dot(&self) -> String {
        let mut out = String::from("digraph catalogue {\n  rankdir=BT;\n  node [shape=box];\n");
        for n in &self.nodes {
            let style = match n.kind {
                NodeKind::Module => "",
                NodeKind::Seat => ", style=rounded",
                NodeKind::Role => ", style=\"rounded,bold\"",
                NodeKind::Missing => ", style=dashed, color=red",
                NodeKind::Version => ", style=\"rounded,dotted\"",
            };
            let label = match n.kind {
                NodeKind::Module => n.label.clone(),
                NodeKind::Seat => format!("seat {}", n.label),
                NodeKind::Role => format!("role {}", n.label),
                NodeKind::Missing => format!("{} (not registered)", n.label),
                NodeKind::Version => n.label.clone(),
            };
            let _ = writeln!(
                out,
                "  {} [label={}{style}];",
                dot_quote(&n.id),
                dot_quote(&label)
            );
        }
        for e in &self.edges {
            let style = if e.dangling {
                ", color=red, style=dashed"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "  {} -> {} [label={}{style}];",
                dot_quote(&e.from),
                dot_quote(&e.to),
                dot_quote(&e.caption())
            );
        }
        out.push_str("}\n");
        out
    }

    /// A self-contained SVG drawing (see [`graph_svg`]).
    pub fn svg(&self) -> String {
        svg::render(self)
    }
}

/// The catalogue drawn as SVG: a layered layout, seats and roles in the
/// bottom row, each module above what it points at, no label over another
/// and no edge through a box; deterministic, XML-escaped.
pub fn graph_svg(catalogue: &Catalogue) -> String {
    graph(catalogue).svg()
}

/// The catalogue as Graphviz DOT text.
pub fn graph_dot(catalogue: &Catalogue) -> String {
    graph(catalogue).dot()
}

#[cfg(test)]
#[path = "graph_layout_tests.rs"]
mod layout_tests;
#[cfg(test)]
#[path = "graph_svg_check.rs"]
mod svg_check;
#[cfg(test)]
#[path = "graph_tests.rs"]
mod tests;

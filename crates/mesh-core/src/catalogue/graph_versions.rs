//! Versions in the catalogue graph (`mesh catalogue graph --versions`):
//! each built version of a module, pointing at its module and at the
//! version that published each of its inputs — read out of the build, never
//! declared beside it. An input no recorded version published points at a
//! `missing:` node, dangling: the build read a reference the records cannot
//! place.

use std::collections::BTreeMap;

use super::{Edge, EdgeKind, Graph, GraphNode, NodeKind};
use crate::artifact::Reference;
use crate::names::Name;

/// A version to draw, with the inputs its build read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionInputs {
    pub module: Name,
    pub version: String,
    pub inputs: Vec<Reference>,
}

/// Which version published each artifact: `(reference, module, version)`
/// rows folded into a lookup. An artifact published by several versions
/// (the same bytes built twice) belongs to the first one listed.
pub fn published_by(
    rows: impl IntoIterator<Item = (Reference, Name, String)>,
) -> BTreeMap<Reference, (Name, String)> {
    let mut out = BTreeMap::new();
    for (r, m, v) in rows {
        out.entry(r).or_insert((m, v));
    }
    out
}

fn version_id(module: &Name, version: &str) -> String {
    format!("version:{module}@{version}")
}

/// `module @ 0123456789ab`: a commit shortened as git shortens it.
fn version_label(module: &Name, version: &str) -> String {
    let short: String = version.chars().take(12).collect();
    format!("{module} @ {short}")
}

impl Graph {
    /// Adds `versions` and their edges, keeping nodes and edges sorted (the
    /// same records draw the same bytes).
    pub fn add_versions(
        &mut self,
        versions: &[VersionInputs],
        published: &BTreeMap<Reference, (Name, String)>,
    ) {
        let mut nodes: BTreeMap<String, GraphNode> = std::mem::take(&mut self.nodes)
            .into_iter()
            .map(|n| (n.id.clone(), n))
            .collect();
        let mut edges: std::collections::BTreeSet<Edge> =
            std::mem::take(&mut self.edges).into_iter().collect();
        let version_node = |m: &Name, v: &str, nodes: &mut BTreeMap<String, GraphNode>| {
            let id = version_id(m, v);
            nodes.entry(id.clone()).or_insert_with(|| GraphNode {
                id: id.clone(),
                kind: NodeKind::Version,
                label: version_label(m, v),
            });
            id
        };
        for v in versions {
            let from = version_node(&v.module, &v.version, &mut nodes);
            let module = format!("module:{}", v.module);
            edges.insert(Edge {
                from: from.clone(),
                dangling: !nodes.contains_key(&module),
                to: module,
                kind: EdgeKind::VersionOf,
                label: String::new(),
            });
            for input in &v.inputs {
                let (to, dangling) = match published.get(input) {
                    Some((m, pv)) => (version_node(m, pv, &mut nodes), false),
                    None => {
                        let id = format!("missing:{input}");
                        nodes.entry(id.clone()).or_insert_with(|| GraphNode {
                            id: id.clone(),
                            kind: NodeKind::Missing,
                            label: input.to_string(),
                        });
                        (id, true)
                    }
                };
                edges.insert(Edge {
                    from: from.clone(),
                    to,
                    kind: EdgeKind::BuiltOn,
                    label: input.artifact.to_string(),
                    dangling,
                });
            }
        }
        self.nodes = nodes.into_values().collect();
        self.edges = edges.into_iter().collect();
    }
}

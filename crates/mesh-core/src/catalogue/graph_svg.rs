//! The catalogue graph drawn as SVG: a legend, then the layered layout of
//! `graph_layout` — boxes for nodes, polylines with arrowheads for edges,
//! each edge's kind by its colour and its event or tool in a label box of
//! its own. No layout engine to install, and the same graph draws the same
//! bytes.
//!
//! Text is monospace so its width is known from its length: every label's
//! box is drawn as a rect sized by that estimate.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::layout::{self, BOX_H, EdgeSpec, LABEL_H, NodeSpec, Rect};
use super::{Edge, EdgeKind, Graph, GraphNode, NodeKind};

pub(super) const MARGIN: i64 = 20;
pub(super) const FONT_SIZE: i64 = 13;
/// Advance of one character at `FONT_SIZE` in the monospace fonts named
/// below is 0.6 em (7.8 px): rounded up.
pub(super) const CHAR_W: i64 = 8;
const FONT: &str = "DejaVu Sans Mono, Liberation Mono, Menlo, Consolas, monospace";
const NODE_PAD: i64 = 18;
const MIN_W: i64 = 56;
const LABEL_PAD: i64 = 8;
const DANGLING: &str = "#c00";
const SAMPLE_W: i64 = 30;
const LEGEND_ROW: i64 = 24;

/// Text escaped for XML content and attribute values.
pub(super) fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Not allowed in XML 1.0 at all: dropped rather than written.
            c if c.is_control() && c != '\t' => {}
            c => out.push(c),
        }
    }
    out
}

fn caption(n: &GraphNode) -> String {
    match n.kind {
        NodeKind::Module => n.label.clone(),
        NodeKind::Seat => format!("seat {}", n.label),
        NodeKind::Role => format!("role {}", n.label),
        NodeKind::Missing => format!("{} (not registered)", n.label),
        NodeKind::Version => n.label.clone(),
    }
}

/// Width of `s` drawn at `FONT_SIZE`, as the escape leaves it.
fn text_w(s: &str) -> i64 {
    let chars = s.chars().filter(|c| !c.is_control() || *c == '\t').count();
    i64::try_from(chars)
        .unwrap_or(i64::MAX / (2 * CHAR_W))
        .saturating_mul(CHAR_W)
}

fn node_w(n: &GraphNode) -> i64 {
    (text_w(&caption(n)) + NODE_PAD).max(MIN_W)
}

/// The text an edge carries: its event or tool (the colour says the
/// kind), or the whole caption when nothing answers it (red says only
/// that).
fn edge_text(e: &Edge) -> String {
    if e.dangling {
        e.caption()
    } else {
        e.label.clone()
    }
}

fn colour(kind: EdgeKind) -> &'static str {
    match kind {
        EdgeKind::Holds => "#2e7d32",
        EdgeKind::Uses => "#1565c0",
        EdgeKind::Consumes => "#d84315",
        EdgeKind::Calls => "#00838f",
        EdgeKind::VersionOf => "#757575",
        EdgeKind::BuiltOn => "#6d4c41",
    }
}

const KINDS: [EdgeKind; 6] = [
    EdgeKind::Holds,
    EdgeKind::Uses,
    EdgeKind::Consumes,
    EdgeKind::Calls,
    EdgeKind::VersionOf,
    EdgeKind::BuiltOn,
];

/// Fill, stroke, corner radius, dash of a node's box.
fn node_style(kind: NodeKind) -> (&'static str, &'static str, i64, &'static str) {
    match kind {
        NodeKind::Module => ("#e8f0fe", "#1a56c4", 0, ""),
        NodeKind::Seat => ("#eaf6ea", "#2e7d32", 12, ""),
        NodeKind::Role => ("#f3e8fd", "#6a1b9a", 12, ""),
        NodeKind::Missing => ("#fdecea", DANGLING, 0, r#" stroke-dasharray="6 4""#),
        NodeKind::Version => ("#fff8e1", "#6d4c41", 6, r#" stroke-dasharray="2 3""#),
    }
}

fn node_class(kind: NodeKind) -> &'static str {
    match kind {
        NodeKind::Module => "module",
        NodeKind::Seat => "seat",
        NodeKind::Role => "role",
        NodeKind::Missing => "missing",
        NodeKind::Version => "version",
    }
}

/// Only a graph drawn with its versions shows their kinds in its legend.
fn is_version_kind(k: EdgeKind) -> bool {
    matches!(k, EdgeKind::VersionOf | EdgeKind::BuiltOn)
}

/// A kind as an XML id or class: its caption may hold a space.
fn slug(kind: EdgeKind) -> String {
    kind.as_str().replace(' ', "-")
}

fn marker_id(kind: EdgeKind) -> String {
    format!("arrow-{}", slug(kind))
}

fn marker(out: &mut String, id: &str, fill: &str) {
    let _ = write!(
        out,
        r#"<marker id="{id}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="{fill}"/></marker>"#
    );
}

/// Baseline of text centred in a row `h` high starting at `y`.
fn baseline(y: i64, h: i64) -> i64 {
    y + h / 2 + FONT_SIZE * 3 / 8
}

/// The legend, framed, at (`x`, `y`): the edge kinds on one row, the node
/// kinds on the next. Returns its frame.
fn legend(out: &mut String, x: i64, y: i64, versions: bool) -> Rect {
    let mut rows = [String::new(), String::new()];
    let mut ends = [x, x];
    let mut item = |row: usize, sample: &str, text: &str, rows: &mut [String; 2]| {
        let at = ends[row] + 10;
        let cy = y + 6 + LEGEND_ROW * i64::try_from(row).unwrap_or(0) + LEGEND_ROW / 2;
        let s = sample
            .replace("{x}", &at.to_string())
            .replace("{x2}", &(at + SAMPLE_W).to_string())
            .replace("{cy}", &cy.to_string())
            .replace("{top}", &(cy - 7).to_string());
        let tx = at + SAMPLE_W + 6;
        let _ = write!(
            rows[row],
            r#"{s}<text x="{tx}" y="{}">{}</text>"#,
            cy + FONT_SIZE * 3 / 8,
            xml_escape(text)
        );
        ends[row] = tx + text_w(text) + 6;
    };
    for kind in KINDS
        .into_iter()
        .filter(|k| versions || !is_version_kind(*k))
    {
        let c = colour(kind);
        let line = format!(
            r#"<line x1="{{x}}" y1="{{cy}}" x2="{{x2}}" y2="{{cy}}" stroke="{c}" stroke-width="1.5" marker-end="url(#{})"/>"#,
            marker_id(kind)
        );
        item(0, &line, kind.as_str(), &mut rows);
    }
    let dangling = format!(
        r#"<line x1="{{x}}" y1="{{cy}}" x2="{{x2}}" y2="{{cy}}" stroke="{DANGLING}" stroke-width="1.5" stroke-dasharray="6 4" marker-end="url(#arrow-dangling)"/>"#
    );
    item(0, &dangling, "dangling: nothing answers", &mut rows);
    for (kind, text) in [
        (NodeKind::Module, "module"),
        (NodeKind::Seat, "seat"),
        (NodeKind::Role, "role (the mesh's seat)"),
        (NodeKind::Missing, "not registered"),
        (NodeKind::Version, "built version"),
    ]
    .into_iter()
    .filter(|(k, _)| versions || *k != NodeKind::Version)
    {
        let (fill, stroke, rx, dash) = node_style(kind);
        let rect = format!(
            r#"<rect x="{{x}}" y="{{top}}" width="{SAMPLE_W}" height="14" rx="{}" fill="{fill}" stroke="{stroke}"{dash}/>"#,
            rx / 2
        );
        item(1, &rect, text, &mut rows);
    }
    let frame = Rect {
        x,
        y,
        w: ends[0].max(ends[1]) + 4 - x,
        h: 2 * LEGEND_ROW + 12,
    };
    let _ = writeln!(
        out,
        r##"<g class="legend"><rect x="{}" y="{}" width="{}" height="{}" rx="4" fill="#fafafa" stroke="#bbb"/>{}{}</g>"##,
        frame.x, frame.y, frame.w, frame.h, rows[0], rows[1]
    );
    frame
}

pub(super) fn render(g: &Graph) -> String {
    let ids: BTreeMap<&str, usize> = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.id.as_str(), i))
        .collect();
    let index = |id: &str| ids.get(id).copied();
    let nodes: Vec<NodeSpec> = g
        .nodes
        .iter()
        .map(|n| NodeSpec {
            w: node_w(n),
            min_layer: usize::from(matches!(n.kind, NodeKind::Module | NodeKind::Version)),
        })
        .collect();
    // An edge to a node the graph does not have is not drawn.
    let drawn: Vec<(&Edge, usize, usize)> = g
        .edges
        .iter()
        .filter_map(|e| Some((e, index(&e.from)?, index(&e.to)?)))
        .collect();
    let edges: Vec<EdgeSpec> = drawn
        .iter()
        .map(|&(e, from, to)| {
            let text = edge_text(e);
            EdgeSpec {
                from,
                to,
                label_w: if text.is_empty() {
                    0
                } else {
                    text_w(&text) + LABEL_PAD
                },
            }
        })
        .collect();
    let mut body = String::new();
    let versions = g.nodes.iter().any(|n| n.kind == NodeKind::Version);
    let frame = legend(&mut body, MARGIN, MARGIN, versions);
    let l = layout::layout(&nodes, &edges, MARGIN, frame.y + frame.h + MARGIN);
    let w = l.width.max(frame.w) + 2 * MARGIN;
    let h = frame.y + frame.h + MARGIN + l.height + MARGIN;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="{FONT}" font-size="{FONT_SIZE}">"#
    );
    out.push_str("<defs>");
    for kind in KINDS
        .into_iter()
        .filter(|k| versions || !is_version_kind(*k))
    {
        marker(&mut out, &marker_id(kind), colour(kind));
    }
    marker(&mut out, "arrow-dangling", DANGLING);
    out.push_str("</defs>\n");
    out.push_str(r##"<rect class="background" width="100%" height="100%" fill="#fff"/>"##);
    out.push('\n');
    out.push_str(&body);
    for (&(e, _, _), route) in drawn.iter().zip(&l.edges) {
        let (class, stroke, marker, dash) = if e.dangling {
            (
                " dangling",
                DANGLING,
                "dangling".to_string(),
                r#" stroke-dasharray="6 4""#,
            )
        } else {
            ("", colour(e.kind), slug(e.kind), "")
        };
        let points: Vec<String> = route
            .points
            .iter()
            .map(|(x, y)| format!("{x},{y}"))
            .collect();
        let _ = write!(
            out,
            r#"<g class="edge {kind}{class}" data-from="{}" data-to="{}" data-kind="{kind}"><title>{}</title><polyline points="{}" fill="none" stroke="{stroke}" stroke-width="1.5" stroke-linejoin="round"{dash} marker-end="url(#arrow-{marker})"/>"#,
            xml_escape(&e.from),
            xml_escape(&e.to),
            xml_escape(&e.caption()),
            points.join(" "),
            kind = slug(e.kind),
        );
        if let Some(r) = route.label {
            let _ = write!(
                out,
                r##"<rect x="{}" y="{}" width="{}" height="{LABEL_H}" rx="3" fill="#fff" stroke="{stroke}" stroke-opacity="0.35"/><text x="{}" y="{}" fill="{stroke}">{}</text>"##,
                r.x,
                r.y,
                r.w,
                r.x + LABEL_PAD / 2,
                baseline(r.y, LABEL_H),
                xml_escape(&edge_text(e)),
            );
        }
        out.push_str("</g>\n");
    }
    for (n, p) in g.nodes.iter().zip(&l.nodes) {
        let (fill, stroke, rx, dash) = node_style(n.kind);
        let _ = writeln!(
            out,
            r#"<g class="node {}" data-id="{}"><rect x="{}" y="{}" width="{}" height="{BOX_H}" rx="{rx}" fill="{fill}" stroke="{stroke}"{dash}/><text x="{}" y="{}" text-anchor="middle">{}</text></g>"#,
            node_class(n.kind),
            xml_escape(&n.id),
            p.x,
            p.y,
            p.w,
            p.x + p.w / 2,
            baseline(p.y, BOX_H),
            xml_escape(&caption(n)),
        );
    }
    out.push_str("</svg>\n");
    out
}

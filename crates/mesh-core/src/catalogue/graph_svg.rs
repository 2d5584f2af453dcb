//! A self-made SVG drawing of the catalogue graph: a simple layered layout
//! (seats and roles in the bottom row, each module above everything it
//! points at), boxes for nodes, lines with arrowheads for edges. No layout
//! engine to install, and the same graph draws the same bytes.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{Graph, GraphNode, NodeKind};

const MARGIN: i64 = 20;
const BOX_H: i64 = 36;
const ROW_GAP: i64 = 110;
const COL_GAP: i64 = 40;
const CHAR_W: i64 = 8;
const MIN_W: i64 = 90;

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
    }
}

/// Row of each node: 0 for seats, roles and missing targets; a module sits
/// one row above the highest module it points at. A cycle stops rising
/// after as many rounds as there are nodes.
fn ranks(g: &Graph) -> BTreeMap<&str, i64> {
    let mut rank: BTreeMap<&str, i64> = g
        .nodes
        .iter()
        .map(|n| (n.id.as_str(), i64::from(n.kind == NodeKind::Module)))
        .collect();
    let kinds: BTreeMap<&str, NodeKind> = g.nodes.iter().map(|n| (n.id.as_str(), n.kind)).collect();
    for _ in 0..g.nodes.len() {
        let mut changed = false;
        for e in &g.edges {
            if kinds.get(e.to.as_str()) != Some(&NodeKind::Module) || e.from == e.to {
                continue;
            }
            let want = rank.get(e.to.as_str()).copied().unwrap_or(1) + 1;
            if let Some(r) = rank.get_mut(e.from.as_str())
                && *r < want
            {
                *r = want;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    rank
}

/// A placed box: left, top, width.
#[derive(Clone, Copy)]
struct Placed {
    x: i64,
    y: i64,
    w: i64,
}

impl Placed {
    fn cx(self) -> i64 {
        self.x + self.w / 2
    }
}

fn width(n: &GraphNode) -> i64 {
    let chars = i64::try_from(caption(n).chars().count()).unwrap_or(i64::MAX / 16);
    (chars * CHAR_W + 24).max(MIN_W)
}

pub(super) fn render(g: &Graph) -> String {
    let rank = ranks(g);
    let top = rank.values().copied().max().unwrap_or(0);
    let mut rows: BTreeMap<i64, Vec<&GraphNode>> = BTreeMap::new();
    for n in &g.nodes {
        rows.entry(rank.get(n.id.as_str()).copied().unwrap_or(0))
            .or_default()
            .push(n);
    }
    let row_width =
        |ns: &[&GraphNode]| ns.iter().map(|n| width(n) + COL_GAP).sum::<i64>() - COL_GAP;
    let widest = rows
        .values()
        .map(|r| row_width(r))
        .max()
        .unwrap_or(0)
        .max(0);
    let mut placed: BTreeMap<&str, Placed> = BTreeMap::new();
    for (r, ns) in &rows {
        // Rows are centred on the widest.
        let mut x = MARGIN + (widest - row_width(ns)) / 2;
        let y = MARGIN + (top - r) * ROW_GAP;
        for n in ns {
            let w = width(n);
            placed.insert(n.id.as_str(), Placed { x, y, w });
            x += w + COL_GAP;
        }
    }
    let w = widest + 2 * MARGIN;
    let h = top * ROW_GAP + BOX_H + 2 * MARGIN;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    out.push_str(
        r##"<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#444"/></marker><marker id="arrow-dangling" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#c00"/></marker></defs>
"##,
    );
    for e in &g.edges {
        let (Some(a), Some(b)) = (placed.get(e.from.as_str()), placed.get(e.to.as_str())) else {
            continue;
        };
        let (x1, y1, x2, y2) = if b.y < a.y {
            (a.cx(), a.y, b.cx(), b.y + BOX_H)
        } else if b.y > a.y {
            (a.cx(), a.y + BOX_H, b.cx(), b.y)
        } else if b.x > a.x {
            (a.x + a.w, a.y + BOX_H / 2, b.x, b.y + BOX_H / 2)
        } else {
            (a.x, a.y + BOX_H / 2, b.x + b.w, b.y + BOX_H / 2)
        };
        let (class, stroke, marker, dash) = if e.dangling {
            (
                "edge dangling",
                "#c00",
                "arrow-dangling",
                r#" stroke-dasharray="6 4""#,
            )
        } else {
            ("edge", "#444", "arrow", "")
        };
        let _ = writeln!(
            out,
            r#"<g class="{class}" data-from="{}" data-to="{}" data-kind="{}"><line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="{stroke}"{dash} marker-end="url(#{marker})"/><text x="{}" y="{}" text-anchor="middle" fill="{stroke}">{}</text></g>"#,
            xml_escape(&e.from),
            xml_escape(&e.to),
            e.kind.as_str(),
            (x1 + x2) / 2,
            (y1 + y2) / 2 - 3,
            xml_escape(&e.caption()),
        );
    }
    for n in &g.nodes {
        let Some(p) = placed.get(n.id.as_str()) else {
            continue;
        };
        let (fill, stroke, rx, dash) = match n.kind {
            NodeKind::Module => ("#e8f0fe", "#1a56c4", 0, ""),
            NodeKind::Seat => ("#eaf6ea", "#2e7d32", 12, ""),
            NodeKind::Role => ("#f3e8fd", "#6a1b9a", 12, ""),
            NodeKind::Missing => ("#fdecea", "#c00", 0, r#" stroke-dasharray="6 4""#),
        };
        let kind = match n.kind {
            NodeKind::Module => "module",
            NodeKind::Seat => "seat",
            NodeKind::Role => "role",
            NodeKind::Missing => "missing",
        };
        let _ = writeln!(
            out,
            r#"<g class="node {kind}" data-id="{}"><rect x="{}" y="{}" width="{}" height="{BOX_H}" rx="{rx}" fill="{fill}" stroke="{stroke}"{dash}/><text x="{}" y="{}" text-anchor="middle">{}</text></g>"#,
            xml_escape(&n.id),
            p.x,
            p.y,
            p.w,
            p.cx(),
            p.y + BOX_H / 2 + 4,
            xml_escape(&caption(n)),
        );
    }
    out.push_str("</svg>\n");
    out
}

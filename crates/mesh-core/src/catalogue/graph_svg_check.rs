//! Checks a drawn catalogue graph for what makes one unreadable, from the
//! SVG alone: a label or box over another, an edge through a box it does
//! not end at, an edge that does not start and end on its own boxes.
//! Shared by mesh-core's layout tests and the CLI test of
//! `mesh catalogue graph --format svg` (included there by path).
//!
//! Text is measured as a monospace font draws it: 0.6 em a character, from
//! 0.8 em above the baseline to 0.25 em below — independent of the metric
//! the layout itself uses, so a layout that underestimates text fails.

use roxmltree::{Document, Node};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Box2 {
    pub x0: f64,
    pub y0: f64,
    pub x1: f64,
    pub y1: f64,
}

impl Box2 {
    /// Overlap with positive area; sharing a border is not overlap.
    pub fn overlaps(&self, o: &Box2) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.y0 < o.y1 && o.y0 < self.y1
    }

    pub fn contains(&self, o: &Box2) -> bool {
        const E: f64 = 1e-6;
        o.x0 >= self.x0 - E && o.x1 <= self.x1 + E && o.y0 >= self.y0 - E && o.y1 <= self.y1 + E
    }

    /// The point lies on the border (within half a pixel).
    pub fn on_border(&self, (x, y): (f64, f64)) -> bool {
        let near = |a: f64, b: f64| (a - b).abs() <= 0.5;
        let in_x = x >= self.x0 - 0.5 && x <= self.x1 + 0.5;
        let in_y = y >= self.y0 - 0.5 && y <= self.y1 + 0.5;
        ((near(x, self.x0) || near(x, self.x1)) && in_y)
            || ((near(y, self.y0) || near(y, self.y1)) && in_x)
    }

    /// The segment passes through the open inside of the box (touching
    /// the border, or running along it, does not count). Liang–Barsky.
    pub fn crossed_by(&self, (ax, ay): (f64, f64), (bx, by): (f64, f64)) -> bool {
        let (dx, dy) = (bx - ax, by - ay);
        let (mut t0, mut t1) = (0.0f64, 1.0f64);
        for (p, q) in [
            (-dx, ax - self.x0),
            (dx, self.x1 - ax),
            (-dy, ay - self.y0),
            (dy, self.y1 - ay),
        ] {
            if p == 0.0 {
                if q <= 0.0 {
                    return false;
                }
            } else {
                let t = q / p;
                if p < 0.0 {
                    t0 = t0.max(t);
                } else {
                    t1 = t1.min(t);
                }
            }
        }
        t0 < t1
    }
}

fn num(n: Node<'_, '_>, attr: &str) -> Option<f64> {
    n.attribute(attr)?.trim().parse().ok()
}

fn has_class(n: Node<'_, '_>, c: &str) -> bool {
    n.attribute("class")
        .is_some_and(|a| a.split_whitespace().any(|x| x == c))
}

fn rect_box(n: Node<'_, '_>) -> Option<Box2> {
    let (x, y) = (num(n, "x").unwrap_or(0.0), num(n, "y").unwrap_or(0.0));
    let (w, h) = (num(n, "width")?, num(n, "height")?);
    Some(Box2 {
        x0: x,
        y0: y,
        x1: x + w,
        y1: y + h,
    })
}

/// The nearest font size set on the element or an ancestor.
fn font_size(n: Node<'_, '_>) -> f64 {
    n.ancestors()
        .find_map(|a| num(a, "font-size"))
        .unwrap_or(16.0)
}

pub fn text_box(n: Node<'_, '_>) -> Option<Box2> {
    let (x, y) = (num(n, "x")?, num(n, "y")?);
    let fs = font_size(n);
    let text: String = n
        .descendants()
        .filter(|d| d.is_text())
        .filter_map(|d| d.text())
        .collect();
    let w = text.chars().count() as f64 * 0.6 * fs;
    let anchor = n
        .ancestors()
        .find_map(|a| a.attribute("text-anchor"))
        .unwrap_or("start");
    let x0 = match anchor {
        "middle" => x - w / 2.0,
        "end" => x - w,
        _ => x,
    };
    Some(Box2 {
        x0,
        y0: y - 0.8 * fs,
        x1: x0 + w,
        y1: y + 0.25 * fs,
    })
}

/// The points of a `line`, `polyline` or `path` (M/L commands only).
pub fn points(n: Node<'_, '_>) -> Vec<(f64, f64)> {
    let nums = |s: &str| -> Vec<f64> {
        s.split(|c: char| c == ',' || c.is_whitespace() || c.is_ascii_alphabetic())
            .filter(|t| !t.is_empty())
            .filter_map(|t| t.parse().ok())
            .collect()
    };
    let flat = match n.tag_name().name() {
        "line" => ["x1", "y1", "x2", "y2"]
            .iter()
            .filter_map(|a| num(n, a))
            .collect(),
        "polyline" | "polygon" => nums(n.attribute("points").unwrap_or("")),
        "path" => nums(n.attribute("d").unwrap_or("")),
        _ => Vec::new(),
    };
    flat.chunks_exact(2).map(|p| (p[0], p[1])).collect()
}

fn is_stroke(n: Node<'_, '_>) -> bool {
    matches!(n.tag_name().name(), "line" | "polyline" | "path")
}

/// What a drawing does wrong; empty when nothing.
pub fn problems(svg: &str) -> Vec<String> {
    let doc = match Document::parse(svg) {
        Ok(d) => d,
        Err(e) => return vec![format!("not XML: {e}")],
    };
    let root = doc.root_element();
    let mut bad = Vec::new();
    let canvas = Box2 {
        x0: 0.0,
        y0: 0.0,
        x1: num(root, "width").unwrap_or(0.0),
        y1: num(root, "height").unwrap_or(0.0),
    };
    // (what, box, node id when it is a node's box)
    let mut boxes: Vec<(String, Box2, Option<String>)> = Vec::new();
    let groups: Vec<Node<'_, '_>> = root
        .children()
        .filter(|g| {
            g.has_tag_name("g")
                && (has_class(*g, "node") || has_class(*g, "edge") || has_class(*g, "legend"))
        })
        .collect();
    for g in &groups {
        let name = format!(
            "{} {}",
            g.attribute("class").unwrap_or(""),
            g.attribute("data-id")
                .map(str::to_string)
                .or_else(|| Some(format!(
                    "{}->{}",
                    g.attribute("data-from")?,
                    g.attribute("data-to")?
                )))
                .unwrap_or_default()
        );
        let frame = g
            .children()
            .find(|c| c.has_tag_name("rect"))
            .and_then(rect_box);
        let mut items: Vec<(String, Box2)> = Vec::new();
        for d in g.descendants().filter(|d| d.is_element()) {
            let b = match d.tag_name().name() {
                "text" => text_box(d),
                "rect" if frame != rect_box(d) => rect_box(d),
                _ => None,
            };
            let Some(b) = b else { continue };
            let what = format!(
                "{name}: {} {:?}",
                d.tag_name().name(),
                d.text().unwrap_or("")
            );
            match frame {
                Some(f) if !f.contains(&b) => bad.push(format!("{what} sticks out of its box")),
                Some(_) => items.push((what, b)),
                None => boxes.push((what, b, None)),
            }
        }
        for (i, a) in items.iter().enumerate() {
            for b in &items[i + 1..] {
                if a.1.overlaps(&b.1) {
                    bad.push(format!("{} overlaps {}", a.0, b.0));
                }
            }
        }
        if let Some(f) = frame {
            let id = has_class(*g, "node")
                .then(|| g.attribute("data-id").map(str::to_string))
                .flatten();
            boxes.push((format!("{name}: box"), f, id));
        }
    }
    for (i, a) in boxes.iter().enumerate() {
        if !canvas.contains(&a.1) {
            bad.push(format!("{} is outside the drawing", a.0));
        }
        for b in &boxes[i + 1..] {
            if a.1.overlaps(&b.1) {
                bad.push(format!("{} overlaps {}", a.0, b.0));
            }
        }
    }
    let node_box = |id: &str| {
        boxes
            .iter()
            .find(|b| b.2.as_deref() == Some(id))
            .map(|b| b.1)
    };
    for g in groups.iter().filter(|g| has_class(**g, "edge")) {
        let (from, to) = (
            g.attribute("data-from").unwrap_or(""),
            g.attribute("data-to").unwrap_or(""),
        );
        let Some(stroke) = g.descendants().find(|d| is_stroke(*d)) else {
            bad.push(format!("edge {from}->{to} has no line"));
            continue;
        };
        let pts = points(stroke);
        if pts.len() < 2 {
            bad.push(format!("edge {from}->{to} has {} points", pts.len()));
            continue;
        }
        if !stroke
            .attribute("marker-end")
            .is_some_and(|m| m.starts_with("url(#"))
        {
            bad.push(format!("edge {from}->{to} has no arrowhead"));
        }
        for (end, id, p) in [("starts", from, pts[0]), ("ends", to, pts[pts.len() - 1])] {
            if !node_box(id).is_some_and(|b| b.on_border(p)) {
                bad.push(format!(
                    "edge {from}->{to} {end} at {p:?}, not on the box of {id}"
                ));
            }
        }
        for seg in pts.windows(2) {
            for (what, b, id) in &boxes {
                if id.as_deref().is_some_and(|i| i == from || i == to) {
                    continue;
                }
                if b.crossed_by(seg[0], seg[1]) {
                    bad.push(format!(
                        "edge {from}->{to} segment {:?}-{:?} crosses {what}",
                        seg[0], seg[1]
                    ));
                }
            }
        }
    }
    bad
}

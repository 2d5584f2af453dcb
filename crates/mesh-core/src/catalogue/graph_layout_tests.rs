//! The layered drawing's promises, checked on the SVG: no box or label
//! over another, no edge through a box it does not end at, every edge from
//! its source's border to its target's — on a catalogue and on generated
//! graphs with cycles, self-loops and parallel edges; the same graph draws
//! the same bytes.

use super::svg_check::problems;
use super::*;
use crate::testing::catalogue;

/// A tiny deterministic generator (Knuth's MMIX LCG): the same graphs on
/// every run, no dependency.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn word(&mut self) -> String {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz-<&>\"'0123456789";
        let len = 1 + self.below(22);
        (0..len)
            .map(|_| char::from(ALPHABET[self.below(ALPHABET.len())]))
            .collect()
    }
}

const KINDS: [EdgeKind; 4] = [
    EdgeKind::Holds,
    EdgeKind::Uses,
    EdgeKind::Consumes,
    EdgeKind::Calls,
];

/// A random DAG over up to 18 nodes (edges from lower to higher index),
/// then back edges, self-loops and parallel edges added.
fn generated(seed: u64) -> Graph {
    let mut r = Lcg(seed);
    let n = 1 + r.below(18);
    let nodes: Vec<GraphNode> = (0..n)
        .map(|i| {
            let kind = match r.below(6) {
                0 => NodeKind::Seat,
                1 => NodeKind::Role,
                2 => NodeKind::Missing,
                _ => NodeKind::Module,
            };
            GraphNode {
                id: format!("n{i:02}"),
                kind,
                label: r.word(),
            }
        })
        .collect();
    let mut edges = Vec::new();
    let edge = |r: &mut Lcg, from: usize, to: usize| {
        let kind = KINDS[r.below(4)];
        Edge {
            from: nodes[from].id.clone(),
            to: nodes[to].id.clone(),
            kind,
            label: if matches!(kind, EdgeKind::Consumes | EdgeKind::Calls) {
                r.word()
            } else {
                String::new()
            },
            dangling: r.chance(20),
        }
    };
    for i in 0..n {
        for j in i + 1..n {
            if r.chance(22) {
                edges.push(edge(&mut r, i, j));
                if r.chance(15) {
                    edges.push(edge(&mut r, i, j));
                }
            }
        }
    }
    for _ in 0..r.below(4) {
        let (a, b) = (r.below(n), r.below(n));
        if a > b {
            edges.push(edge(&mut r, a, b));
        }
    }
    if r.chance(30) {
        let a = r.below(n);
        edges.push(edge(&mut r, a, a));
        if r.chance(50) {
            edges.push(edge(&mut r, a, a));
        }
    }
    Graph { nodes, edges }
}

/// The drawing ends a margin after its last box or line, right and
/// bottom: no room is reserved that nothing uses.
fn assert_tight(doc: &roxmltree::Document<'_>, seed: u64) {
    let f = |n: roxmltree::Node<'_, '_>, a: &str| -> i64 {
        n.attribute(a).map_or(0, |v| v.parse().unwrap())
    };
    let rects: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("rect") && n.attribute("class") != Some("background"))
        .collect();
    // Lines count too: a loop without a label stands right of its box.
    let points: Vec<(f64, f64)> = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .flat_map(super::svg_check::points)
        .collect();
    let right = rects
        .iter()
        .map(|r| f(*r, "x") + f(*r, "width"))
        .chain(points.iter().map(|p| p.0 as i64))
        .max()
        .unwrap();
    let bottom = rects
        .iter()
        .map(|r| f(*r, "y") + f(*r, "height"))
        .chain(points.iter().map(|p| p.1 as i64))
        .max()
        .unwrap();
    let root = doc.root_element();
    assert_eq!(right + svg::MARGIN, f(root, "width"), "seed {seed}: width");
    assert_eq!(
        bottom + svg::MARGIN,
        f(root, "height"),
        "seed {seed}: height"
    );
}

#[test]
fn generated_graphs_draw_without_overlaps_or_edges_through_boxes() {
    let mut cyclic = 0;
    for seed in 0..30 {
        let g = generated(seed);
        if g.edges.iter().any(|e| e.from >= e.to) {
            cyclic += 1;
        }
        let svg = g.svg();
        let bad = problems(&svg);
        assert!(bad.is_empty(), "seed {seed}: {bad:#?}\n{svg}");
        assert_eq!(svg, g.clone().svg(), "seed {seed}: not deterministic");
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let edges = doc
            .root_element()
            .children()
            .filter(|c| c.attribute("class").is_some_and(|a| a.starts_with("edge")))
            .count();
        assert_eq!(edges, g.edges.len(), "seed {seed}: every edge drawn");
        let labelled = doc
            .descendants()
            .filter(|c| c.attribute("data-from").is_some())
            .filter(|c| c.children().any(|t| t.has_tag_name("text")))
            .count();
        let want = g
            .edges
            .iter()
            .filter(|e| e.dangling || !e.label.is_empty())
            .count();
        assert_eq!(
            labelled, want,
            "seed {seed}: every event, tool, dangling edge labelled"
        );
        assert_tight(&doc, seed);
    }
    // The generator does make cycles and loops for the layout to break.
    assert!(cyclic >= 5, "only {cyclic} graphs with a back edge or loop");
}

/// A catalogue of a dozen modules in a chain of consumers, each holding a
/// seat and using the build machine, one edge spanning all layers.
fn wide_catalogue() -> Vec<String> {
    let mut ms = Vec::new();
    for i in 0..12 {
        // m0 consumes its own events: a loop.
        let consumes = if i < 2 {
            format!("consumes = [\"m{}.e0\"]", i.max(1) - 1)
        } else {
            format!("consumes = [\"m{}.e{}\", \"m0.e0\"]", i - 1, i - 1)
        };
        ms.push(format!(
            "[module]\nname = \"m{i}\"\n[[seat]]\nname = \"s{i}\"\nscope = \"mesh\"\nprotocol = \"p\"\n\
             [holds]\nseats = [\"s{i}\"]\n[uses]\nseats = [\"mesh-build-machine\"]\n\
             [events]\nemits = [\"e{i}\"]\n{consumes}\n"
        ));
    }
    ms
}

#[test]
fn a_catalogue_draws_layered_and_readable() {
    let ms = wide_catalogue();
    let refs: Vec<&str> = ms.iter().map(String::as_str).collect();
    let c = catalogue(&refs);
    let svg = graph_svg(&c);
    let bad = problems(&svg);
    assert!(bad.is_empty(), "{bad:#?}");
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let y = |id: &str| -> f64 {
        doc.descendants()
            .find(|n| n.attribute("data-id") == Some(id))
            .and_then(|g| g.children().find(|c| c.has_tag_name("rect")))
            .and_then(|r| r.attribute("y")?.parse().ok())
            .unwrap()
    };
    // Each consumer a row above what it consumes; seats in the bottom row.
    for i in 1..12 {
        assert!(y(&format!("module:m{i}")) < y(&format!("module:m{}", i - 1)));
    }
    assert_eq!(y("seat:s0"), y("seat:mesh-build-machine"));
    assert!(y("module:m0") < y("seat:s0"));
}

#[test]
fn the_checker_sees_an_overlap_and_an_edge_through_a_box() {
    // Guards on the guard: a drawing that breaks each rule is caught.
    let head =
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="400" height="300" font-size="13">"#;
    let node = |id: &str, x: i64, y: i64| {
        format!(
            r#"<g class="node module" data-id="{id}"><rect x="{x}" y="{y}" width="60" height="36"/><text x="{}" y="{}" text-anchor="middle">{id}</text></g>"#,
            x + 30,
            y + 22
        )
    };
    let edge = |from: &str, to: &str, pts: &str| {
        format!(
            r#"<g class="edge" data-from="{from}" data-to="{to}"><polyline points="{pts}" marker-end="url(#a)"/></g>"#
        )
    };
    let good = format!(
        "{head}{}{}{}{}</svg>",
        node("a", 10, 10),
        node("b", 10, 200),
        node("c", 200, 100),
        edge("a", "b", "40,46 40,200")
    );
    assert_eq!(problems(&good), Vec::<String>::new());
    let through = format!(
        "{head}{}{}{}{}</svg>",
        node("a", 10, 10),
        node("b", 10, 200),
        node("c", 10, 100),
        edge("a", "b", "40,46 40,200")
    );
    let bad = problems(&through);
    assert!(
        bad.len() == 1 && bad[0].contains("crosses node module c"),
        "{bad:?}"
    );
    let overlap = format!("{head}{}{}</svg>", node("a", 10, 10), node("b", 50, 30));
    let bad = problems(&overlap);
    assert!(bad.iter().any(|b| b.contains("overlaps")), "{bad:?}");
    // Along a border is not through; a text wider than its box sticks out.
    let along = format!(
        "{head}{}{}{}{}</svg>",
        node("a", 10, 10),
        node("b", 10, 200),
        node("c", 40, 100),
        edge("a", "b", "40,46 40,200")
    );
    assert_eq!(problems(&along), Vec::<String>::new());
    let long = format!("{head}{}</svg>", node("a-very-long-name", 10, 10));
    let bad = problems(&long);
    assert!(bad.iter().any(|b| b.contains("sticks out")), "{bad:?}");
    let off = format!(
        "{head}{}{}{}</svg>",
        node("a", 10, 10),
        node("b", 10, 200),
        edge("a", "b", "40,60 40,200")
    );
    let bad = problems(&off);
    assert!(
        bad.iter().any(|b| b.contains("not on the box of a")),
        "{bad:?}"
    );
}

#[test]
fn placement_is_least_squares_within_the_separations() {
    use super::layout::isotonic;
    // Room enough: each where it wants.
    assert_eq!(isotonic(&[(0.0, 1.0), (100.0, 1.0)], &[10]), [0.0, 100.0]);
    // Both want 0: they share the shortfall, weighted.
    assert_eq!(isotonic(&[(0.0, 1.0), (0.0, 1.0)], &[10]), [-5.0, 5.0]);
    assert_eq!(isotonic(&[(0.0, 3.0), (0.0, 1.0)], &[8]), [-2.0, 6.0]);
    // A violation further right pools with the block before it.
    assert_eq!(
        isotonic(&[(0.0, 1.0), (50.0, 1.0), (40.0, 1.0)], &[5, 10]),
        [0.0, 40.0, 50.0]
    );
    assert_eq!(
        isotonic(&[(9.0, 1.0), (0.0, 1.0), (0.0, 1.0)], &[4, 4]),
        [-1.0, 3.0, 7.0]
    );
    // In order already, however unequal the weights: left alone.
    assert_eq!(isotonic(&[(1.0, 4.0), (2.0, 0.5)], &[0]), [1.0, 2.0]);
}

#[test]
fn a_label_sits_halfway_along_its_edge() {
    // a -> b -> c -> d, and a -> d labelled: three layers apart, its label
    // in the gap between b and c.
    let node = |id: &str| GraphNode {
        id: id.into(),
        kind: NodeKind::Module,
        label: id.into(),
    };
    let edge = |from: &str, to: &str, label: &str| Edge {
        from: from.into(),
        to: to.into(),
        kind: EdgeKind::Consumes,
        label: label.into(),
        dangling: false,
    };
    let g = Graph {
        nodes: ["a", "b", "c", "d"].map(node).to_vec(),
        edges: vec![
            edge("a", "b", "x"),
            edge("b", "c", "y"),
            edge("c", "d", "z"),
            edge("a", "d", "far"),
        ],
    };
    let svg = g.svg();
    assert_eq!(problems(&svg), Vec::<String>::new());
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let num =
        |n: roxmltree::Node<'_, '_>, a: &str| -> i64 { n.attribute(a).unwrap().parse().unwrap() };
    let rect = |pred: &dyn Fn(roxmltree::Node<'_, '_>) -> bool| {
        let g = doc.descendants().find(|n| pred(*n)).unwrap();
        g.children().find(|c| c.has_tag_name("rect")).unwrap()
    };
    let b = rect(&|n| n.attribute("data-id") == Some("b"));
    let c = rect(&|n| n.attribute("data-id") == Some("c"));
    let far =
        rect(&|n| n.attribute("data-from") == Some("a") && n.attribute("data-to") == Some("d"));
    assert!(num(far, "y") > num(b, "y") + num(b, "height"), "{svg}");
    assert!(num(far, "y") + num(far, "height") < num(c, "y"), "{svg}");
}

#[test]
fn a_label_two_layers_along_sits_in_the_upper_gap() {
    // Of two gaps the edge crosses, the one nearer its upper end.
    let node = |id: &str| GraphNode {
        id: id.into(),
        kind: NodeKind::Module,
        label: id.into(),
    };
    let edge = |from: &str, to: &str, label: &str| Edge {
        from: from.into(),
        to: to.into(),
        kind: EdgeKind::Calls,
        label: label.into(),
        dangling: false,
    };
    let g = Graph {
        nodes: ["a", "b", "c"].map(node).to_vec(),
        edges: vec![
            edge("a", "b", "x"),
            edge("b", "c", "y"),
            edge("a", "c", "far"),
        ],
    };
    let svg = g.svg();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let y = |pred: &dyn Fn(roxmltree::Node<'_, '_>) -> bool| -> i64 {
        let g = doc.descendants().find(|n| pred(*n)).unwrap();
        let r = g.children().find(|c| c.has_tag_name("rect")).unwrap();
        r.attribute("y").unwrap().parse().unwrap()
    };
    let b = y(&|n| n.attribute("data-id") == Some("b"));
    let a = y(&|n| n.attribute("data-id") == Some("a"));
    let far = y(&|n| n.attribute("data-from") == Some("a") && n.attribute("data-to") == Some("c"));
    assert!(a < far && far < b, "{svg}");
}

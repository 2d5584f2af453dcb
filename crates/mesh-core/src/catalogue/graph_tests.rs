use super::*;
use crate::testing::catalogue;

const GIT: &str = r#"
[module]
name = "git-server"

[[seat]]
name = "git"
scope = "mesh"
protocol = "git"
emits = ["pushed"]
tools = ["clone"]

[holds]
seats = ["git"]
"#;

const NOTIFIER: &str = r#"
[module]
name = "notifier"

[events]
consumes = ["seat:git.pushed", "seat:mesh-build-machine.built", "watcher.seen", "git-server.gone"]

[tools]
uses = ["seat:git.clone", "git-server.nothing"]

[uses]
seats = ["mesh-build-machine"]
"#;

fn edge(g: &Graph, from: &str, to: &str, kind: EdgeKind, label: &str) -> Option<bool> {
    g.edges
        .iter()
        .find(|e| e.from == from && e.to == to && e.kind == kind && e.label == label)
        .map(|e| e.dangling)
}

#[test]
fn modules_seats_and_their_edges_with_dangling_ones_marked() {
    let g = graph(&catalogue(&[GIT, NOTIFIER]));
    let ids: Vec<(&str, NodeKind)> = g.nodes.iter().map(|n| (n.id.as_str(), n.kind)).collect();
    assert_eq!(
        ids,
        [
            ("missing:watcher", NodeKind::Missing),
            ("module:git-server", NodeKind::Module),
            ("module:notifier", NodeKind::Module),
            ("seat:git", NodeKind::Seat),
            ("seat:mesh-build-machine", NodeKind::Role),
        ]
    );
    let n = "module:notifier";
    assert_eq!(
        edge(&g, "module:git-server", "seat:git", EdgeKind::Holds, ""),
        Some(false)
    );
    assert_eq!(
        edge(&g, n, "seat:git", EdgeKind::Consumes, "pushed"),
        Some(false)
    );
    assert_eq!(
        edge(
            &g,
            n,
            "seat:mesh-build-machine",
            EdgeKind::Consumes,
            "built"
        ),
        Some(false)
    );
    assert_eq!(
        edge(&g, n, "seat:mesh-build-machine", EdgeKind::Uses, ""),
        Some(false)
    );
    assert_eq!(
        edge(&g, n, "seat:git", EdgeKind::Calls, "clone"),
        Some(false)
    );
    // Not registered, or registered without emitting or serving it.
    assert_eq!(
        edge(&g, n, "missing:watcher", EdgeKind::Consumes, "seen"),
        Some(true)
    );
    assert_eq!(
        edge(&g, n, "module:git-server", EdgeKind::Consumes, "gone"),
        Some(true)
    );
    assert_eq!(
        edge(&g, n, "module:git-server", EdgeKind::Calls, "nothing"),
        Some(true)
    );
    assert_eq!(g.edges.len(), 8, "{:#?}", g.edges);
}

#[test]
fn a_claim_on_an_undeclared_seat_points_at_a_missing_node() {
    let g = graph(&catalogue(&[
        "[module]\nname = \"fw\"\n[holds]\nseats = [\"packet-filter\"]\n",
    ]));
    assert_eq!(
        edge(
            &g,
            "module:fw",
            "missing:seat:packet-filter",
            EdgeKind::Holds,
            ""
        ),
        Some(true)
    );
}

#[test]
fn dot_names_every_node_and_edge_and_quotes_them() {
    let g = graph(&catalogue(&[GIT, NOTIFIER]));
    let dot = g.dot();
    assert!(dot.starts_with("digraph catalogue {\n"), "{dot}");
    assert!(dot.ends_with("}\n"));
    assert_eq!(dot.matches(" -> ").count(), g.edges.len());
    assert!(dot.contains(
        r#""module:notifier" -> "missing:watcher" [label="consumes seen (dangling)", color=red, style=dashed];"#
    ), "{dot}");
    assert!(dot.contains(
        r#""seat:mesh-build-machine" [label="role mesh-build-machine", style="rounded,bold"];"#
    ));
    assert_eq!(dot_quote("a\"b\\c"), r#""a\"b\\c""#);
    // A control character would end the line or confuse a terminal.
    assert_eq!(dot_quote("a\u{1}b\nc"), r#""ab\nc""#);
    assert_eq!(graph_dot(&catalogue(&[GIT, NOTIFIER])), dot);
}

#[test]
fn svg_parses_as_xml_with_one_element_per_node_and_edge() {
    let c = catalogue(&[GIT, NOTIFIER]);
    let g = graph(&c);
    let text = graph_svg(&c);
    assert_eq!(
        text,
        graph_svg(&c),
        "the same catalogue draws the same bytes"
    );
    let doc = roxmltree::Document::parse(&text).expect("the SVG is XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    let class = |n: &roxmltree::Node<'_, '_>, c: &str| {
        n.attribute("class")
            .is_some_and(|a| a.split(' ').any(|x| x == c))
    };
    let groups: Vec<_> = root.children().filter(|n| n.has_tag_name("g")).collect();
    assert_eq!(
        groups.iter().filter(|n| class(n, "node")).count(),
        g.nodes.len()
    );
    assert_eq!(
        groups.iter().filter(|n| class(n, "edge")).count(),
        g.edges.len()
    );
    assert_eq!(
        groups.iter().filter(|n| class(n, "dangling")).count(),
        g.edges.iter().filter(|e| e.dangling).count()
    );
    // Every edge is a polyline with an arrowhead.
    for e in groups.iter().filter(|n| class(n, "edge")) {
        let line = e.children().find(|c| c.has_tag_name("polyline")).unwrap();
        assert!(
            line.attribute("marker-end")
                .unwrap()
                .starts_with("url(#arrow")
        );
    }
    // Modules sit above the seats they point at (SVG y grows downwards).
    let y = |id: &str| -> i64 {
        let g = groups
            .iter()
            .find(|n| n.attribute("data-id") == Some(id))
            .unwrap();
        let rect = g.children().find(|c| c.has_tag_name("rect")).unwrap();
        rect.attribute("y").unwrap().parse().unwrap()
    };
    assert!(y("module:git-server") < y("seat:git"));
    // notifier consumes git-server's events: one row further up.
    assert!(y("module:notifier") < y("module:git-server"));
}

#[test]
fn names_and_labels_are_escaped() {
    let g = Graph {
        nodes: vec![GraphNode {
            id: "module:<a&b>".into(),
            kind: NodeKind::Module,
            label: "\"<x>'&\u{1}".into(),
        }],
        edges: vec![],
    };
    let text = g.svg();
    let doc = roxmltree::Document::parse(&text).expect("escaped text is XML");
    let t = doc
        .descendants()
        .filter(|n| n.attribute("data-id").is_some())
        .flat_map(|n| n.descendants())
        .find(|n| n.has_tag_name("text"))
        .unwrap()
        .text()
        .unwrap();
    assert_eq!(t, "\"<x>'&");
    assert_eq!(xml_escape_for_test("a<b"), "a&lt;b");
}

fn xml_escape_for_test(s: &str) -> String {
    svg::xml_escape(s)
}

#[test]
fn a_cycle_of_consumers_still_draws() {
    let a = "[module]\nname = \"a\"\n[events]\nemits = [\"x\"]\nconsumes = [\"b.y\"]\n";
    let b = "[module]\nname = \"b\"\n[events]\nemits = [\"y\"]\nconsumes = [\"a.x\"]\n";
    let c = catalogue(&[a, b]);
    let text = graph_svg(&c);
    assert!(roxmltree::Document::parse(&text).is_ok());
    assert_eq!(graph(&c).edges.iter().filter(|e| !e.dangling).count(), 2);
}

#[test]
fn versions_point_at_their_module_and_at_what_their_inputs_came_from() {
    use crate::artifact::Reference;
    let n = |s: &str| crate::names::Name::new(s).unwrap();
    let hex = |c: char| c.to_string().repeat(64);
    let lib = Reference {
        module: n("git-server"),
        artifact: n("libgit"),
        sha256: hex('a'),
    };
    let stray = Reference {
        module: n("gone"),
        artifact: n("x"),
        sha256: hex('b'),
    };
    let published = published_by([
        (lib.clone(), n("git-server"), "1111111111111111".to_string()),
        // The same bytes published again later belong to the first.
        (lib.clone(), n("git-server"), "2222".to_string()),
    ]);
    let mut g = graph(&catalogue(&[GIT, NOTIFIER]));
    g.add_versions(
        &[
            VersionInputs {
                module: n("git-server"),
                version: "1111111111111111".into(),
                inputs: vec![],
            },
            VersionInputs {
                module: n("notifier"),
                version: "abc".into(),
                inputs: vec![lib.clone(), stray.clone()],
            },
        ],
        &published,
    );
    let v1 = "version:git-server@1111111111111111";
    let v2 = "version:notifier@abc";
    let node = g.nodes.iter().find(|x| x.id == v1).unwrap();
    assert_eq!(
        (node.kind, node.label.as_str()),
        (NodeKind::Version, "git-server @ 111111111111")
    );
    assert_eq!(
        edge(&g, v1, "module:git-server", EdgeKind::VersionOf, ""),
        Some(false)
    );
    assert_eq!(
        edge(&g, v2, "module:notifier", EdgeKind::VersionOf, ""),
        Some(false)
    );
    assert_eq!(edge(&g, v2, v1, EdgeKind::BuiltOn, "libgit"), Some(false));
    let missing = format!("missing:{stray}");
    assert_eq!(edge(&g, v2, &missing, EdgeKind::BuiltOn, "x"), Some(true));
    assert!(!g.nodes.iter().any(|x| x.id == "version:git-server@2222"));
    let mut sorted = g.nodes.clone();
    sorted.sort();
    assert_eq!(
        g.nodes, sorted,
        "nodes stay sorted: same records, same bytes"
    );

    let dot = g.dot();
    assert!(dot.contains(r#""version:notifier@abc" -> "version:git-server@1111111111111111" [label="built on libgit"];"#), "{dot}");
    let svg = g.svg();
    assert_eq!(super::svg_check::problems(&svg), Vec::<String>::new());
    assert!(svg.contains(r#"data-kind="built-on""#) && svg.contains("built version"));
    // Without versions the legend stays as it was.
    assert!(!graph(&catalogue(&[GIT])).svg().contains("built version"));
}

//! `mesh catalogue graph`: the example catalogue and the registered one,
//! as DOT, SVG (parsed as XML) and JSON; dangling consumers marked; the
//! SVG readable: no box or label over another, no edge through a box.

mod cli;
// The same checker mesh-core's layout tests use, read from the SVG alone.
#[path = "../../mesh-core/src/catalogue/graph_svg_check.rs"]
#[allow(dead_code)]
mod svg_check;

use std::fs;

use cli::{mesh, ok};

fn catalogue() -> std::path::PathBuf {
    cli::examples()
}

#[test]
fn the_example_catalogue_draws_as_dot_svg_and_json() {
    let dir = catalogue();
    let dir = dir.to_str().unwrap();
    let json: serde_json::Value = serde_json::from_str(&ok(&mesh(&[
        "catalogue",
        "graph",
        "--catalogue",
        dir,
        "--format",
        "json",
    ])))
    .unwrap();
    let nodes = json["nodes"].as_array().unwrap();
    let edges = json["edges"].as_array().unwrap();
    assert!(
        nodes
            .iter()
            .any(|n| n["id"] == "module:notifier" && n["kind"] == "module")
    );
    // notifier consumes audit-log's entry-written, which audit-log emits.
    assert!(
        edges.iter().any(|e| e["from"] == "module:notifier"
            && e["to"] == "module:audit-log"
            && e["kind"] == "consumes"
            && e["label"] == "entry-written"
            && e["dangling"] == false),
        "{edges:#?}"
    );

    let dot = ok(&mesh(&["catalogue", "graph", "--catalogue", dir]));
    assert!(dot.starts_with("digraph catalogue {"));
    assert_eq!(dot.matches(" -> ").count(), edges.len());

    let svg = ok(&mesh(&[
        "catalogue",
        "graph",
        "--catalogue",
        dir,
        "--format",
        "svg",
    ]));
    let doc = roxmltree::Document::parse(&svg).expect("the SVG is XML");
    let count = |class: &str| {
        doc.root_element()
            .children()
            .filter(|n| {
                n.attribute("class")
                    .is_some_and(|c| c.split(' ').any(|x| x == class))
            })
            .count()
    };
    assert_eq!(count("node"), nodes.len());
    assert_eq!(count("edge"), edges.len());
}

#[test]
fn the_example_catalogue_svg_has_no_overlap_and_no_edge_through_a_box() {
    let dir = catalogue();
    let svg = ok(&mesh(&[
        "catalogue",
        "graph",
        "--format",
        "svg",
        "--catalogue",
        dir.to_str().unwrap(),
    ]));
    let bad = svg_check::problems(&svg);
    assert!(bad.is_empty(), "{} problems: {bad:#?}", bad.len());
    let doc = roxmltree::Document::parse(&svg).unwrap();
    // Every module of the example catalogue is drawn, with its label in
    // its box (the checker saw the label inside it).
    let labels: Vec<&str> = doc
        .descendants()
        .filter(|n| n.attribute("class").is_some_and(|c| c == "node module"))
        .filter_map(|g| g.descendants().find(|t| t.has_tag_name("text"))?.text())
        .collect();
    assert!(labels.len() >= 14, "{labels:?}");
    // An edge between adjacent rows leaves the bottom of its source and
    // enters the top of its target: git-server holds seat git.
    let rect = |id: &str| {
        let r = doc
            .descendants()
            .find(|n| n.attribute("data-id") == Some(id))
            .and_then(|g| g.children().find(|c| c.has_tag_name("rect")))
            .unwrap();
        let f = |a: &str| -> f64 { r.attribute(a).unwrap().parse().unwrap() };
        (f("y"), f("y") + f("height"))
    };
    let holds = doc
        .descendants()
        .find(|n| {
            n.attribute("data-from") == Some("module:git-server")
                && n.attribute("data-to") == Some("seat:git")
        })
        .and_then(|g| g.descendants().find(|c| c.has_tag_name("polyline")))
        .unwrap();
    let pts = svg_check::points(holds);
    assert_eq!(pts[0].1, rect("module:git-server").1, "{pts:?}");
    assert_eq!(pts[pts.len() - 1].1, rect("seat:git").0, "{pts:?}");
    // nats-broker and its role are a part of their own, nothing pulls
    // them towards the rest: slid left, they stand one box gap (28) from
    // the box left of them in their row instead of floating off to the
    // right.
    let boxes: Vec<(String, f64, f64, f64)> = doc
        .descendants()
        .filter_map(|n| {
            let id = n.attribute("data-id")?;
            let r = n.children().find(|c| c.has_tag_name("rect"))?;
            let num = |a: &str| r.attribute(a)?.parse::<f64>().ok();
            Some((id.to_string(), num("x")?, num("y")?, num("width")?))
        })
        .collect();
    let broker = boxes.iter().find(|b| b.0 == "module:nats-broker").unwrap();
    let left = boxes
        .iter()
        .filter(|b| b.2 == broker.2 && b.1 < broker.1)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap();
    let gap = broker.1 - left.1 - left.3;
    assert_eq!(
        gap, 28.0,
        "{} stands {gap} from {}: {svg}",
        broker.0, left.0
    );
}

#[test]
fn a_consumer_of_an_event_nobody_emits_is_drawn_dangling() {
    let tmp = tempfile::tempdir().unwrap();
    let m = tmp.path().join("listener");
    fs::create_dir_all(&m).unwrap();
    fs::write(
        m.join("mesh.toml"),
        "[module]\nname = \"listener\"\n[events]\nconsumes = [\"ghost.boo\"]\n",
    )
    .unwrap();
    let dot = ok(&mesh(&[
        "catalogue",
        "graph",
        "--catalogue",
        tmp.path().to_str().unwrap(),
    ]));
    assert!(
        dot.contains(r#""module:listener" -> "missing:ghost" [label="consumes boo (dangling)", color=red, style=dashed];"#),
        "{dot}"
    );
}

#[test]
fn the_registered_catalogue_is_drawn_by_default() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    let port = mesh_testkit::broker::free_port().unwrap().to_string();
    // Registering changes a store that exists; `mesh init` makes it.
    ok(&mesh(&[
        "init",
        "--dir",
        dir.to_str().unwrap(),
        "--port",
        &port,
    ]));
    let store = format!("sqlite://{}", dir.join("mesh.db").display());
    ok(&mesh(&[
        "catalogue",
        "register",
        catalogue().to_str().unwrap(),
        "--store",
        &store,
    ]));
    let from_store = ok(&mesh(&["catalogue", "graph", "--store", &store]));
    let from_disk = ok(&mesh(&[
        "catalogue",
        "graph",
        "--catalogue",
        catalogue().to_str().unwrap(),
    ]));
    // The same modules and edges, whichever it was read from.
    assert_eq!(from_store, from_disk);
    assert!(from_store.contains("\"module:echo\""));
}

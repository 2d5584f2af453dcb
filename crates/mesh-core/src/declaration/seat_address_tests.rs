use std::collections::BTreeMap;

use super::*;
use crate::declaration::{ComposeError, Inputs, NoSecrets, compose_modules};
use crate::testing::n;

fn holder_of(module: &str, seat: &str, scope: &str) -> String {
    format!(
        r#"
[module]
name = "{module}"
[run]
command = ["{module}"]
[[seat]]
name = "{seat}"
scope = "{scope}"
protocol = "http"
[holds]
seats = ["{seat}"]
"#
    )
}

const APP: &str = r#"
[module]
name = "app"
[run]
command = ["app", "--filter", "${seat:filter:8080}"]
env = { DB = "${seat:db:5432}" }
"#;

fn catalogue() -> Catalogue {
    crate::testing::catalogue(&[
        &holder_of("nft", "filter", "node"),
        &holder_of("pg", "db", "mesh"),
        APP,
    ])
}

fn records(assign: &[(&str, &str)]) -> Records {
    Records {
        nodes: vec![n("n1"), n("n2"), n("n3")],
        assignments: assign
            .iter()
            .map(|(nd, m)| Assignment::new(n(nd), n(m)))
            .collect(),
        ..Records::default()
    }
}

/// `app` composed on `node`: its command and env, or why it is left out.
fn app_on(c: &Catalogue, r: &Records, node: &str) -> Result<(String, String), ComposeError> {
    let addresses = BTreeMap::from([
        (n("n1"), "10.0.0.1".to_string()),
        (n("n2"), "10.0.0.2".to_string()),
        (n("n3"), "10.0.0.3".to_string()),
    ]);
    let (none, ports, keys) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    let inputs = Inputs {
        catalogue: c,
        records: r,
        versions: &BTreeMap::new(),
        addresses: &addresses,
        users_file: Err("none"),
        left_out: &none,
        seat_ports: &ports,
        secrets: &NoSecrets,
        keys: &keys,
    };
    let mut composed = compose_modules(&inputs, &n(node));
    if let Some(m) = composed.modules.iter().find(|m| m.name == n("app")) {
        return Ok((m.run.command[2].clone(), m.run.env["DB"].clone()));
    }
    let i = composed
        .left_out
        .iter()
        .position(|e| e.module() == &n("app"))
        .expect("app is assigned there");
    Err(composed.left_out.swap_remove(i))
}

#[test]
fn a_node_scoped_seat_is_addressed_at_the_holder_on_the_modules_own_node() {
    let c = catalogue();
    // n2's holder is found first in the records; app on n1 must still get
    // n1's own.
    let r = records(&[
        ("n2", "nft"),
        ("n1", "nft"),
        ("n3", "pg"),
        ("n1", "app"),
        ("n2", "app"),
    ]);
    let (filter, db) = app_on(&c, &r, "n1").unwrap();
    assert_eq!(
        (filter.as_str(), db.as_str()),
        ("10.0.0.1:8080", "10.0.0.3:5432")
    );
    let (filter, db) = app_on(&c, &r, "n2").unwrap();
    assert_eq!(
        (filter.as_str(), db.as_str()),
        ("10.0.0.2:8080", "10.0.0.3:5432")
    );

    // A node without its own holder leaves app out there, saying so; the
    // holder on another node does not stand in for it.
    let r = records(&[("n2", "nft"), ("n3", "pg"), ("n1", "app"), ("n2", "app")]);
    let e = app_on(&c, &r, "n1").unwrap_err();
    assert!(
        matches!(&e, ComposeError::Unfilled { placeholder, .. } if placeholder == "${seat:filter:8080}"),
        "{e:?}"
    );
    assert!(
        e.to_string().contains(
            "seat filter is node-scoped and no module holding it is assigned to node n1; assign its holder to n1 first"
        ),
        "{e}"
    );
    assert!(app_on(&c, &r, "n2").is_ok());
}

#[test]
fn a_mesh_scoped_seat_is_addressed_at_its_one_holder_wherever_it_runs() {
    let c = catalogue();
    let r = records(&[("n1", "nft"), ("n1", "app")]);
    assert_eq!(
        holder(&c, &r, &n("db"), &n("n1")).unwrap_err(),
        "no module holding seat db is assigned to any node; assign its holder first"
    );
    let r = records(&[("n2", "pg"), ("n1", "nft"), ("n1", "app")]);
    assert_eq!(
        holder(&c, &r, &n("db"), &n("n1")),
        Ok(&Assignment::new(n("n2"), n("pg")))
    );
}

#[test]
fn unassigning_a_holder_names_the_modules_it_leaves_without_an_address() {
    let c = catalogue();
    let before = records(&[
        ("n1", "nft"),
        ("n2", "nft"),
        ("n3", "pg"),
        ("n1", "app"),
        ("n2", "app"),
    ]);
    // The mesh seat's holder unassigned: app on both nodes loses db.
    let after = records(&[("n1", "nft"), ("n2", "nft"), ("n1", "app"), ("n2", "app")]);
    let pg = Assignment::new(n("n3"), n("pg"));
    let want = |node: &str, seat: &str, holder: &Assignment| Unaddressed {
        module: n("app"),
        node: n(node),
        node_scoped: seat == "filter",
        seat: n(seat),
        holder: holder.clone(),
    };
    let got = left_without_address((&c, &before), (&c, &after));
    assert_eq!(got, [want("n1", "db", &pg), want("n2", "db", &pg)]);
    assert_eq!(
        got[0].remedy(),
        "`mesh assign pg NODE --move-from n3` moves the holder in one step, leaving nobody without an address"
    );
    // n2's packet filter unassigned: only app on n2 loses it.
    let after = records(&[("n1", "nft"), ("n3", "pg"), ("n1", "app"), ("n2", "app")]);
    let got = left_without_address((&c, &before), (&c, &after));
    assert_eq!(
        got,
        [want("n2", "filter", &Assignment::new(n("n2"), n("nft")))]
    );
    assert_eq!(
        got[0].to_string(),
        "app on n2 is left without an address for seat filter (held by nft on n2 until now)"
    );
    assert_eq!(
        got[0].remedy(),
        "assign a holder of seat filter to n2 (`mesh assign MODULE n2`)"
    );
    // Moved in one change: nobody is left without one.
    let after = records(&[
        ("n1", "nft"),
        ("n2", "nft"),
        ("n1", "pg"),
        ("n1", "app"),
        ("n2", "app"),
    ]);
    assert!(left_without_address((&c, &before), (&c, &after)).is_empty());
    // A module without a holder before is not the change's doing, and an
    // unassigned user is left out of nothing.
    let before = records(&[("n1", "nft"), ("n1", "app"), ("n2", "app")]);
    let after = records(&[("n1", "nft"), ("n1", "app"), ("n2", "app"), ("n3", "nft")]);
    assert!(left_without_address((&c, &before), (&c, &after)).is_empty());
    let before = records(&[("n1", "nft"), ("n3", "pg"), ("n1", "app")]);
    let after = records(&[("n1", "nft")]);
    assert!(left_without_address((&c, &before), (&c, &after)).is_empty());
}

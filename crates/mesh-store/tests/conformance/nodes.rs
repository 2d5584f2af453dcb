//! Nodes: ports, heartbeats, and forgetting a node with everything that names it.

use std::time::Duration;

use mesh_core::authority::PrincipalKind;

use crate::fixture::*;
use mesh_store::*;

async fn nodes_round_trip(fx: &Fixture) {
    let s = &fx.store;
    let added = s.add_node(&n("n1"), &[4222, 22, 4222]).await.unwrap();
    assert_eq!(added.ports, vec![22, 4222], "sorted, deduplicated");
    s.add_node(&n("n0"), &[]).await.unwrap();

    let got = s.node(&n("n1")).await.unwrap().expect("n1 recorded");
    assert_eq!(got, added);
    assert_eq!(got.public_key, None);

    match s.add_node(&n("n1"), &[]).await {
        Err(StoreError::AlreadyExists { what: "node", .. }) => {}
        other => panic!("adding n1 twice: {other:?}"),
    }
    match s.add_node(&n("n2"), &[0]).await {
        Err(StoreError::Invalid { .. }) => {}
        other => panic!("port 0: {other:?}"),
    }

    s.set_node_ports(&n("n1"), &[5432]).await.unwrap();
    s.node_seen(&n("n1"), 1_700_000_000_000).await.unwrap();
    let got = s.node(&n("n1")).await.unwrap().unwrap();
    assert_eq!(got.ports, vec![5432]);
    assert_eq!(got.last_seen_at, Some(1_700_000_000_000));

    match s.node_seen(&n("ghost"), 1).await {
        Err(StoreError::NotFound { what: "node", .. }) => {}
        other => panic!("heartbeat of an unknown node: {other:?}"),
    }
    assert_eq!(s.node(&n("ghost")).await.unwrap(), None);

    let names: Vec<String> = s
        .nodes()
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.name.to_string())
        .collect();
    assert_eq!(names, ["n0", "n1"]);
}

async fn forgetting_a_node_leaves_none_of_its_credentials(fx: &Fixture) {
    let s = &fx.store;
    for node in ["n1", "n2"] {
        s.add_node(&n(node), &[4222]).await.unwrap();
    }
    for module in ["audit-log", "git"] {
        s.register_module(&n(module), "x").await.unwrap();
        for node in ["n1", "n2"] {
            s.assign(&n(node), &n(module)).await.unwrap();
            let m = PrincipalKind::Module {
                node: n(node),
                module: n(module),
            };
            record_key(s, &m).await.unwrap();
        }
    }
    for node in ["n1", "n2"] {
        record_key(s, &PrincipalKind::Host { node: n(node) })
            .await
            .unwrap();
    }
    s.issue_token(&n("n1"), Duration::from_secs(60))
        .await
        .unwrap();
    s.record_declaration(&Declaration {
        node: n("n1"),
        version: 1,
        digest: "sha256:00".into(),
        body: "{}".into(),
    })
    .await
    .unwrap();
    s.record_report(&git_running_on_n1(1)).await.unwrap();

    let forgotten = s.forget_node(&n("n1")).await.unwrap();
    assert_eq!(
        forgotten.credentials,
        ["host_n1", "module_n1_audit-log", "module_n1_git"]
    );
    assert_eq!(forgotten.assignments, 2);

    let left = principals(s).await;
    assert_eq!(left, ["host_n2", "module_n2_audit-log", "module_n2_git"]);
    assert_eq!(s.node(&n("n1")).await.unwrap(), None);
    assert!(
        s.assignments()
            .await
            .unwrap()
            .iter()
            .all(|a| a.node != n("n1"))
    );
    assert!(s.live_tokens().await.unwrap().is_empty());
    assert_eq!(s.latest_report(&n("n1")).await.unwrap(), None);
    assert_eq!(s.latest_declaration(&n("n1")).await.unwrap(), None);

    match s.forget_node(&n("n1")).await {
        Err(StoreError::NotFound { what: "node", .. }) => {}
        other => panic!("forgetting twice: {other:?}"),
    }
    // The name is free again.
    s.add_node(&n("n1"), &[]).await.unwrap();
}

/// The revision moves with every record authority is derived from, and
/// not with what heartbeats, reports and declarations write.
async fn the_records_revision_moves_with_records_only(fx: &Fixture) {
    let s = &fx.store;
    let mut last = s.records_revision().await.unwrap();
    let mut moved = |now: i64, what: &str| {
        assert!(
            now > last,
            "{what} must move the revision ({last} -> {now})"
        );
        last = now;
    };
    s.add_node(&n("n1"), &[]).await.unwrap();
    moved(s.records_revision().await.unwrap(), "adding a node");
    s.set_node_ports(&n("n1"), &[8080]).await.unwrap();
    moved(s.records_revision().await.unwrap(), "ports");
    s.issue_token(&n("n1"), std::time::Duration::from_secs(60))
        .await
        .unwrap();
    moved(s.records_revision().await.unwrap(), "a token");
    s.put_person(&n("ann"), &mesh_core::records::ToolAccess::All)
        .await
        .unwrap();
    moved(s.records_revision().await.unwrap(), "a person");

    let still = s.records_revision().await.unwrap();
    s.node_seen(&n("n1"), 5).await.unwrap();
    assert_eq!(
        s.nodes_seen(&[(n("n1"), 9), (n("gone"), 9)]).await.unwrap(),
        1
    );
    // Never backwards.
    assert_eq!(s.nodes_seen(&[(n("n1"), 7)]).await.unwrap(), 0);
    assert_eq!(
        s.node(&n("n1")).await.unwrap().unwrap().last_seen_at,
        Some(9)
    );
    assert_eq!(
        s.records_revision().await.unwrap(),
        still,
        "last seen changes no principal"
    );

    s.forget_node(&n("n1")).await.unwrap();
    moved(s.records_revision().await.unwrap(), "forgetting a node");
}

/// The live composition is recorded forward only, and recording it moves
/// no revision (else confirming a composition would ask for another).
async fn the_live_composition_only_moves_forward(fx: &Fixture) {
    let s = &fx.store;
    assert_eq!(s.composition_live().await.unwrap(), None);
    let revision = s.records_revision().await.unwrap();
    s.record_composition_live(7, 100).await.unwrap();
    let live = |r, at| {
        Some(mesh_store::LiveComposition {
            records_revision: r,
            live_at: at,
        })
    };
    assert_eq!(s.composition_live().await.unwrap(), live(7, 100));
    s.record_composition_live(5, 200).await.unwrap();
    assert_eq!(
        s.composition_live().await.unwrap(),
        live(7, 100),
        "an older revision confirmed later does not take it back"
    );
    s.record_composition_live(9, 300).await.unwrap();
    assert_eq!(s.composition_live().await.unwrap(), live(9, 300));
    assert_eq!(s.records_revision().await.unwrap(), revision);
}

/// Which records the declarations are composed from is recorded forward
/// only, and recording it moves no revision (else every pass would ask for
/// another).
async fn the_declared_revision_only_moves_forward(fx: &Fixture) {
    let s = &fx.store;
    assert_eq!(s.declared_through().await.unwrap(), None);
    let revision = s.records_revision().await.unwrap();
    s.record_declared_through(7, 100).await.unwrap();
    assert_eq!(s.declared_through().await.unwrap(), Some(7));
    s.record_declared_through(5, 200).await.unwrap();
    assert_eq!(
        s.declared_through().await.unwrap(),
        Some(7),
        "an older pass finishing later does not take it back"
    );
    s.record_declared_through(9, 300).await.unwrap();
    assert_eq!(s.declared_through().await.unwrap(), Some(9));
    assert_eq!(s.records_revision().await.unwrap(), revision);
}

/// What is left out is replaced whole; a module left out again keeps when
/// it was first left out; a forgotten node takes its rows along; recording
/// it moves no revision.
async fn what_is_left_out_is_replaced_whole(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    s.add_node(&n("n2"), &[]).await.unwrap();
    let revision = s.records_revision().await.unwrap();
    assert!(s.left_out().await.unwrap().is_empty());
    let row = |node: &str, module: &str, why: &str| (n(node), n(module), why.to_string());
    s.record_left_out(&[row("n1", "echo", "a"), row("n2", "bus", "b")])
        .await
        .unwrap();
    assert_eq!(
        s.records_revision().await.unwrap(),
        revision,
        "what is left out is derived, not a record principals come from"
    );
    let got = s.left_out().await.unwrap();
    let view: Vec<(&str, &str, &str)> = got
        .iter()
        .map(|l| (l.node.as_str(), l.module.as_str(), l.reason.as_str()))
        .collect();
    assert_eq!(view, [("n1", "echo", "a"), ("n2", "bus", "b")]);
    let since = got[0].since;
    // echo stays left out with another reason; bus is declared again; a
    // row for a node nobody records is not kept.
    s.record_left_out(&[row("n1", "echo", "c"), row("n9", "x", "d")])
        .await
        .unwrap();
    let got = s.left_out().await.unwrap();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].reason.as_str(), got[0].since), ("c", since));
    s.forget_node(&n("n1")).await.unwrap();
    assert!(s.left_out().await.unwrap().is_empty());
    s.record_left_out(&[row("n2", "bus", "b")]).await.unwrap();
    s.record_left_out(&[]).await.unwrap();
    assert!(s.left_out().await.unwrap().is_empty());
}

/// Each kind of input moves its own revision and no other's: the
/// controller recomputes only what depends on what moved (a key given
/// never declares every node again; a secret never reloads the broker).
async fn each_kind_of_record_moves_its_own_revision(fx: &Fixture) {
    let s = &fx.store;
    let mut last = s.records_revisions().await.unwrap();
    assert_eq!(
        last.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "assignments",
            "builds",
            "bus",
            "catalogue",
            "credentials",
            "nodes",
            "persons",
            "secrets",
            "tokens"
        ]
    );
    let mut moved = async |what: &str, kinds: &[&str]| {
        let now = s.records_revisions().await.unwrap();
        let changed: Vec<&str> = now
            .iter()
            .filter(|(k, v)| last.get(*k) != Some(*v))
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(changed, kinds, "{what}");
        last = now;
    };
    s.add_node(&n("n1"), &[]).await.unwrap();
    moved("a node", &["nodes"]).await;
    s.set_node_ports(&n("n1"), &[8080]).await.unwrap();
    moved("ports", &["nodes"]).await;
    s.set_node_address(&n("n1"), Some("10.0.0.1"))
        .await
        .unwrap();
    moved("an address", &["nodes"]).await;
    s.node_seen(&n("n1"), 5).await.unwrap();
    moved("last seen", &[]).await;
    s.issue_token(&n("n1"), Duration::from_secs(60))
        .await
        .unwrap();
    // With the hash its seed announces on RabbitMQ (a credential).
    moved("a token", &["credentials", "tokens"]).await;
    s.put_person(&n("ann"), &mesh_core::records::ToolAccess::All)
        .await
        .unwrap();
    moved("a person", &["persons"]).await;
    s.register_module(&n("web"), "[module]\nname = \"web\"\n")
        .await
        .unwrap();
    moved("a module", &["catalogue"]).await;
    s.assign(&n("n1"), &n("web")).await.unwrap();
    moved("an assignment", &["assignments"]).await;
    let key = nkeys::KeyPair::new_user().public_key();
    s.record_spare_keys(&[(n("n1"), vec![key.clone()])])
        .await
        .unwrap();
    moved("spare keys announced", &[]).await;
    s.give_keys(&[(n("n1"), n("web"), key)]).await.unwrap();
    moved("a key given", &["credentials"]).await;
    let sender = nkeys::XKey::new().public_key();
    s.set_secret(&n("db-password"), "c2VhbGVk", &sender)
        .await
        .unwrap();
    moved("a secret", &["secrets"]).await;
    s.set_bus_urls(&["tls://10.0.0.9:4333".to_string()])
        .await
        .unwrap();
    moved("the broker's address", &["bus"]).await;
    s.record_upload(&Upload {
        module: n("web"),
        version: "v1".into(),
        name: n("bin"),
        sha256: "a".repeat(64),
        size: 1,
        nuid: "N1".into(),
    })
    .await
    .unwrap();
    moved("an artifact put", &["builds"]).await;
    s.assign_version(&n("n1"), &n("web"), Some("v1"))
        .await
        .unwrap();
    moved("a version pinned", &["assignments"]).await;
    s.record_composition_live(1, 1).await.unwrap();
    s.record_left_out(&[]).await.unwrap();
    moved("what the controller records", &[]).await;
}

/// A move onto another bus: the addresses flipped with the move's record
/// in one change, once; then marked moved, once.
async fn a_bus_move_flips_the_addresses_with_its_record_once(fx: &Fixture) {
    let s = &fx.store;
    assert_eq!(s.bus_move().await.unwrap(), None);
    let before = s.records_revision().await.unwrap();
    let to = vec!["tls://127.0.0.1:4333".to_string()];
    s.confirm_bus_move(&to).await.unwrap();
    assert_eq!(s.bus_urls().await.unwrap(), Some(to.clone()));
    assert!(
        s.records_revision().await.unwrap() > before,
        "declarations change"
    );
    let m = s.bus_move().await.unwrap().unwrap();
    assert_eq!(
        (m.to_urls.clone(), m.moved_at, m.retired_at),
        (to.clone(), None, None)
    );
    // Retired only once moved: the old bus still carries the mesh.
    s.bus_retired().await.unwrap();
    assert_eq!(s.bus_move().await.unwrap().unwrap().retired_at, None);
    let e = s
        .confirm_bus_move(&["tls://other:1".into()])
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("bus move onto tls://127.0.0.1:4333"),
        "{e}"
    );
    assert_eq!(s.bus_urls().await.unwrap(), Some(to.clone()));
    s.bus_moved().await.unwrap();
    let moved = s.bus_move().await.unwrap().unwrap().moved_at;
    assert!(moved.is_some());
    s.bus_moved().await.unwrap();
    assert_eq!(s.bus_move().await.unwrap().unwrap().moved_at, moved);
    s.bus_retired().await.unwrap();
    let retired = s.bus_move().await.unwrap().unwrap().retired_at;
    assert!(retired.is_some());
    s.bus_retired().await.unwrap();
    assert_eq!(s.bus_move().await.unwrap().unwrap().retired_at, retired);
    assert!(s.confirm_bus_move(&[]).await.is_err());
}

conformance!(
    a_bus_move_flips_the_addresses_with_its_record_once,
    each_kind_of_record_moves_its_own_revision,
    what_is_left_out_is_replaced_whole,
    nodes_round_trip,
    forgetting_a_node_leaves_none_of_its_credentials,
    the_records_revision_moves_with_records_only,
    the_live_composition_only_moves_forward,
    the_declared_revision_only_moves_forward,
);

//! Assignments, and the module credential that goes with one.

use crate::fixture::*;
use mesh_store::*;

async fn unassigning_deletes_the_modules_credential(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    s.register_module(&n("git"), "x").await.unwrap();
    s.assign(&n("n1"), &n("git")).await.unwrap();
    s.assign(&n("n1"), &n("git")).await.unwrap(); // twice changes nothing
    assert_eq!(s.assignments().await.unwrap().len(), 1);
    let git = mesh_core::authority::PrincipalKind::Module {
        node: n("n1"),
        module: n("git"),
    };
    record_key(s, &git).await.unwrap();
    assert!(s.unassign(&n("n1"), &n("git")).await.unwrap());
    assert_eq!(s.credential("module_n1_git").await.unwrap(), None);
    assert!(!s.unassign(&n("n1"), &n("git")).await.unwrap());
    match s.assign(&n("n1"), &n("nope")).await {
        Err(StoreError::NotFound { what: "module", .. }) => {}
        other => panic!("assigning an unknown module: {other:?}"),
    }
}

/// A holder of the node-scoped seat `filter`; `declares` it too.
fn filter(module: &str, declares: bool) -> String {
    let seat = if declares {
        "[[seat]]\nname = \"filter\"\nscope = \"node\"\nprotocol = \"\"\n"
    } else {
        ""
    };
    format!("[module]\nname = \"{module}\"\n{seat}[holds]\nseats = [\"filter\"]\n")
}

/// `move_assignment` unassigns and assigns in one transaction: the module
/// keeps the version it ran, its credential on the old node goes, and a
/// move that cannot be made changes nothing.
async fn a_move_unassigns_and_assigns_in_one_step_keeping_the_version(fx: &Fixture) {
    let s = &fx.store;
    for node in ["n1", "n2", "n3"] {
        s.add_node(&n(node), &[]).await.unwrap();
    }
    s.register_module(&n("git"), "x").await.unwrap();
    for v in ["v1", "v2"] {
        s.record_module_version(&n("git"), v, None).await.unwrap();
    }
    s.assign_version(&n("n1"), &n("git"), Some("v1"))
        .await
        .unwrap();
    let on_n1 = mesh_core::authority::PrincipalKind::Module {
        node: n("n1"),
        module: n("git"),
    };
    record_key(s, &on_n1).await.unwrap();
    let pin = s
        .move_assignment(&n("n1"), &n("n2"), &n("git"), None)
        .await
        .unwrap();
    assert_eq!(pin.as_deref(), Some("v1"), "the version it ran");
    let placed = |a: Vec<Assignment>| -> Vec<(String, Option<String>)> {
        a.into_iter()
            .map(|a| (format!("{}@{}", a.module, a.node), a.version))
            .collect()
    };
    assert_eq!(
        placed(s.assignments().await.unwrap()),
        [("git@n2".to_string(), Some("v1".to_string()))]
    );
    assert_eq!(s.credential("module_n1_git").await.unwrap(), None);
    // Not where it is said to run: refused, nothing changed.
    match s.move_assignment(&n("n1"), &n("n3"), &n("git"), None).await {
        Err(StoreError::NotFound {
            what: "assignment",
            key,
        }) => assert_eq!(key, "git on n1"),
        other => panic!("moving from where it is not: {other:?}"),
    }
    match s.move_assignment(&n("n2"), &n("n9"), &n("git"), None).await {
        Err(StoreError::NotFound { what: "node", .. }) => {}
        other => panic!("moving to an unknown node: {other:?}"),
    }
    assert_eq!(
        placed(s.assignments().await.unwrap()),
        [("git@n2".to_string(), Some("v1".to_string()))]
    );
    // A version given is the pin.
    let pin = s
        .move_assignment(&n("n2"), &n("n3"), &n("git"), Some("v2"))
        .await
        .unwrap();
    assert_eq!(pin.as_deref(), Some("v2"));

    // A node-scoped seat's holder moved onto a node whose own holder is
    // another module: refused as `assign` refuses it, and it stays put.
    s.register_module(&n("nft-a"), &filter("nft-a", true))
        .await
        .unwrap();
    s.register_module(&n("nft-b"), &filter("nft-b", false))
        .await
        .unwrap();
    s.assign(&n("n1"), &n("nft-a")).await.unwrap();
    s.assign(&n("n2"), &n("nft-b")).await.unwrap();
    let before = placed(s.assignments().await.unwrap());
    match s
        .move_assignment(&n("n1"), &n("n2"), &n("nft-a"), None)
        .await
    {
        Err(StoreError::SeatHeld(c)) => assert!(
            c.to_string()
                .contains("module nft-b already holds it on node n2"),
            "{c}"
        ),
        other => panic!("a second holder on n2: {other:?}"),
    }
    assert_eq!(placed(s.assignments().await.unwrap()), before);
}

conformance!(
    unassigning_deletes_the_modules_credential,
    a_move_unassigns_and_assigns_in_one_step_keeping_the_version,
);

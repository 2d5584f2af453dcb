//! Declarations: only a newer version is recorded.

use crate::fixture::*;
use mesh_store::*;

async fn declarations_round_trip(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    assert_eq!(s.latest_declaration(&n("n1")).await.unwrap(), None);
    for v in [1, 2, 5] {
        s.record_declaration(&Declaration {
            node: n("n1"),
            version: v,
            digest: format!("sha256:{v}"),
            body: format!("{{\"version\":{v}}}"),
        })
        .await
        .unwrap();
    }
    let newest = s.latest_declaration(&n("n1")).await.unwrap().unwrap();
    assert_eq!(newest.version, 5);
    assert_eq!(newest.body, "{\"version\":5}");
    match s
        .record_declaration(&Declaration {
            node: n("n1"),
            version: 5,
            digest: "sha256:other".into(),
            body: "other".into(),
        })
        .await
    {
        Err(StoreError::StaleDeclaration {
            version: 5,
            newest: 5,
            ..
        }) => {}
        other => panic!("reusing a version: {other:?}"),
    }
    match s
        .record_declaration(&Declaration {
            node: n("ghost"),
            version: 1,
            digest: String::new(),
            body: String::new(),
        })
        .await
    {
        Err(StoreError::NotFound { what: "node", .. }) => {}
        other => panic!("declaration for an unknown node: {other:?}"),
    }
}

/// Declarations recorded together, each under the newer-than-newest rule
/// (one stale fails the batch, nothing of it written); every node's newest
/// read back in one call.
async fn declarations_are_recorded_together_and_read_newest_per_node(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    s.add_node(&n("n2"), &[]).await.unwrap();
    let d = |node: &str, version: i64| Declaration {
        node: n(node),
        version,
        digest: format!("sha256:{node}{version}"),
        body: format!("{{\"v\":{version}}}"),
    };
    s.record_declarations(&[d("n1", 1), d("n2", 1), d("n1", 2)])
        .await
        .unwrap();
    assert!(
        s.record_declarations(&[d("n2", 2), d("n1", 2)])
            .await
            .is_err()
    );
    let newest = s.latest_declarations().await.unwrap();
    assert_eq!(newest.len(), 2);
    assert_eq!(newest[&n("n1")].version, 2);
    assert_eq!(
        newest[&n("n2")].version,
        1,
        "the failed batch wrote nothing"
    );
    assert_eq!(
        newest[&n("n1")],
        s.latest_declaration(&n("n1")).await.unwrap().unwrap()
    );
    let made = s.declarations_made_since(0).await.unwrap();
    assert_eq!(made.len(), 3);
    assert!(s.record_declarations(&[d("n9", 1)]).await.is_err());
}

conformance!(
    declarations_round_trip,
    declarations_are_recorded_together_and_read_newest_per_node,
);

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

conformance!(declarations_round_trip,);

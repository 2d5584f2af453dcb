//! Artifacts put by an operator: recorded under a version, written once per
//! version and name, and pinned by an assignment.

use crate::fixture::*;
use mesh_store::*;

fn upload(version: &str, name: &str, digit: char, nuid: &str) -> Upload {
    Upload {
        module: n("audit"),
        version: version.into(),
        name: n(name),
        sha256: digit.to_string().repeat(64),
        size: 10,
        nuid: nuid.into(),
    }
}

async fn uploads_are_versions_pinned_by_assignments(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    s.register_module(&n("audit"), "x").await.unwrap();
    // Assigned before anything was put: no pin.
    assert_eq!(
        s.assign_version(&n("n1"), &n("audit"), None).await.unwrap(),
        None
    );
    let before = s.records_revision().await.unwrap();
    assert!(
        s.record_upload(&upload("v1", "bin", 'a', "N1"))
            .await
            .unwrap()
    );
    assert!(
        s.records_revision().await.unwrap() > before,
        "a put moves the records"
    );
    // The same again: no change; other bytes under the same version: refused.
    assert!(
        !s.record_upload(&upload("v1", "bin", 'a', "N1"))
            .await
            .unwrap()
    );
    match s.record_upload(&upload("v1", "bin", 'b', "N2")).await {
        Err(StoreError::AlreadyExists {
            what: "artifact",
            key,
        }) => {
            assert!(key.contains("another --version"), "{key}")
        }
        other => panic!("other bytes under v1: {other:?}"),
    }
    // Stored again under a new token: the token follows.
    assert!(
        s.record_upload(&upload("v1", "bin", 'a', "N9"))
            .await
            .unwrap()
    );
    assert_eq!(
        s.versions().await.unwrap()[&(n("audit"), "v1".into())][&n("bin")].nuid,
        "N9"
    );
    // A second artifact of v1, then v2.
    s.record_upload(&upload("v1", "conf", 'c', "N3"))
        .await
        .unwrap();
    s.record_upload(&upload("v2", "bin", 'd', "N4"))
        .await
        .unwrap();
    let rows = s.artifacts(Some(&n("audit"))).await.unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(
        s.newest_version(&n("audit")).await.unwrap().as_deref(),
        Some("v2")
    );
    // An unpinned assignment takes the newest when assigned again; a pinned
    // one keeps its pin unless a version is given.
    assert_eq!(
        s.assign_version(&n("n1"), &n("audit"), None)
            .await
            .unwrap()
            .as_deref(),
        Some("v2")
    );
    assert_eq!(
        s.assign_version(&n("n1"), &n("audit"), Some("v1"))
            .await
            .unwrap()
            .as_deref(),
        Some("v1")
    );
    assert_eq!(
        s.assign_version(&n("n1"), &n("audit"), None)
            .await
            .unwrap()
            .as_deref(),
        Some("v1")
    );
    assert_eq!(
        s.assignments().await.unwrap()[0].version.as_deref(),
        Some("v1")
    );
    match s.assign_version(&n("n1"), &n("audit"), Some("v7")).await {
        Err(StoreError::NotFound {
            what: "version", ..
        }) => {}
        other => panic!("an unknown version: {other:?}"),
    }
    // A module not registered cannot have artifacts; a bad version is refused.
    let mut other = upload("v1", "bin", 'a', "N1");
    other.module = n("ghost");
    assert!(matches!(
        s.record_upload(&other).await,
        Err(StoreError::NotFound { what: "module", .. })
    ));
    assert!(matches!(
        s.record_upload(&upload("v 1", "bin", 'a', "N1")).await,
        Err(StoreError::Invalid {
            what: "version",
            ..
        })
    ));
}

conformance!(uploads_are_versions_pinned_by_assignments,);

//! Builds: inputs in order, artifacts by name and by digest.

use crate::fixture::*;
use mesh_store::*;

async fn builds_round_trip(fx: &Fixture) {
    let s = &fx.store;
    s.register_module(&n("audit-log"), "x").await.unwrap();
    let build = Build {
        id: "req-1".into(),
        module: Some(n("audit-log")),
        rev: Some("abc123".into()),
        state: BuildState::Succeeded,
        inputs: vec!["sha256:bbb".into(), "sha256:aaa".into()],
        artifacts: vec![
            Artifact {
                name: "audit-log".into(),
                digest: "sha256:1111".into(),
                path: "target/release/audit-log".into(),
                size: 12_345_678,
                nuid: Some("n1".into()),
            },
            Artifact {
                name: "a-helper".into(),
                digest: "sha256:2222".into(),
                path: "target/release/a-helper".into(),
                size: 0,
                nuid: None,
            },
        ],
        finished_at: 42,
    };
    s.record_build(&build).await.unwrap();
    let got = s.build("req-1").await.unwrap().unwrap();
    assert_eq!(got.inputs, build.inputs, "inputs keep their order");
    assert_eq!(got.artifacts[0].name, "a-helper", "artifacts by name");
    assert_eq!(got.artifacts[1], build.artifacts[0]);
    assert_eq!(got.module, build.module);
    match s.record_build(&build).await {
        Err(StoreError::AlreadyExists { what: "build", .. }) => {}
        other => panic!("recording a build twice: {other:?}"),
    }

    let failed = Build {
        id: "req-2".into(),
        module: None,
        rev: None,
        state: BuildState::Failed {
            reason: "no manifest".into(),
        },
        inputs: vec![],
        artifacts: vec![],
        finished_at: 43,
    };
    s.record_build(&failed).await.unwrap();
    assert_eq!(s.build("req-2").await.unwrap(), Some(failed));
    assert_eq!(s.build("req-3").await.unwrap(), None);

    // The build's version is recorded for its module: what an assignment
    // pins, with the chunk token a host is granted by.
    let versions = s.module_versions(&n("audit-log")).await.unwrap();
    assert_eq!(versions.len(), 1);
    assert_eq!(
        (versions[0].rev.as_str(), versions[0].build_id.as_deref()),
        ("abc123", Some("req-1"))
    );
    let listed: Vec<String> = s
        .builds(None)
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.id)
        .collect();
    assert_eq!(listed, ["req-2", "req-1"], "newest first");
    let listed = s.builds(Some(&n("audit-log"))).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].artifacts[1].nuid.as_deref(), Some("n1"));
    // A success for a module nobody registered records nothing.
    let stray = Build {
        id: "req-9".into(),
        module: Some(n("nobody")),
        ..build.clone()
    };
    assert!(
        matches!(
            s.record_build(&stray).await,
            Err(StoreError::NotFound { .. })
        ),
        "a stray module"
    );
    assert_eq!(s.build("req-9").await.unwrap(), None);

    let by_digest = s.artifacts_by_digest("sha256:1111").await.unwrap();
    assert_eq!(
        by_digest,
        vec![("req-1".to_string(), build.artifacts[0].clone())]
    );

    // Two builds finished in the same millisecond: the one recorded last is
    // the newest, whatever their commits spell (ordering by commit made an
    // unpinned assignment run the older one).
    for (id, rev, digest) in [
        ("req-5", "000", "sha256:5555"),
        ("req-6", "fff", "sha256:6666"),
    ] {
        let mut b = build.clone();
        b.id = id.into();
        b.rev = Some(rev.into());
        b.finished_at = 50;
        b.artifacts.truncate(1);
        b.artifacts[0].digest = digest.into();
        s.record_build(&b).await.unwrap();
    }
    assert_eq!(
        s.newest_version(&n("audit-log")).await.unwrap().as_deref(),
        Some("fff")
    );
    s.add_node(&n("n1"), &[]).await.unwrap();
    assert_eq!(
        s.assign_version(&n("n1"), &n("audit-log"), None)
            .await
            .unwrap()
            .as_deref(),
        Some("fff"),
        "an unpinned assignment pins the one recorded last"
    );
    let listed: Vec<String> = s
        .builds(Some(&n("audit-log")))
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.id)
        .collect();
    assert_eq!(
        listed,
        ["req-6", "req-5", "req-1"],
        "recorded last, listed first"
    );
}

conformance!(builds_round_trip,);

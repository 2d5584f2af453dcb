//! A report answering an older declaration than the node's newest is
//! settled without being acted on (L81): the controller records reports as
//! `mesh_controller::daemon::record_report` does, against a real store.

use mesh_controller::daemon::{Ingested, record_report};
use mesh_core::names::Name;
use mesh_core::report::{ModuleReport, ModuleState, Report};

fn n(s: &str) -> Name {
    Name::new(s).unwrap()
}

fn report(id: &str, sequence: u64, state: ModuleState, reason: Option<&str>) -> Report {
    Report {
        id: id.into(),
        node: n("n1"),
        sequence,
        modules: vec![ModuleReport {
            name: n("echo"),
            state,
            reason: reason.map(str::to_string),
            restarts: 0,
            nkey: None,
            pinned: None,
            health: None,
        }],
        refused: None,
        // Only the late report says where the node is.
        address: (sequence == 1).then(|| "10.9.9.9".into()),
        spare_keys: Vec::new(),
        amqp_hashes: Default::default(),
    }
}

#[tokio::test]
async fn a_report_of_an_older_declaration_is_settled_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", tmp.path().join("mesh.db").display());
    let store = mesh_store::Store::open(&url).await.unwrap();
    store.add_node(&n("n1"), &[]).await.unwrap();
    for version in [1, 2] {
        store
            .record_declaration(&mesh_store::Declaration {
                node: n("n1"),
                version,
                digest: format!("d{version}"),
                body: "{}".into(),
            })
            .await
            .unwrap();
    }
    let newest = report("r2", 2, ModuleState::Running, None);
    assert_eq!(
        record_report(&store, &newest).await.unwrap(),
        Ingested::Recorded
    );

    // Declaration 1's report arrives late: answered (the caller acks it and
    // counts it as superseded), never recorded.
    let late = report("r1", 1, ModuleState::Failed, Some("the old declaration's"));
    assert_eq!(
        record_report(&store, &late).await.unwrap(),
        Ingested::Superseded { newest: 2 }
    );
    let latest = store.latest_report(&n("n1")).await.unwrap().unwrap();
    assert_eq!(latest.report.declaration_version, 2);
    assert_eq!(latest.report.outcomes.len(), 1);
    assert_eq!(
        latest.report.outcomes[0].state,
        mesh_store::ModuleState::Running
    );
    let all = store.reports(&n("n1"), 10).await.unwrap();
    assert_eq!(all.len(), 1, "only declaration 2's report is recorded");
    // Nor does the superseded report move the node's address.
    let node = store.node(&n("n1")).await.unwrap().unwrap();
    assert_eq!(node.address, None, "{node:?}");
    store.close().await;
}

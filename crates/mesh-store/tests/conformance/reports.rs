//! Reports: recorded and read back with their outcomes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::fixture::*;
use mesh_core::names::Name;
use mesh_store::*;

async fn reports_round_trip(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    let report = Report {
        node: n("n1"),
        declaration_version: 3,
        outcomes: vec![
            ModuleOutcome {
                module: n("git"),
                state: ModuleState::Failed {
                    reason: "exit status 1".into(),
                },
                restarts: 0,
                pinned: None,
                health: None,
            },
            ModuleOutcome {
                module: n("audit-log"),
                state: ModuleState::Running,
                restarts: 0,
                pinned: None,
                health: None,
            },
        ],
        received_at: 1_700_000_000_123,
        refused: None,
        report_id: None,
    };
    let new = |r: Recorded| match r {
        Recorded::New(id) => id,
        Recorded::Duplicate => panic!("recorded as a duplicate"),
    };
    let first = new(s.record_report(&report).await.unwrap());
    let mut later = report.clone();
    later.declaration_version = 4;
    let second = new(s.record_report(&later).await.unwrap());
    assert!(second > first);

    // Every state a host reports, restarts, and a refusal read back as written.
    let mut states = report.clone();
    states.declaration_version = 5;
    states.refused = Some("the signature is not the controller's".into());
    states.outcomes = vec![
        ModuleOutcome {
            module: n("a"),
            state: ModuleState::Starting,
            restarts: 0,
            pinned: Some("v1".into()),
            health: Some(mesh_core::report::ModuleHealth::Healthy { for_ms: 1500 }),
        },
        ModuleOutcome {
            module: n("b"),
            state: ModuleState::Stopped,
            restarts: 7,
            pinned: Some("v2".into()),
            health: Some(mesh_core::report::ModuleHealth::Unhealthy {
                reason: "GET http://127.0.0.1:1/ answered 503: down".into(),
            }),
        },
    ];
    let third = new(s.record_report(&states).await.unwrap());
    let got = s.latest_report(&n("n1")).await.unwrap().unwrap();
    assert_eq!(got.id, third);
    assert_eq!(got.report, states);
    // A module's outcome in each node's newest report, in one read.
    let newest = s.newest_outcomes(&n("b")).await.unwrap();
    assert_eq!(
        newest.get(&n("n1")),
        Some(&(states.outcomes[1].clone(), states.received_at))
    );
    assert_eq!(newest.len(), 1);
    assert!(s.newest_outcomes(&n("zz")).await.unwrap().is_empty());
    // Modules by health in the newest reports: n1's two.
    let counts = s.health_counts().await.unwrap();
    assert_eq!(
        counts.into_iter().collect::<Vec<_>>(),
        vec![("healthy".to_string(), 1), ("unhealthy".to_string(), 1)]
    );
    let got = s.reports(&n("n1"), 2).await.unwrap().pop().unwrap();
    assert_eq!(got.id, second);
    assert_eq!(got.report.declaration_version, 4);
    assert_eq!(got.report.outcomes[0].module, n("audit-log"), "sorted");
    assert_eq!(
        got.report.outcomes[1].state,
        ModuleState::Failed {
            reason: "exit status 1".into()
        }
    );
    assert_eq!(got.report.received_at, 1_700_000_000_123);
    let all = s.reports(&n("n1"), 10).await.unwrap();
    assert_eq!(all.len(), 3);
    let mut sorted = report.clone();
    sorted.outcomes.sort_by(|a, b| a.module.cmp(&b.module));
    assert_eq!(all[2].report, sorted);

    let mut stray = report.clone();
    stray.node = n("ghost");
    match s.record_report(&stray).await {
        Err(StoreError::NotFound { what: "node", .. }) => {}
        other => panic!("report from an unknown node: {other:?}"),
    }
}

/// A report is recorded once per (node, report id): a redelivery writes
/// nothing, the same id from another node is another report.
async fn a_report_is_recorded_once_by_its_id(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    s.add_node(&n("n2"), &[]).await.unwrap();
    let mut r = git_running_on_n1(1);
    r.report_id = Some("r-1".into());
    assert!(matches!(
        s.record_report(&r).await.unwrap(),
        Recorded::New(_)
    ));
    assert_eq!(s.record_report(&r).await.unwrap(), Recorded::Duplicate);
    let mut other = r.clone();
    other.node = n("n2");
    assert!(matches!(
        s.record_report(&other).await.unwrap(),
        Recorded::New(_)
    ));
    let mut next = r.clone();
    next.report_id = Some("r-2".into());
    assert!(matches!(
        s.record_report(&next).await.unwrap(),
        Recorded::New(_)
    ));
    assert_eq!(s.reports(&n("n1"), 10).await.unwrap().len(), 2, "once each");
    // Reports without an id (from before ids) are each their own.
    r.report_id = None;
    assert!(matches!(
        s.record_report(&r).await.unwrap(),
        Recorded::New(_)
    ));
    assert!(matches!(
        s.record_report(&r).await.unwrap(),
        Recorded::New(_)
    ));
}

/// A report is never read without its outcomes, even while newer reports
/// arrive between the store's reads (they are written in one transaction).
async fn a_report_read_while_others_arrive_has_its_outcomes(fx: &Fixture) {
    let s = fx.store.clone();
    s.add_node(&n("n1"), &[]).await.unwrap();
    let report = git_running_on_n1(1);
    s.record_report(&report).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (s, stop, report) = (s.clone(), stop.clone(), report.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                s.record_report(&report).await.unwrap();
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut reads = 0;
    while Instant::now() < deadline {
        let got = s.latest_report(&n("n1")).await.unwrap().unwrap();
        reads += 1;
        assert_eq!(
            got.report.outcomes, report.outcomes,
            "report {} read without its outcomes (read {reads})",
            got.id
        );
    }
    stop.store(true, Ordering::Relaxed);
    writer.await.expect("writer");
}

/// A batch is one transaction: each once (an id seen before, or earlier in
/// the batch, is a duplicate), listed by when it was received; a report of
/// an unknown node fails the batch and writes none of it.
async fn a_batch_of_reports_is_recorded_together(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    s.add_node(&n("n2"), &[]).await.unwrap();
    let r = |node: &str, id: &str, at: i64| Report {
        node: n(node),
        declaration_version: 1,
        outcomes: vec![ModuleOutcome {
            module: n("web"),
            state: ModuleState::Running,
            restarts: 0,
            pinned: None,
            health: None,
        }],
        received_at: at,
        refused: None,
        report_id: Some(id.into()),
    };
    assert!(matches!(
        s.record_report(&r("n1", "a", 100)).await.unwrap(),
        Recorded::New(_)
    ));
    let got = s
        .record_reports(&[
            r("n1", "a", 200),
            r("n2", "b", 201),
            r("n2", "b", 202),
            r("n1", "c", 203),
        ])
        .await
        .unwrap();
    assert!(
        matches!(
            got[..],
            [
                Recorded::Duplicate,
                Recorded::New(_),
                Recorded::Duplicate,
                Recorded::New(_)
            ]
        ),
        "{got:?}"
    );
    let seen = s.reports_received_since(150).await.unwrap();
    let ids: Vec<_> = seen.iter().map(|r| r.report_id.clone().unwrap()).collect();
    assert_eq!(ids, ["b", "c"]);
    assert_eq!(seen[0].node, n("n2"));
    assert_eq!(seen[0].received_at, 201);
    assert!(
        s.record_reports(&[r("n1", "d", 300), r("n9", "e", 300)])
            .await
            .is_err()
    );
    assert!(s.reports_received_since(300).await.unwrap().is_empty());
}

/// Past one statement's rows: 1,201 reports of 3 outcomes in one batch,
/// every report and outcome recorded once; and the batch's reads (newest
/// versions, assignments, module keys) answer for every node at once.
async fn a_large_batch_and_its_reads_take_a_handful_of_statements(fx: &Fixture) {
    let s = &fx.store;
    let nodes: Vec<Name> = (0..1201).map(|i| n(&format!("b{i}"))).collect();
    s.apply_fleet(&FleetChange {
        nodes: nodes.clone(),
        ..FleetChange::default()
    })
    .await
    .unwrap();
    let reports: Vec<Report> = nodes
        .iter()
        .map(|node| Report {
            node: node.clone(),
            declaration_version: 1,
            outcomes: ["a", "b", "c"]
                .iter()
                .map(|m| ModuleOutcome {
                    module: n(m),
                    state: ModuleState::Running,
                    restarts: 0,
                    pinned: None,
                    health: None,
                })
                .collect(),
            received_at: 500,
            refused: None,
            report_id: Some(format!("r-{node}")),
        })
        .collect();
    let got = s.record_reports(&reports).await.unwrap();
    assert!(got.iter().all(|r| matches!(r, Recorded::New(_))));
    let again = s.record_reports(&reports[..3]).await.unwrap();
    assert!(again.iter().all(|r| *r == Recorded::Duplicate));
    let latest = s.latest_report(&n("b1200")).await.unwrap().unwrap();
    assert_eq!(latest.report.outcomes.len(), 3);
    assert_eq!(s.reports_received_since(500).await.unwrap().len(), 1201);

    // Reads for a batch.
    for (i, node) in nodes.iter().take(3).enumerate() {
        s.record_declaration(&Declaration {
            node: node.clone(),
            version: 5 + i as i64,
            digest: "d".into(),
            body: "{}".into(),
        })
        .await
        .unwrap();
    }
    let versions = s.latest_versions(&nodes).await.unwrap();
    assert_eq!(versions.len(), 3);
    assert_eq!(versions[&n("b2")], 7);
    s.register_module(&n("web"), "[module]\nname = \"web\"\n")
        .await
        .unwrap();
    s.assign(&n("b1"), &n("web")).await.unwrap();
    s.assign(&n("b1100"), &n("web")).await.unwrap();
    let assigned = s.assignments_on(&nodes).await.unwrap();
    assert_eq!(
        assigned.into_iter().collect::<Vec<_>>(),
        [(n("b1"), n("web")), (n("b1100"), n("web"))]
    );
    let key = nkeys::KeyPair::new_user().public_key();
    let p = mesh_core::authority::PrincipalKind::Module {
        node: n("b1100"),
        module: n("web"),
    };
    s.record_machine_key(&p, &key).await.unwrap();
    let keys = s
        .machine_keys(&[p.principal_name(), "module_b1_web".into()])
        .await
        .unwrap();
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[&p.principal_name()], key);
}

conformance!(
    a_large_batch_and_its_reads_take_a_handful_of_statements,
    a_batch_of_reports_is_recorded_together,
    reports_round_trip,
    a_report_is_recorded_once_by_its_id,
    a_report_read_while_others_arrive_has_its_outcomes,
);

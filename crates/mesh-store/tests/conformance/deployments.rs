//! Deployments: recorded, read back, one active per module, and a state
//! written only over the one it was read as.

use std::collections::BTreeMap;

use crate::fixture::*;
use mesh_core::deploy::{BatchSize, Deployment, Spec, State};

fn deployment(module: &str, version: &str) -> Deployment {
    Deployment {
        spec: Spec {
            module: n(module),
            version: version.into(),
            nodes: vec![n("n1"), n("n2")],
            canary: 1,
            batch: BatchSize::Percent(50),
            healthy_for_ms: 3000,
            deadline_ms: 60_000,
            auto_revert: true,
        },
        previous: BTreeMap::from([(n("n1"), "v1".to_string())]),
        state: State::Running {
            batch: 0,
            started_ms: 1,
        },
    }
}

async fn one_active_deployment_per_module_and_no_lost_update(fx: &Fixture) {
    let s = &fx.store;
    let d = deployment("web", "v2");
    let id = s.create_deployment(&d).await.unwrap();
    let got = s.deployment(id).await.unwrap().unwrap();
    assert_eq!(got.deployment, d);
    assert!(got.active());
    // A second of the module while the first runs: refused, naming it.
    let e = s
        .create_deployment(&deployment("web", "v3"))
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("active deployment #{id} of web is already in the store")
    );
    // Another module's is its own.
    let other = s.create_deployment(&deployment("api", "v9")).await.unwrap();
    assert!(other > id);

    // Paused by an operator; the controller's step, read before, loses.
    let mut paused = d.clone();
    paused.state = State::Paused { batch: 0 };
    assert!(s.update_deployment(id, &d, &paused).await.unwrap());
    let mut stepped = d.clone();
    stepped.state = State::Running {
        batch: 1,
        started_ms: 2,
    };
    assert!(!s.update_deployment(id, &d, &stepped).await.unwrap());
    assert_eq!(s.deployment(id).await.unwrap().unwrap().deployment, paused);
    assert_eq!(s.active_deployments().await.unwrap().len(), 2);

    // Finished: no longer active, and the module may be deployed again.
    let mut done = paused.clone();
    done.state = State::Succeeded;
    assert!(s.update_deployment(id, &paused, &done).await.unwrap());
    let active = s.active_deployments().await.unwrap();
    assert_eq!(active.iter().map(|r| r.id).collect::<Vec<_>>(), [other]);
    let again = s.create_deployment(&deployment("web", "v3")).await.unwrap();

    // History, newest first, of one module or all.
    let web: Vec<i64> = s
        .deployments(Some(&n("web")), 10)
        .await
        .unwrap()
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(web, [again, id]);
    assert_eq!(s.deployments(None, 10).await.unwrap().len(), 3);
    assert_eq!(s.deployments(None, 1).await.unwrap()[0].id, again);
    assert!(s.deployment(again + 100).await.unwrap().is_none());
}

/// A step's pins and its state are one change: a step read before an
/// operator's pause pins nothing, and one carried out moves both.
async fn a_steps_pins_and_state_are_one_change(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    s.register_module(&n("web"), "x").await.unwrap();
    for (v, digit) in [("v1", 'a'), ("v2", 'b')] {
        let upload = mesh_store::Upload {
            module: n("web"),
            version: v.into(),
            name: n("bin"),
            sha256: digit.to_string().repeat(64),
            size: 10,
            nuid: format!("N{v}"),
        };
        assert!(s.record_upload(&upload).await.unwrap());
    }
    s.assign_version(&n("n1"), &n("web"), Some("v1"))
        .await
        .unwrap();
    let d = deployment("web", "v2");
    let id = s.create_deployment(&d).await.unwrap();
    let read = s.deployment(id).await.unwrap().unwrap();
    let pinned = || async {
        s.assignments()
            .await
            .unwrap()
            .into_iter()
            .find(|a| a.node == n("n1"))
            .and_then(|a| a.version)
    };
    let step = || {
        vec![
            mesh_core::deploy::Step::Pin {
                node: n("n1"),
                version: "v2".into(),
            },
            mesh_core::deploy::Step::Record {
                state: State::Running {
                    batch: 1,
                    started_ms: 5,
                },
            },
        ]
    };
    // Paused meanwhile: the step read before records nothing, pins nothing.
    let mut paused = d.clone();
    paused.state = State::Paused { batch: 0 };
    assert!(s.update_deployment(id, &d, &paused).await.unwrap());
    assert_eq!(s.carry_out_deployment(&read, step()).await.unwrap(), None);
    assert_eq!(pinned().await.as_deref(), Some("v1"));
    assert_eq!(s.deployment(id).await.unwrap().unwrap().deployment, paused);
    // Read again: both land.
    let read = s.deployment(id).await.unwrap().unwrap();
    let moved = s.carry_out_deployment(&read, step()).await.unwrap();
    assert_eq!(
        moved,
        Some(State::Running {
            batch: 1,
            started_ms: 5
        })
    );
    assert_eq!(pinned().await.as_deref(), Some("v2"));
    // A version never recorded: refused, and the state is not written.
    let read = s.deployment(id).await.unwrap().unwrap();
    let bad = vec![
        mesh_core::deploy::Step::Pin {
            node: n("n1"),
            version: "v9".into(),
        },
        mesh_core::deploy::Step::Record {
            state: State::Succeeded,
        },
    ];
    assert!(s.carry_out_deployment(&read, bad).await.is_err());
    assert_eq!(s.deployment(id).await.unwrap().unwrap(), read);
}

conformance!(
    one_active_deployment_per_module_and_no_lost_update,
    a_steps_pins_and_state_are_one_change,
);

use super::*;
use crate::testing::n;

const S: u64 = 1000;

fn names(ns: &[&str]) -> Vec<Name> {
    ns.iter().map(|s| n(s)).collect()
}

/// Five nodes on v1, moving to v2: a canary of 1, then batches of 2,
/// healthy for 3 s within 60 s.
fn spec() -> Spec {
    Spec {
        module: n("web"),
        version: "v2".into(),
        nodes: names(&["n1", "n2", "n3", "n4", "n5"]),
        canary: 1,
        batch: BatchSize::Nodes(2),
        healthy_for_ms: 3 * S,
        deadline_ms: 60 * S,
        auto_revert: true,
    }
}

fn deployment(state: State) -> Deployment {
    Deployment {
        previous: spec()
            .nodes
            .iter()
            .map(|n| (n.clone(), "v1".to_string()))
            .collect(),
        spec: spec(),
        state,
    }
}

fn running(batch: usize, started_ms: u64) -> Deployment {
    deployment(State::Running { batch, started_ms })
}

fn on(version: &str, health: Health) -> Observed {
    Observed {
        pinned: Some(version.into()),
        running: Some(version.into()),
        health,
    }
}

fn healthy_since(since_ms: u64) -> Health {
    Health::Healthy { since_ms }
}

fn pin(node: &str, version: &str) -> Step {
    Step::Pin {
        node: n(node),
        version: version.into(),
    }
}

fn record(state: State) -> Step {
    Step::Record { state }
}

/// Every node on `version`, healthy since `since`.
fn all(version: &str, since: u64) -> BTreeMap<Name, Observed> {
    spec()
        .nodes
        .into_iter()
        .map(|n| (n, on(version, healthy_since(since))))
        .collect()
}

#[test]
fn the_canary_comes_first_then_batches_of_the_size_given() {
    assert_eq!(
        spec().batches(),
        [names(&["n1"]), names(&["n2", "n3"]), names(&["n4", "n5"])]
    );
    let no_canary = Spec {
        canary: 0,
        batch: BatchSize::Nodes(2),
        ..spec()
    };
    assert_eq!(
        no_canary.batches(),
        [names(&["n1", "n2"]), names(&["n3", "n4"]), names(&["n5"])]
    );
    // A percentage of all the deployment's nodes, rounded up.
    let pct = Spec {
        canary: 0,
        batch: BatchSize::Percent(40),
        ..spec()
    };
    assert_eq!(
        pct.batches(),
        [names(&["n1", "n2"]), names(&["n3", "n4"]), names(&["n5"])]
    );
    let tenth = Spec {
        canary: 0,
        batch: BatchSize::Percent(10),
        ..spec()
    };
    assert_eq!(tenth.batches().len(), 5, "10% of 5 rounds up to 1");
    // A canary as large as the deployment is its one batch.
    let all_canary = Spec {
        canary: 9,
        ..spec()
    };
    assert_eq!(all_canary.batches(), [spec().nodes]);
}

#[test]
fn a_deployment_that_could_never_finish_or_moves_a_node_twice_is_refused() {
    let assigned = spec().nodes;
    assert_eq!(spec().check(&assigned), Ok(()));
    let cases = [
        (
            Spec {
                nodes: vec![],
                ..spec()
            },
            "a deployment needs at least one node; name them with --nodes, or assign web first",
        ),
        (
            Spec {
                batch: BatchSize::Nodes(0),
                ..spec()
            },
            "a batch of 0 nodes would never finish; give --batch 1 or more (or a percentage above 0)",
        ),
        (
            Spec {
                batch: BatchSize::Percent(0),
                ..spec()
            },
            "a batch of 0 nodes would never finish; give --batch 1 or more (or a percentage above 0)",
        ),
        (
            Spec {
                batch: BatchSize::Percent(101),
                ..spec()
            },
            "a percentage is at most 100; --batch 101% names more nodes than there are",
        ),
        (
            Spec {
                nodes: names(&["n1", "n2", "n1"]),
                ..spec()
            },
            "node n1 is named twice; each node is moved once",
        ),
        (
            Spec {
                nodes: names(&["n1", "n9"]),
                ..spec()
            },
            "module web is not assigned to node n9: a deployment moves only the nodes running it (`mesh assign web n9` first)",
        ),
    ];
    for (s, want) in cases {
        assert_eq!(s.check(&assigned).unwrap_err().to_string(), want);
    }
    let full = Spec {
        batch: BatchSize::Percent(100),
        ..spec()
    };
    assert_eq!(full.check(&assigned), Ok(()));
}

#[test]
fn a_batch_begins_by_pinning_its_nodes_and_only_those() {
    let d = running(0, 0);
    let observed = all("v1", 0);
    assert_eq!(next(&d, &observed, 1), [pin("n1", "v2")]);
    // Pinned already (a standby resuming): never pinned again.
    let mut observed = observed;
    observed.insert(
        n("n1"),
        Observed {
            pinned: Some("v2".into()),
            running: Some("v1".into()),
            health: healthy_since(0),
        },
    );
    assert_eq!(next(&d, &observed, 1), []);
}

#[test]
fn the_next_batch_begins_only_after_the_healthy_window() {
    let d = running(0, 0);
    let mut observed = all("v1", 0);
    observed.insert(n("n1"), on("v2", healthy_since(10 * S)));
    // Healthy for 2.999 s: waits.
    assert_eq!(next(&d, &observed, 13 * S - 1), []);
    // 3 s: the next batch, begun now.
    assert_eq!(
        next(&d, &observed, 13 * S),
        [record(State::Running {
            batch: 1,
            started_ms: 13 * S
        })]
    );
    // Starting (or running the old version) is not healthy on the new one.
    observed.insert(
        n("n1"),
        Observed {
            pinned: Some("v2".into()),
            running: Some("v2".into()),
            health: Health::Starting,
        },
    );
    assert_eq!(next(&d, &observed, 13 * S), []);
    observed.insert(
        n("n1"),
        Observed {
            pinned: Some("v2".into()),
            running: Some("v1".into()),
            health: healthy_since(0),
        },
    );
    assert_eq!(next(&d, &observed, 13 * S), []);
}

#[test]
fn the_last_batch_healthy_is_success() {
    let d = running(2, 20 * S);
    assert_eq!(
        next(&d, &all("v2", 21 * S), 24 * S),
        [record(State::Succeeded)]
    );
    // A batch past the last (a record from an older plan): success.
    assert_eq!(
        next(&running(7, 0), &all("v2", 0), 24 * S),
        [record(State::Succeeded)]
    );
}

#[test]
fn an_unhealthy_canary_reverts_it_and_touches_no_other_node() {
    let d = running(0, 0);
    let mut observed = all("v1", 0);
    observed.insert(
        n("n1"),
        on(
            "v2",
            Health::Unhealthy {
                reason: "GET /health: 500".into(),
            },
        ),
    );
    assert_eq!(
        next(&d, &observed, 5 * S),
        [
            pin("n1", "v1"),
            record(State::Reverted {
                node: Some(n("n1")),
                reason: "unhealthy on v2: GET /health: 500".into()
            })
        ]
    );
}

#[test]
fn a_failure_in_a_later_batch_reverts_every_node_touched_so_far() {
    let d = running(1, 10 * S);
    let mut observed = all("v1", 0);
    observed.insert(n("n1"), on("v2", healthy_since(5 * S)));
    observed.insert(n("n2"), on("v2", healthy_since(11 * S)));
    observed.insert(
        n("n3"),
        on(
            "v2",
            Health::Unhealthy {
                reason: "exited 5 times in 30 s".into(),
            },
        ),
    );
    assert_eq!(
        next(&d, &observed, 12 * S),
        [
            pin("n1", "v1"),
            pin("n2", "v1"),
            pin("n3", "v1"),
            record(State::Reverted {
                node: Some(n("n3")),
                reason: "unhealthy on v2: exited 5 times in 30 s".into()
            })
        ]
    );
}

#[test]
fn an_unhealthy_node_still_on_the_old_version_is_not_the_new_ones_failure() {
    let d = running(0, 0);
    let mut observed = all("v1", 0);
    observed.insert(
        n("n1"),
        Observed {
            pinned: Some("v2".into()),
            running: Some("v1".into()),
            health: Health::Unhealthy {
                reason: "old trouble".into(),
            },
        },
    );
    assert_eq!(next(&d, &observed, S), []);
}

#[test]
fn a_batch_past_its_deadline_fails_at_its_first_node_not_healthy_long_enough() {
    let d = running(1, 10 * S);
    let mut observed = all("v2", 0);
    observed.insert(n("n3"), on("v2", Health::Starting));
    // At the deadline exactly: still waiting.
    assert_eq!(next(&d, &observed, 70 * S), []);
    assert_eq!(
        next(&d, &observed, 70 * S + 1),
        [
            pin("n1", "v1"),
            pin("n2", "v1"),
            pin("n3", "v1"),
            record(State::Reverted {
                node: Some(n("n3")),
                reason: "not healthy on v2 for 3 s within the deadline of 60 s".into()
            })
        ]
    );
}

#[test]
fn without_auto_revert_a_failure_halts_and_moves_nothing() {
    let mut d = running(0, 0);
    d.spec.auto_revert = false;
    let mut observed = all("v1", 0);
    observed.insert(
        n("n1"),
        on(
            "v2",
            Health::Unhealthy {
                reason: "refused".into(),
            },
        ),
    );
    assert_eq!(
        next(&d, &observed, S),
        [record(State::Halted {
            node: n("n1"),
            reason: "unhealthy on v2: refused".into()
        })]
    );
}

#[test]
fn a_node_never_heard_from_is_starting() {
    let d = running(0, 0);
    assert_eq!(next(&d, &BTreeMap::new(), S), [pin("n1", "v2")]);
    // Pinned but never reported, past the deadline: the deadline's failure.
    let observed = BTreeMap::from([(
        n("n1"),
        Observed {
            pinned: Some("v2".into()),
            running: None,
            health: Health::Starting,
        },
    )]);
    assert!(matches!(
        next(&d, &observed, 61 * S).last(),
        Some(Step::Record {
            state: State::Reverted { .. }
        })
    ));
}

#[test]
fn only_a_running_deployment_moves() {
    for state in [
        State::Paused { batch: 1 },
        State::Succeeded,
        State::Halted {
            node: n("n1"),
            reason: "x".into(),
        },
        State::Reverted {
            node: None,
            reason: "x".into(),
        },
    ] {
        assert_eq!(next(&deployment(state), &all("v1", 0), S), []);
    }
}

#[test]
fn an_operators_revert_moves_back_the_nodes_of_every_batch_begun() {
    assert_eq!(
        revert(&running(1, 0), "asked"),
        [
            pin("n1", "v1"),
            pin("n2", "v1"),
            pin("n3", "v1"),
            record(State::Reverted {
                node: None,
                reason: "asked".into()
            })
        ]
    );
    assert_eq!(
        revert(&deployment(State::Paused { batch: 0 }), "asked").len(),
        2
    );
    assert_eq!(revert(&deployment(State::Succeeded), "asked").len(), 6);
    let halted = deployment(State::Halted {
        node: n("n1"),
        reason: "x".into(),
    });
    assert_eq!(revert(&halted, "asked").len(), 6);
    // Reverted already: nothing more.
    let reverted = deployment(State::Reverted {
        node: None,
        reason: "x".into(),
    });
    assert_eq!(revert(&reverted, "again"), []);
    // A node with no version before keeps the new one.
    let mut d = running(0, 0);
    d.previous.remove(&n("n1"));
    assert_eq!(
        revert(&d, "asked"),
        [record(State::Reverted {
            node: None,
            reason: "asked".into()
        })]
    );
}

#[test]
fn steps_and_records_are_data() {
    let d = running(1, 5);
    let json = serde_json::to_string(&d).unwrap();
    assert_eq!(serde_json::from_str::<Deployment>(&json).unwrap(), d);
    assert!(
        json.contains(r#""state":"running","batch":1,"started_ms":5"#),
        "{json}"
    );
    let step = serde_json::to_string(&pin("n1", "v2")).unwrap();
    assert_eq!(step, r#"{"step":"pin","node":"n1","version":"v2"}"#);
}

#[test]
fn a_state_reads_as_listings_say_it() {
    let said = [
        State::Running {
            batch: 1,
            started_ms: 9,
        },
        State::Paused { batch: 0 },
        State::Succeeded,
        State::Halted {
            node: n("n2"),
            reason: "deadline passed".into(),
        },
        State::Reverted {
            node: Some(n("n1")),
            reason: "unhealthy on v2".into(),
        },
        State::Reverted {
            node: None,
            reason: "asked by ann".into(),
        },
    ]
    .map(|s| s.to_string());
    assert_eq!(
        said,
        [
            "running batch 2",
            "paused at batch 1",
            "succeeded",
            "halted at n2: deadline passed",
            "reverted at n1: unhealthy on v2",
            "reverted: asked by ann",
        ]
    );
}

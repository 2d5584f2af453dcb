use super::*;
use crate::authority::derive;
use crate::records::{Assignment, ControllerSpec, Records};
use crate::testing::{catalogue, n};

/// A mesh on RabbitMQ ready to move: the broker module running on n1 with
/// the user list applied, the new bus answering with every object, both
/// nodes ready with keys, every speaking module keyed.
fn ready() -> Facts {
    Facts {
        bus: BusKind::Amqp,
        holders: vec![BrokerHolder {
            node: "n1".into(),
            module: "nats-broker".into(),
            running: true,
            users_declared: Some(7),
            applied: Some(7),
        }],
        dial: Dial::Answered {
            url: "tls://10.0.0.1:4222".into(),
            missing_objects: vec![],
        },
        nodes: ["n1", "n2"]
            .map(|node| NodeFacts {
                node: node.into(),
                liveness: Liveness::Ready,
                key: true,
            })
            .to_vec(),
        modules: vec![
            ModuleFacts {
                node: "n2".into(),
                module: "ticker".into(),
                speaks: true,
                key: true,
            },
            ModuleFacts {
                node: "n2".into(),
                module: "quiet".into(),
                speaks: false,
                key: false,
            },
        ],
    }
}

/// The `what` of each missing thing.
fn whats(f: &Facts) -> Vec<String> {
    check(f).missing.into_iter().map(|m| m.what).collect()
}

/// The one missing thing `f` has, whole.
fn only(f: &Facts) -> Missing {
    let r = check(f);
    assert!(!r.ready, "{r:?}");
    assert_eq!(r.missing.len(), 1, "{:#?}", r.missing);
    r.missing.into_iter().next().unwrap()
}

#[test]
fn a_mesh_with_everything_in_place_is_ready_and_a_module_that_never_speaks_is_not_listed() {
    let r = check(&ready());
    assert_eq!(
        r,
        Readiness {
            from: BusKind::Amqp,
            ready: true,
            missing: vec![],
            plan: plan(&ready()).unwrap(),
        }
    );
}

#[test]
fn the_plan_of_a_ready_mesh_names_each_node_and_each_speaking_module_in_order() {
    let mut f = ready();
    // A token not spent is no node of the move (the check names it).
    f.nodes.push(NodeFacts {
        node: "n3".into(),
        liveness: Liveness::NotEnrolled,
        key: false,
    });
    let said: Vec<String> = plan(&f).unwrap().iter().map(ToString::to_string).collect();
    assert_eq!(
        said,
        [
            "record the mesh's bus as NATS at tls://10.0.0.1:4222 (one record)",
            "declare the new bus to 2 nodes over RabbitMQ: n1, n2",
            "2 hosts reconnect to NATS with the key each holds, bind their consumers and report there",
            "restart 1 module onto NATS: ticker on n2",
            "the controller records every report RabbitMQ still holds (none lost, none twice), then connects to NATS",
            "once every node reports on NATS: remove the mesh's RabbitMQ users; RabbitMQ runs as no module of this mesh, so stop it yourself then",
        ]
    );
    f.nodes.truncate(1);
    f.modules.retain(|m| !m.speaks);
    let said: Vec<String> = plan(&f).unwrap().iter().map(ToString::to_string).collect();
    assert_eq!(said[1], "declare the new bus to 1 node over RabbitMQ: n1");
    assert_eq!(
        said[2],
        "1 host reconnects to NATS with the key it holds, binds its consumer and reports there"
    );
    assert_eq!(said[3], "no module speaks on the bus: none restarts");
    // Not ready: no plan given.
    f.dial = Dial::NotDialled { why: "x".into() };
    assert_eq!(plan(&f), None);
    assert!(check(&f).plan.is_empty());
    let json = serde_json::to_string(&MoveStep::Flip {
        url: "tls://a:1".into(),
    })
    .unwrap();
    assert_eq!(json, r#"{"step":"flip","url":"tls://a:1"}"#);
}

#[test]
fn a_mesh_already_on_nats_has_nothing_to_move() {
    let mut f = ready();
    f.bus = BusKind::Nats;
    let m = only(&f);
    assert_eq!(
        m.what,
        "the mesh already runs on NATS: there is nothing to move"
    );
    assert_eq!(check(&f).from, BusKind::Nats);
}

#[test]
fn no_broker_module_names_the_seat_and_how_to_assign_one() {
    let mut f = ready();
    f.holders.clear();
    // Nothing to dial without a holder: one line, not two.
    f.dial = Dial::NotDialled {
        why: "no module holds mesh-broker".into(),
    };
    let m = only(&f);
    assert_eq!(
        m.what,
        "no module holds mesh-broker: there is no NATS server in the mesh to move onto"
    );
    assert!(
        m.next.contains("`mesh assign nats-broker NODE`"),
        "{}",
        m.next
    );
}

#[test]
fn a_broker_module_not_running_is_named_with_its_node() {
    let mut f = ready();
    f.holders[0].running = false;
    let m = only(&f);
    assert_eq!(
        m.what,
        "module nats-broker (mesh-broker) is not running on n1"
    );
    assert_eq!(m.next, "see `mesh reports n1` and the module's log on n1");
}

#[test]
fn the_user_list_must_be_declared_and_applied_before_the_move() {
    let mut f = ready();
    f.holders[0].users_declared = None;
    f.holders[0].applied = None;
    assert_eq!(
        only(&f).what,
        "n1 has not been declared the composed user list (nats-broker's bus-users): the server would admit nobody"
    );

    let mut f = ready();
    f.holders[0].applied = Some(6);
    let m = only(&f);
    assert_eq!(
        m.what,
        "n1 has not applied declaration 7, which carries the composed user list (its newest applied is 6)"
    );
    assert_eq!(m.next, "check `mesh host` on n1 and `mesh reports n1`");

    let mut f = ready();
    f.holders[0].applied = None;
    assert_eq!(
        only(&f).what,
        "n1 has not applied declaration 7, which carries the composed user list"
    );

    // A later declaration applied carries the list too.
    let mut f = ready();
    f.holders[0].applied = Some(8);
    assert!(check(&f).ready);
}

#[test]
fn each_way_the_dial_fails_is_its_own_line() {
    let mut f = ready();
    f.dial = Dial::NotDialled {
        why: "node n1 has no address".into(),
    };
    let m = only(&f);
    assert_eq!(
        m.what,
        "the new bus was not dialled: node n1 has no address"
    );
    assert!(m.next.contains("`mesh node set NODE --address HOST`"));

    f.dial = Dial::Unreachable {
        url: "tls://10.0.0.1:4222".into(),
        reason: "connection refused".into(),
    };
    assert_eq!(
        only(&f).what,
        "the new bus at tls://10.0.0.1:4222 does not answer: connection refused"
    );

    f.dial = Dial::OtherCertificate {
        url: "tls://10.0.0.1:4222".into(),
        expected: "aa".into(),
        got: "bb".into(),
    };
    assert_eq!(
        only(&f).what,
        "the server at tls://10.0.0.1:4222 presents certificate sha256 bb, not the mesh's (aa)"
    );

    f.dial = Dial::Answered {
        url: "tls://10.0.0.1:4222".into(),
        missing_objects: vec![
            "stream CONTROL".into(),
            "consumer CONTROL/controller".into(),
        ],
    };
    assert_eq!(
        whats(&f),
        [
            "stream CONTROL is not on the new bus yet",
            "consumer CONTROL/controller is not on the new bus yet"
        ]
    );
}

#[test]
fn a_node_without_a_credential_is_the_one_that_stops_the_move() {
    let mut f = ready();
    f.nodes[1].key = false;
    f.nodes[1].liveness = Liveness::NotEnrolled;
    let m = only(&f);
    assert_eq!(
        m.what,
        "node n2 holds no credential for the new bus: it would keep running and could not come back"
    );
    assert!(m.next.contains("`mesh host --token -` on n2"), "{}", m.next);
    assert!(m.next.contains("`mesh node forget n2`"), "{}", m.next);
}

#[test]
fn a_node_not_running_its_host_is_named_by_its_condition() {
    for (liveness, condition) in [
        (Liveness::Stale, "stale"),
        (Liveness::Down, "down"),
        (Liveness::Unseen, "never heard from"),
        (Liveness::NotEnrolled, "never heard from"),
    ] {
        let mut f = ready();
        f.nodes[0].liveness = liveness;
        let m = only(&f);
        assert_eq!(
            m.what,
            format!(
                "node n1 is {condition}: a host not running when the mesh moves is never told the new bus"
            )
        );
        assert_eq!(
            m.next,
            "start `mesh host` on n1 (or `mesh node forget n1`) before moving"
        );
    }
}

#[test]
fn a_speaking_module_without_a_key_is_named_and_a_silent_one_never() {
    let mut f = ready();
    f.modules[0].key = false;
    let m = only(&f);
    assert_eq!(
        m.what,
        "module ticker on n2 speaks on the bus but holds no key for the new bus"
    );
    assert!(m.next.contains("`mesh reports n2`"));

    let mut f = ready();
    f.modules[1].key = true;
    f.modules[1].speaks = false;
    assert!(check(&f).ready);
}

#[test]
fn missing_things_come_most_fundamental_first() {
    let mut f = ready();
    f.modules[0].key = false;
    f.nodes[0].liveness = Liveness::Down;
    f.dial = Dial::Unreachable {
        url: "tls://x:1".into(),
        reason: "refused".into(),
    };
    f.holders[0].running = false;
    let w = whats(&f);
    assert_eq!(w.len(), 4, "{w:#?}");
    assert!(w[0].starts_with("module nats-broker (mesh-broker) is not running"));
    assert!(w[1].starts_with("the new bus at tls://x:1"));
    assert!(w[2].starts_with("node n1 is down"));
    assert!(w[3].starts_with("module ticker on n2"));
}

#[test]
fn only_a_module_whose_grants_reach_past_its_inbox_speaks() {
    let cat = catalogue(&[
        "[module]\nname = \"quiet\"\n[run]\ncommand = [\"sleep\", \"1\"]\n",
        "[module]\nname = \"ticker\"\n[run]\ncommand = [\"t\"]\n[events]\nemits = [\"tick\"]\n",
        // Publishes nothing of its own: speaks by what it hears.
        "[module]\nname = \"answerer\"\n[run]\ncommand = [\"a\"]\n[tools]\nserves = [\"ask\"]\n",
    ]);
    let records = Records {
        nodes: vec![n("n1")],
        assignments: vec![
            Assignment {
                node: n("n1"),
                module: n("answerer"),
            },
            Assignment {
                node: n("n1"),
                module: n("quiet"),
            },
            Assignment {
                node: n("n1"),
                module: n("ticker"),
            },
        ],
        ..Records::default()
    };
    let principals = derive(&cat, &records, &ControllerSpec::default()).unwrap();
    let facts = module_facts(&principals, |node, module| {
        node == "n1" && module == "ticker"
    });
    assert_eq!(
        facts,
        [
            ModuleFacts {
                node: "n1".into(),
                module: "answerer".into(),
                speaks: true,
                key: false,
            },
            ModuleFacts {
                node: "n1".into(),
                module: "quiet".into(),
                speaks: false,
                key: false,
            },
            ModuleFacts {
                node: "n1".into(),
                module: "ticker".into(),
                speaks: true,
                key: true,
            },
        ]
    );
    // Hosts and the controller are not modules.
    assert!(principals.iter().any(|p| p.name == "host_n1"));
}

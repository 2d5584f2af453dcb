use super::*;
use crate::catalogue::{Aliases, Catalogue};
use crate::jetstream;
use crate::manifest;
use crate::manifest::ToolRef;
use crate::records::ToolListError;
use crate::subjects::pattern::covers;
use crate::users_file::{self, UserCredential};

mod amqp;
mod golden;
mod logs;
mod node_seat;
mod renamed;
mod users;

const GIT: &str = r#"
[module]
name = "git-server"

[[seat]]
name = "git"
scope = "mesh"
protocol = "git"
emits = ["pushed"]
tools = ["clone"]

[holds]
seats = ["git"]

[events]
emits = ["repo-created"]

[tools]
serves = ["list-repos"]
"#;

const NOTIFIER: &str = r#"
[module]
name = "notifier"

[events]
consumes = ["seat:git.pushed", "seat:mesh-build-machine.built", "git-server.*"]

[tools]
uses = ["seat:git.clone"]

[uses]
seats = ["mesh-build-machine"]
"#;

const BUILDER: &str = r#"
[module]
name = "builder"

[holds]
seats = ["mesh-build-machine"]
"#;

fn n(s: &str) -> Name {
    Name::new(s).unwrap()
}

fn catalogue() -> Catalogue {
    let ms = [
        ("git/mesh.toml", GIT),
        ("notifier/mesh.toml", NOTIFIER),
        ("builder/mesh.toml", BUILDER),
    ]
    .iter()
    .map(|(p, t)| manifest::parse(p, t).expect("fixture parses"))
    .collect();
    let cat = Catalogue::build(ms, Aliases::new());
    let errors: Vec<_> = crate::catalogue::check(&cat)
        .into_iter()
        .filter(|d| d.is_error())
        .collect();
    assert!(
        errors.is_empty(),
        "fixture catalogue checks clean: {errors:?}"
    );
    cat
}

fn records() -> Records {
    Records {
        nodes: vec![n("n2"), n("n1")],
        assignments: vec![
            Assignment::new(n("n1"), n("git-server")),
            Assignment::new(n("n2"), n("notifier")),
            Assignment::new(n("n1"), n("notifier")),
            Assignment::new(n("n2"), n("builder")),
        ],
        live_tokens: vec![n("n3")],
        live_logins: vec![n("bob")],
        persons: vec![
            PersonRecord {
                name: n("bob"),
                tools: ToolAccess::Only(vec![ToolRef {
                    provider: crate::manifest::Target::Seat(n("git")),
                    tool: n("clone"),
                }]),
                role: Some(crate::operation::Role::Viewer),
            },
            PersonRecord {
                name: n("alice"),
                tools: ToolAccess::All,
                role: Some(crate::operation::Role::Operator),
            },
        ],
        ..Records::default()
    }
}

fn principals() -> Vec<Principal> {
    derive(&catalogue(), &records(), &ControllerSpec::default()).unwrap()
}

fn find<'a>(ps: &'a [Principal], name: &str) -> &'a Principal {
    ps.iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no principal {name}"))
}

fn can_publish(p: &Principal, subject: &str) -> bool {
    p.permissions
        .publish
        .iter()
        .any(|g| covers(&g.subject, subject))
}

fn can_subscribe(p: &Principal, subject: &str) -> bool {
    p.permissions
        .subscribe
        .iter()
        .any(|g| covers(&g.subject, subject))
}

#[test]
fn controller_first_then_sorted_groups() {
    let names: Vec<String> = principals().into_iter().map(|p| p.name).collect();
    assert_eq!(
        names,
        [
            "controller",
            "host_n1",
            "host_n2",
            "module_n1_git-server",
            "module_n1_notifier",
            "module_n2_builder",
            "module_n2_notifier",
            "enrol_n3",
            "login_bob",
            "person_alice",
            "person_bob",
        ]
    );
}

#[test]
fn a_duplicate_principal_is_refused_naming_both_sources() {
    let mut r = records();
    r.persons.push(PersonRecord {
        name: n("alice"),
        tools: ToolAccess::Only(vec![]),
        role: None,
    });
    let err = derive(&catalogue(), &r, &ControllerSpec::default()).unwrap_err();
    match &err {
        AuthorityError::DuplicatePrincipal {
            name,
            first,
            second,
        } => {
            assert_eq!(name, "person_alice");
            assert_eq!(first, "person record alice");
            assert_eq!(second, "person record alice");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn principal_names_cannot_collide_across_kinds() {
    // Every principal name is one subject token, and the kind prefix with the
    // separator no name may hold keeps kinds apart: a node called "n1-x" and a
    // module "x" on node "n1" do not meet.
    let a = PrincipalKind::Module {
        node: n("n1"),
        module: n("x"),
    };
    let b = PrincipalKind::Host { node: n("n1-x") };
    let c = PrincipalKind::Module {
        node: n("n1-x"),
        module: n("x"),
    };
    let names = [a.principal_name(), b.principal_name(), c.principal_name()];
    assert_eq!(names, ["module_n1_x", "host_n1-x", "module_n1-x_x"]);
    for name in names {
        assert!(!name.contains(['.', '*', '>', ' ']), "{name}");
    }
}

#[test]
fn host_reaches_only_its_own_node() {
    let ps = principals();
    let h = find(&ps, "host_n1");
    assert!(can_publish(h, "mesh.control.report.n1"));
    assert!(can_publish(h, "mesh.control.heartbeat.n1"));
    assert!(can_publish(h, "$JS.ACK.NODES.n1.1.1.1.1.1"));
    assert!(can_publish(h, "$JS.API.CONSUMER.INFO.NODES.n1"));
    assert!(can_subscribe(h, "mesh.deliver.n1"));
    assert!(can_subscribe(h, "_INBOX.host_n1.abc"));
    assert!(!can_publish(h, "mesh.control.report.n2"));
    assert!(!can_publish(h, "$JS.ACK.NODES.n2.1.1.1.1.1"));
    assert!(!can_publish(h, "$JS.API.CONSUMER.INFO.NODES.n2"));
    assert!(!can_publish(h, "$JS.API.STREAM.INFO.NODES"));
    assert!(!can_subscribe(h, "mesh.deliver.n2"));
    assert!(!can_subscribe(h, "mesh.node.n1.declaration"));
    assert!(!can_subscribe(h, "_INBOX.host_n2.abc"));
    // It answers its logs tool (see tests/logs.rs), so it may respond.
    assert!(h.permissions.allow_responses.is_some());
}

#[test]
fn module_emits_only_what_it_declares() {
    let ps = principals();
    let git = find(&ps, "module_n1_git-server");
    assert!(can_publish(git, "mesh.mod.git-server.event.repo-created"));
    assert!(can_publish(git, "mesh.seat.git.event.pushed"));
    assert!(!can_publish(git, "mesh.mod.git-server.event.other"));
    assert!(!can_publish(git, "mesh.mod.notifier.event.repo-created"));
    assert!(can_subscribe(git, "mesh.mod.git-server.tool.list-repos"));
    assert!(can_subscribe(git, "mesh.seat.git.tool.clone"));
    assert!(git.permissions.allow_responses.is_some(), "it serves tools");
    // It consumes nothing, so it has no EVENTS consumer to ack on.
    assert!(!can_publish(git, "$JS.ACK.EVENTS.mod_git-server.1"));
}

#[test]
fn consumer_module_gets_its_consumer_work_and_tool_calls() {
    let ps = principals();
    let no = find(&ps, "module_n2_notifier");
    assert!(can_subscribe(no, "mesh.deliver.mod_notifier"));
    assert!(can_publish(no, "$JS.ACK.EVENTS.mod_notifier.1.2.3.4.5"));
    assert!(!can_publish(no, "$JS.ACK.EVENTS.mod_git-server.1.2.3.4.5"));
    assert!(can_publish(no, "mesh.seat.mesh-build-machine.work.build"));
    assert!(can_publish(no, "mesh.seat.git.tool.clone"));
    // Hearing a role's event is subscribe-through-consumer, not taking part.
    assert!(!can_publish(no, "mesh.seat.mesh-build-machine.event.built"));
    assert!(
        !can_subscribe(no, "mesh.seat.git.event.pushed"),
        "events come via its consumer"
    );
    assert!(
        no.permissions.allow_responses.is_none(),
        "it serves nothing"
    );
}

#[test]
fn role_holder_announces_and_takes_work() {
    let ps = principals();
    let b = find(&ps, "module_n2_builder");
    assert!(can_publish(b, "mesh.seat.mesh-build-machine.event.built"));
    assert!(can_subscribe(b, "mesh.deliver.seat_mesh-build-machine"));
    assert!(can_publish(
        b,
        "$JS.ACK.SEAT_mesh-build-machine.seat_mesh-build-machine.1"
    ));
    // It stores what it builds and reads metas, never chunks it did not
    // write through a consumer of the bucket, nor the bucket's API.
    assert!(can_publish(b, "$O.ARTIFACTS.C.abc"));
    assert!(can_publish(b, "$O.ARTIFACTS.M.bmFtZQ=="));
    assert!(can_publish(
        b,
        "$JS.API.DIRECT.GET.OBJ_ARTIFACTS.$O.ARTIFACTS.M.bmFtZQ=="
    ));
    assert!(!can_publish(b, "$JS.API.CONSUMER.CREATE.OBJ_ARTIFACTS"));
    assert!(!can_publish(b, "$JS.API.STREAM.PURGE.OBJ_ARTIFACTS"));
    assert!(!can_publish(b, "$JS.API.DIRECT.GET.OBJ_ARTIFACTS"));
    // A module that only uses the role gets none of it.
    let user = find(&ps, "module_n1_notifier");
    assert!(!can_publish(user, "$O.ARTIFACTS.C.abc"));
    assert!(!can_publish(user, "$O.ARTIFACTS.M.bmFtZQ=="));
}

#[test]
fn persons_ask_and_nothing_else() {
    let ps = principals();
    let alice = find(&ps, "person_alice");
    let bob = find(&ps, "person_bob");
    assert!(can_publish(alice, "mesh.mod.git-server.tool.list-repos"));
    assert!(can_publish(alice, "mesh.seat.git.tool.clone"));
    assert!(can_publish(bob, "mesh.seat.git.tool.clone"));
    assert!(!can_publish(bob, "mesh.mod.git-server.tool.list-repos"));
    for p in [alice, bob] {
        assert!(p.permissions.allow_responses.is_none());
        assert!(
            !p.permissions
                .publish
                .iter()
                .any(|g| g.subject.starts_with("$JS"))
        );
        assert!(!can_publish(p, "mesh.mod.git-server.event.repo-created"));
        assert!(!can_subscribe(p, "mesh.mod.git-server.event.repo-created"));
        assert!(
            p.permissions
                .subscribe
                .iter()
                .all(|g| g.subject == subjects::inbox(&p.name)),
            "{:?}",
            p.permissions.subscribe
        );
    }
}

#[test]
fn a_login_reaches_its_persons_login_subject_and_its_inbox_only() {
    let ps = principals();
    let l = find(&ps, "login_bob");
    assert_eq!(
        l.permissions
            .publish_subjects()
            .into_iter()
            .collect::<Vec<_>>(),
        ["mesh.controller.login.bob"]
    );
    assert_eq!(
        l.permissions
            .subscribe_subjects()
            .into_iter()
            .collect::<Vec<_>>(),
        ["_INBOX.login_bob.>"]
    );
    assert_eq!(l.permissions.allow_responses, None);
}

#[test]
fn enrolment_reaches_its_subject_and_inbox_only() {
    let ps = principals();
    let e = find(&ps, "enrol_n3");
    assert_eq!(
        e.permissions
            .publish_subjects()
            .into_iter()
            .collect::<Vec<_>>(),
        ["mesh.control.enrol.n3"]
    );
    assert_eq!(
        e.permissions
            .subscribe_subjects()
            .into_iter()
            .collect::<Vec<_>>(),
        ["_INBOX.enrol.n3.>"]
    );
}

#[test]
fn controller_answers_enrolments_and_no_other_inbox() {
    let ps = principals();
    let c = find(&ps, "controller");
    assert!(can_publish(c, "_INBOX.enrol.n3.xyz"));
    for p in &ps {
        if p.name == CONTROLLER {
            continue;
        }
        // Whatever an enrolling node subscribes, the controller can answer;
        // every other principal's inbox stays out of its reach.
        for g in &p.permissions.subscribe {
            if !g.subject.starts_with("_INBOX.") {
                continue;
            }
            let reply = g.subject.replace('>', "r1");
            let reachable = can_publish(c, &reply);
            assert_eq!(
                reachable,
                matches!(p.kind, PrincipalKind::Enrolment { .. }),
                "{} inbox {}",
                p.name,
                g.subject
            );
        }
    }
    // Followed events are named, never a namespace: the whole list, so a
    // `mesh.mod.*.>` beside them cannot slip through a pattern check.
    assert_eq!(
        c.permissions
            .subscribe_subjects()
            .into_iter()
            .collect::<Vec<_>>(),
        [
            "_INBOX.controller.>",
            "mesh.control.heartbeat.*",
            "mesh.controller.artifact.*",
            "mesh.controller.login.*",
            "mesh.controller.op.*.*",
            "mesh.deliver.controller_control",
            "mesh.deliver.controller_events",
            "mesh.seat.mesh-build-machine.event.built",
        ]
    );
}

#[test]
fn a_holder_serving_only_its_seats_tools_may_answer() {
    let lister = manifest::parse(
        "lister/mesh.toml",
        r#"
[module]
name = "lister"

[[seat]]
name = "listing"
scope = "mesh"
protocol = ""
tools = ["ls"]

[holds]
seats = ["listing"]
"#,
    )
    .unwrap();
    let cat = Catalogue::build(vec![lister], Aliases::new());
    let r = Records {
        nodes: vec![n("n1")],
        assignments: vec![Assignment::new(n("n1"), n("lister"))],
        ..Records::default()
    };
    let ps = derive(&cat, &r, &ControllerSpec::default()).unwrap();
    let l = find(&ps, "module_n1_lister");
    assert!(can_subscribe(l, "mesh.seat.listing.tool.ls"));
    let why = l
        .permissions
        .allow_responses
        .as_ref()
        .expect("it answers ls");
    assert!(why.to_string().contains("the seat serves tool ls"), "{why}");
}

#[test]
fn a_module_gets_its_consumer_only_once_assigned() {
    let mut r = records();
    r.assignments.retain(|a| a.module.as_str() != "notifier");
    let o = jetstream::derive(&catalogue(), &r, &ControllerSpec::default()).unwrap();
    let names: Vec<&str> = o.consumers.iter().map(|c| c.name.as_str()).collect();
    assert!(!names.contains(&"mod_notifier"), "{names:?}");
    let o = jetstream::derive(&catalogue(), &records(), &ControllerSpec::default()).unwrap();
    assert!(o.consumers.iter().any(|c| c.name == "mod_notifier"));
}

#[test]
fn every_consumer_is_ackable_by_exactly_its_owner() {
    let cat = catalogue();
    let r = records();
    let spec = ControllerSpec::default();
    let ps = derive(&cat, &r, &spec).unwrap();
    let objects = jetstream::derive(&cat, &r, &spec).unwrap();
    for c in &objects.consumers {
        let ack = c.ack_subject().replace('>', "1.1.1.1.1");
        let owners: Vec<&str> = ps
            .iter()
            .filter(|p| can_publish(p, &ack) && can_subscribe(p, &c.deliver_subject))
            .map(|p| p.name.as_str())
            .collect();
        assert!(!owners.is_empty(), "nobody can ack consumer {}", c.name);
        for o in &owners {
            let p = find(&ps, o);
            if p.name != CONTROLLER {
                // The controller may ack anything via $JS.API? No: it holds
                // acks for its own consumers only, checked below.
                assert!(
                    !p.permissions
                        .publish
                        .iter()
                        .any(|g| g.subject == "$JS.ACK.>"),
                    "{o} has a blanket ack grant"
                );
            }
        }
        let expected: Vec<String> = match c.stream.as_str() {
            "NODES" => vec![format!("host_{}", c.name)],
            "CONTROL" => vec!["controller".into()],
            "EVENTS" if c.name.starts_with("controller") => vec!["controller".into()],
            "EVENTS" => {
                let module = c.name.trim_start_matches("mod_");
                ps.iter()
                    .filter(|p| matches!(&p.kind, PrincipalKind::Module { module: m, .. } if m.as_str() == module))
                    .map(|p| p.name.clone())
                    .collect()
            }
            _ => ps
                .iter()
                .filter(|p| matches!(&p.kind, PrincipalKind::Module { module, .. } if module.as_str() == "builder"))
                .map(|p| p.name.clone())
                .collect(),
        };
        assert_eq!(owners, expected, "owners of consumer {}", c.name);
    }
}

#[test]
fn each_principal_hears_through_its_own_consumers_only() {
    let cat = catalogue();
    let r = records();
    let spec = ControllerSpec::default();
    let ps = derive(&cat, &r, &spec).unwrap();
    let objects = jetstream::derive(&cat, &r, &spec).unwrap();
    let heard = |name: &str| -> Vec<String> {
        find(&ps, name)
            .consumers(&objects)
            .iter()
            .map(|c| format!("{}/{}", c.stream, c.name))
            .collect()
    };
    assert_eq!(heard("host_n1"), ["NODES/n1"]);
    assert_eq!(heard("module_n1_notifier"), ["EVENTS/mod_notifier"]);
    assert_eq!(
        heard("module_n2_builder"),
        ["SEAT_mesh-build-machine/seat_mesh-build-machine"]
    );
    assert!(heard("person_alice").is_empty());
    assert!(heard("enrol_n3").is_empty());
}

#[test]
fn objects_follow_the_bus_contract() {
    let cat = catalogue();
    let o = jetstream::derive(&cat, &records(), &ControllerSpec::default()).unwrap();
    let stream = |name: &str| o.streams.iter().find(|s| s.name == name).unwrap();
    assert_eq!(
        stream("CONTROL").subjects,
        ["mesh.control.report.*", "mesh.control.enrol.*"]
    );
    assert_eq!(stream("NODES").max_msgs_per_subject, Some(1));
    assert_eq!(
        stream("EVENTS").subjects,
        [
            "mesh.mod.*.event.>",
            "mesh.seat.*.event.>",
            "mesh.seat.*.node.*.event.>"
        ]
    );
    let seat = stream("SEAT_mesh-build-machine");
    assert_eq!(seat.retention, jetstream::Retention::WorkQueue);
    assert_eq!(seat.subjects, ["mesh.seat.mesh-build-machine.work.build"]);
    let node = o.consumers.iter().find(|c| c.name == "n1").unwrap();
    assert_eq!(node.ack_wait_secs, 300);
    assert_eq!(node.max_deliver, None);
    assert_eq!(node.filter_subjects, ["mesh.node.n1.declaration"]);
    let m = o
        .consumers
        .iter()
        .find(|c| c.name == "mod_notifier")
        .unwrap();
    assert_eq!(m.deliver_group.as_deref(), Some("mod_notifier"));
    assert_eq!(
        m.filter_subjects,
        [
            "mesh.mod.git-server.event.*",
            "mesh.seat.git.event.pushed",
            "mesh.seat.mesh-build-machine.event.built",
        ]
    );
    // Streams precede consumers, and each consumer's stream is in the set.
    jetstream::check(&o).unwrap();
}

#[test]
fn a_seat_stream_exists_before_any_holder_is_assigned() {
    let cat = catalogue();
    let o = jetstream::derive(&cat, &Records::default(), &ControllerSpec::default()).unwrap();
    assert!(
        o.streams
            .iter()
            .any(|s| s.name == "SEAT_mesh-build-machine")
    );
    assert!(
        o.consumers
            .iter()
            .any(|c| c.name == "seat_mesh-build-machine")
    );
}

#[test]
fn overlapping_streams_are_refused_naming_both() {
    let mut o = jetstream::derive(&catalogue(), &records(), &ControllerSpec::default()).unwrap();
    o.streams.push(jetstream::StreamSpec {
        name: "WIDE".into(),
        subjects: vec!["mesh.control.>".into()],
        retention: jetstream::Retention::Limits,
        max_msgs_per_subject: None,
        max_age_secs: None,
        replicas: 1,
    });
    match jetstream::check(&o).unwrap_err() {
        jetstream::ObjectsError::Overlap { first, second, .. } => {
            assert_eq!((first.as_str(), second.as_str()), ("CONTROL", "WIDE"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_consumer_on_a_missing_stream_is_refused_naming_it() {
    let mut o = jetstream::derive(&catalogue(), &records(), &ControllerSpec::default()).unwrap();
    o.streams.retain(|s| s.name != "NODES");
    match jetstream::check(&o).unwrap_err() {
        jetstream::ObjectsError::MissingStream { stream, .. } => assert_eq!(stream, "NODES"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_unknown_assignment_is_refused() {
    let mut r = records();
    r.assignments.push(Assignment::new(n("n1"), n("ghost")));
    assert!(matches!(
        derive(&catalogue(), &r, &ControllerSpec::default()),
        Err(AuthorityError::UnregisteredModule { .. })
    ));
}

#[test]
fn a_persons_tools_read_as_written() {
    let w =
        |l: &[&str]| ToolAccess::from_written(&l.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    assert_eq!(w(&["*"]), Ok(ToolAccess::All));
    assert_eq!(w(&["*", "audit-log.serch"]), Err(ToolListError::StarInList));
    assert_eq!(
        w(&["audit-log.search", "*"]),
        Err(ToolListError::StarInList)
    );
    assert!(matches!(
        w(&["seat:git.clone"]),
        Ok(ToolAccess::Only(tools)) if tools.len() == 1 && tools[0].tool.as_str() == "clone"
    ));
    assert!(matches!(
        w(&["audit-log"]),
        Err(ToolListError::BadTool { written, .. }) if written == "audit-log"
    ));
}

#[test]
fn only_the_build_machine_role_writes_the_artifact_store() {
    // The holder of another of the mesh's roles, and of a seat of its own,
    // gets none of the artifact store.
    const STORE: &str = r#"
[module]
name = "db"

[[seat]]
name = "cache"
scope = "mesh"
protocol = ""

[holds]
seats = ["mesh-store", "cache"]
"#;
    let ms = vec![manifest::parse("db/mesh.toml", STORE).expect("fixture parses")];
    let cat = Catalogue::build(ms, Aliases::new());
    let records = Records {
        nodes: vec![n("n1")],
        assignments: vec![Assignment::new(n("n1"), n("db"))],
        ..Records::default()
    };
    let ps = derive(&cat, &records, &ControllerSpec::default()).unwrap();
    let db = find(&ps, "module_n1_db");
    for s in [
        "$O.ARTIFACTS.C.abc",
        "$O.ARTIFACTS.M.bmFtZQ==",
        "$JS.API.DIRECT.GET.OBJ_ARTIFACTS.$O.ARTIFACTS.M.bmFtZQ==",
    ] {
        assert!(!can_publish(db, s), "{s}");
    }
}

/// A role is grants on the person's own operation subjects: the
/// operations it allows, none it does not, and no other person's.
#[test]
fn a_role_is_publish_grants_on_the_persons_own_operations() {
    use crate::operation::{Operation, Role};
    let ps = derive(&catalogue(), &records(), &ControllerSpec::default()).unwrap();
    let get = |name: &str| ps.iter().find(|p| p.name == name).unwrap();
    let (bob, alice) = (get("person_bob"), get("person_alice"));
    for op in Operation::ALL {
        let own = format!("mesh.controller.op.bob.{op}");
        assert_eq!(can_publish(bob, &own), Role::Viewer.allows(op), "bob {op}");
        let own = format!("mesh.controller.op.alice.{op}");
        assert_eq!(
            can_publish(alice, &own),
            Role::Operator.allows(op),
            "alice {op}"
        );
        assert!(!can_publish(bob, &format!("mesh.controller.op.alice.{op}")));
    }
    let c = get("controller");
    assert!(c.permissions.allow_responses.is_some());
    assert_eq!(
        crate::subjects::parse_operation("mesh.controller.op.bob.secret-set"),
        Some((n("bob"), Operation::SecretSet))
    );
    assert_eq!(
        crate::subjects::parse_operation("mesh.controller.op.bob.sudo"),
        None
    );
    assert_eq!(
        crate::subjects::parse_operation("mesh.controller.op.bob"),
        None
    );
    assert_eq!(
        crate::subjects::parse_operation("mesh.control.report.n1"),
        None
    );
}

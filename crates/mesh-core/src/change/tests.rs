use super::*;
use crate::catalogue::Catalogue;
use crate::declaration::{FileDecl, NoSecrets, RunDecl};
use crate::records::{Assignment, Records};
use crate::testing::{catalogue, n};

const PRODUCER: &str = r#"
[module]
name = "producer"

[run]
command = ["producer"]

[events]
emits = ["made"]

[tools]
serves = ["count"]
"#;

const WATCHER: &str = r#"
[module]
name = "watcher"

[run]
command = ["watcher", "--conf", "${file:conf}"]
env = { MODE = "quiet" }

[events]
consumes = ["producer.made"]

[[file]]
name = "conf"
path = "watcher.toml"
"#;

const MARKER: &str = r#"
[module]
name = "marker"
"#;

static NO_PORTS: BTreeMap<(Name, Name), u16> = BTreeMap::new();
static NO_KEYS: BTreeMap<(Name, Name), String> = BTreeMap::new();

fn records(assign: &[(&str, &str)]) -> Records {
    Records {
        nodes: vec![n("n1"), n("n2")],
        assignments: assign
            .iter()
            .map(|(node, m)| Assignment::new(n(node), n(m)))
            .collect(),
        ..Records::default()
    }
}

fn run(c: &Catalogue, before: &Records, after: &Records) -> Result<Vec<Entry>, ChangeError> {
    let none = BTreeMap::new();
    let spec = ControllerSpec::default();
    let side = |records| Side {
        inputs: Inputs {
            catalogue: c,
            records,
            versions: &none,
            addresses: &none,
            seat_ports: &NO_PORTS,
            secrets: &NoSecrets,
            keys: &NO_KEYS,
            users_file: Ok("USERS"),
            left_out: &none,
        },
        controller: &spec,
    };
    plan(&side(before), &side(after))
}

#[test]
fn adding_a_consumer_starts_it_on_its_node_only_and_grants_its_consumer() {
    let c = catalogue(&[PRODUCER, WATCHER]);
    let before = records(&[("n2", "producer")]);
    let after = records(&[("n2", "producer"), ("n1", "watcher")]);
    let entries = run(&c, &before, &after).unwrap();
    let declared: Vec<&Entry> = entries.iter().filter(|e| e.node().is_some()).collect();
    assert_eq!(
        declared,
        [&Entry::Start {
            node: n("n1"),
            module: n("watcher"),
            version: "unversioned".into()
        }]
    );
    assert!(
        entries.iter().any(|e| matches!(e,
        Entry::PrincipalAdded { principal, source }
            if principal == "module_n1_watcher" && source.contains("watcher"))),
        "{entries:#?}"
    );
    // Its consumer's deliver subject, with the manifest line that causes it.
    let deliver = entries
        .iter()
        .find_map(|e| match e {
            Entry::GrantAdded {
                principal,
                direction: Direction::Subscribe,
                subject,
                causes,
            } if principal == "module_n1_watcher" && subject == "mesh.deliver.mod_watcher" => {
                Some(causes)
            }
            _ => None,
        })
        .expect("the deliver subject is granted");
    assert!(
        deliver
            .iter()
            .any(|c| c.to_string().starts_with("m1.toml:10")
                && c.to_string().contains("consumes events")),
        "{deliver:?}"
    );
    assert!(entries.iter().any(|e| matches!(e,
        Entry::GrantAdded { principal, direction: Direction::Publish, subject, .. }
            if principal == "module_n1_watcher" && subject == "$JS.ACK.EVENTS.mod_watcher.>")));
    // The new EVENTS consumer, filtered on what it consumes.
    let added: Vec<&ConsumerSpec> = entries
        .iter()
        .filter_map(|e| match e {
            Entry::ObjectAdded(Object::Consumer(c)) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(added.len(), 1, "{entries:#?}");
    assert_eq!(added[0].name, "mod_watcher");
    assert_eq!(added[0].filter_subjects, ["mesh.mod.producer.event.made"]);
    // Nothing removed, nothing about n2's principals.
    assert!(!entries.iter().any(|e| matches!(
        e,
        Entry::GrantRemoved { .. } | Entry::PrincipalRemoved { .. } | Entry::ObjectRemoved(_)
    )));
    assert!(
        !entries
            .iter()
            .any(|e| e.principal() == Some("module_n2_producer"))
    );
}

#[test]
fn the_reverse_change_is_the_mirror_image() {
    let c = catalogue(&[PRODUCER, WATCHER]);
    let a = records(&[("n2", "producer")]);
    let b = records(&[("n2", "producer"), ("n1", "watcher")]);
    let forward = run(&c, &a, &b).unwrap();
    let back = run(&c, &b, &a).unwrap();
    assert_eq!(forward.len(), back.len());
    assert!(back.contains(&Entry::Stop {
        node: n("n1"),
        module: n("watcher")
    }));
    let removed = |e: &Entry| match e {
        Entry::GrantRemoved {
            principal, subject, ..
        } => Some((principal.clone(), subject.clone())),
        _ => None,
    };
    let added = |e: &Entry| match e {
        Entry::GrantAdded {
            principal, subject, ..
        } => Some((principal.clone(), subject.clone())),
        _ => None,
    };
    let f: BTreeSet<_> = forward.iter().filter_map(added).collect();
    let r: BTreeSet<_> = back.iter().filter_map(removed).collect();
    assert!(!f.is_empty());
    assert_eq!(f, r);
    assert!(back.iter().any(|e| matches!(e,
        Entry::PrincipalRemoved { principal, .. } if principal == "module_n1_watcher")));
    assert!(back.iter().any(|e| matches!(e,
        Entry::ObjectRemoved(Object::Consumer(c)) if c.name == "mod_watcher")));
}

#[test]
fn no_change_plans_nothing() {
    let c = catalogue(&[PRODUCER, WATCHER]);
    let r = records(&[("n2", "producer"), ("n1", "watcher")]);
    assert_eq!(run(&c, &r, &r).unwrap(), []);
}

#[test]
fn a_tool_server_gains_allow_responses_with_its_cause() {
    let c = catalogue(&[PRODUCER]);
    let entries = run(&c, &records(&[]), &records(&[("n1", "producer")])).unwrap();
    let found = entries.iter().find_map(|e| match e {
        Entry::AllowResponses {
            principal,
            before,
            after,
        } if principal == "module_n1_producer" => Some((before, after)),
        _ => None,
    });
    let (before, after) = found.expect("allow_responses changes");
    assert_eq!(before, &None);
    assert!(after.is_some());
    assert!(entries.iter().any(|e| matches!(e,
        Entry::GrantAdded { principal, direction: Direction::Subscribe, subject, .. }
            if principal == "module_n1_producer" && subject == "mesh.mod.producer.tool.count")));
}

#[test]
fn a_module_that_does_not_compose_is_named_with_why_and_its_node_keeps_the_rest() {
    let c = catalogue(&[MARKER, PRODUCER]);
    let entries = run(
        &c,
        &records(&[]),
        &records(&[("n2", "marker"), ("n2", "producer")]),
    )
    .unwrap();
    let declared: Vec<&Entry> = entries.iter().filter(|e| e.node().is_some()).collect();
    assert_eq!(declared.len(), 2, "{declared:#?}");
    assert_eq!(
        declared[0],
        &Entry::Start {
            node: n("n2"),
            module: n("producer"),
            version: "unversioned".into()
        }
    );
    assert!(
        matches!(declared[1], Entry::LeftOut { node, module, reason }
            if node == &n("n2") && module == &n("marker") && reason.contains("no [run] section")),
        "{:?}",
        declared[1]
    );
    // Left out before and after: said once (after), nothing started or stopped.
    let entries = run(
        &c,
        &records(&[("n2", "marker")]),
        &records(&[("n2", "marker")]),
    )
    .unwrap();
    assert_eq!(
        entries
            .iter()
            .filter(|e| matches!(e, Entry::LeftOut { .. }))
            .count(),
        1
    );
    assert!(
        !entries
            .iter()
            .any(|e| matches!(e, Entry::Start { .. } | Entry::Stop { .. }))
    );
    // Only before: unassigned after, nothing is said of it.
    let entries = run(&c, &records(&[("n2", "marker")]), &records(&[])).unwrap();
    assert!(entries.iter().all(|e| e.node().is_none()), "{entries:#?}");
}

#[test]
fn an_assignment_to_an_unknown_node_is_refused_by_authority() {
    let c = catalogue(&[PRODUCER]);
    let mut after = records(&[]);
    after
        .assignments
        .push(Assignment::new(n("n9"), n("producer")));
    let e = run(&c, &records(&[]), &after).unwrap_err();
    assert!(
        matches!(
            &e,
            ChangeError::Authority {
                when: When::After,
                error: AuthorityError::UnknownNode { .. }
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string()
            .starts_with("the records after the change do not derive to principals: "),
        "{e}"
    );
    assert_eq!(When::Before.to_string(), "the records as they are");
}

fn decl(
    version: &str,
    command: &[&str],
    env: &[(&str, &str)],
    files: &[(&str, &str, &str)],
) -> ModuleDecl {
    ModuleDecl {
        name: n("m"),
        version: version.into(),
        run: RunDecl {
            driver: crate::manifest::Driver::Process,
            image: None,
            command: command.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            stop_grace_s: 10,
            sealed_env: BTreeMap::new(),
        },
        files: files
            .iter()
            .map(|(name, path, body)| FileDecl {
                name: n(name),
                path: path.to_string(),
                body: FileBody::Content(body.to_string()),
            })
            .collect(),
        secrets: None,
        key: None,
        artifacts: Vec::new(),
        pinned: None,
        health: None,
    }
}

#[test]
fn every_changed_field_is_named_once() {
    let was = decl(
        "v1",
        &["a"],
        &[("KEEP", "1"), ("GONE", "x"), ("EDIT", "old")],
        &[
            ("same", "s", ""),
            ("body", "b", "old"),
            ("moved", "m1", ""),
            ("old", "o", ""),
        ],
    );
    let mut now = decl(
        "v2",
        &["a", "--b"],
        &[("KEEP", "1"), ("EDIT", "new"), ("NEW", "y")],
        &[
            ("same", "s", ""),
            ("body", "b", "new"),
            ("moved", "m2", ""),
            ("new", "w", ""),
        ],
    );
    now.run.stop_grace_s = 30;
    assert_eq!(
        fields(&was, &now),
        [
            Field::Version {
                before: "v1".into(),
                after: "v2".into()
            },
            Field::Command {
                before: vec!["a".into()],
                after: vec!["a".into(), "--b".into()]
            },
            Field::StopGrace {
                before: 10,
                after: 30
            },
            Field::EnvChanged { key: "EDIT".into() },
            Field::EnvRemoved { key: "GONE".into() },
            Field::EnvAdded { key: "NEW".into() },
            Field::FileChanged {
                name: n("body"),
                path: "b".into()
            },
            Field::FileChanged {
                name: n("moved"),
                path: "m2".into()
            },
            Field::FileAdded {
                name: n("new"),
                path: "w".into()
            },
            Field::FileRemoved {
                name: n("old"),
                path: "o".into()
            },
        ]
    );
    assert_eq!(fields(&was, &was), []);
}

/// The artifacts a module runs: each one moved, added or dropped is
/// listed by name, one that stays is not.
#[test]
fn a_changed_artifact_is_listed_and_an_unchanged_one_is_not() {
    let artifact = |name: &str, reference: &str| crate::artifact::ArtifactDecl {
        name: n(name),
        reference: reference.into(),
        size: 1,
        sha256: String::new(),
        nuid: String::new(),
    };
    let mut was = decl("v1", &["a"], &[], &[]);
    was.artifacts = vec![
        artifact("kept", "ref-k"),
        artifact("moved", "ref-1"),
        artifact("gone", "ref-g"),
    ];
    let mut now = was.clone();
    now.artifacts = vec![
        artifact("kept", "ref-k"),
        artifact("moved", "ref-2"),
        artifact("added", "ref-a"),
    ];
    let some = |s: &str| Some(s.to_string());
    assert_eq!(
        fields(&was, &now),
        [
            Field::Artifact {
                name: n("added"),
                before: None,
                after: some("ref-a")
            },
            Field::Artifact {
                name: n("gone"),
                before: some("ref-g"),
                after: None
            },
            Field::Artifact {
                name: n("moved"),
                before: some("ref-1"),
                after: some("ref-2")
            },
        ]
    );
    assert_eq!(fields(&now, &now), []);
}

#[test]
fn a_changed_manifest_updates_the_module_where_it_runs() {
    let before = catalogue(&[PRODUCER, WATCHER]);
    let after = catalogue(&[
        PRODUCER,
        &WATCHER.replace("\"quiet\"", "\"loud\"").replace(
            "consumes = [\"producer.made\"]",
            "consumes = [\"producer.*\"]",
        ),
    ]);
    let r = records(&[("n1", "watcher")]);
    let none = BTreeMap::new();
    let spec = ControllerSpec::default();
    let side = |c| Side {
        inputs: Inputs {
            catalogue: c,
            records: &r,
            versions: &none,
            addresses: &none,
            seat_ports: &NO_PORTS,
            secrets: &NoSecrets,
            keys: &NO_KEYS,
            users_file: Ok("USERS"),
            left_out: &none,
        },
        controller: &spec,
    };
    let entries = plan(&side(&before), &side(&after)).unwrap();
    assert!(entries.contains(&Entry::Update {
        node: n("n1"),
        module: n("watcher"),
        field: Field::EnvChanged { key: "MODE".into() }
    }));
    let changed = entries.iter().find_map(|e| match e {
        Entry::ObjectChanged {
            before: Object::Consumer(b),
            after: Object::Consumer(a),
        } => Some((b.filter_subjects.clone(), a.filter_subjects.clone())),
        _ => None,
    });
    assert_eq!(
        changed,
        Some((
            vec!["mesh.mod.producer.event.made".into()],
            vec!["mesh.mod.producer.event.*".into()]
        ))
    );
}

#[test]
fn each_entry_names_its_node_or_its_principal() {
    let start = Entry::Start {
        node: n("n1"),
        module: n("m"),
        version: "v".into(),
    };
    assert_eq!((start.node(), start.principal()), (Some(&n("n1")), None));
    let principals = [
        Entry::PrincipalAdded {
            principal: "p".into(),
            source: String::new(),
        },
        Entry::PrincipalRemoved {
            principal: "p".into(),
            source: String::new(),
        },
        Entry::GrantAdded {
            principal: "p".into(),
            direction: Direction::Publish,
            subject: "s".into(),
            causes: vec![],
        },
        Entry::GrantRemoved {
            principal: "p".into(),
            direction: Direction::Subscribe,
            subject: "s".into(),
            causes: vec![],
        },
        Entry::AllowResponses {
            principal: "p".into(),
            before: None,
            after: None,
        },
    ];
    for e in &principals {
        assert_eq!((e.node(), e.principal()), (None, Some("p")), "{e:?}");
    }
    let left_out = Entry::LeftOut {
        node: n("n2"),
        module: n("m"),
        reason: String::new(),
    };
    assert_eq!(left_out.node(), Some(&n("n2")));
    let object = Entry::ObjectRemoved(Object::Stream(StreamSpec {
        name: "S".into(),
        subjects: vec![],
        retention: jetstream::Retention::Limits,
        max_msgs_per_subject: None,
        max_age_secs: None,
        replicas: 1,
    }));
    assert_eq!((object.node(), object.principal()), (None, None));
}

#[test]
fn entries_serialise_as_tagged_data() {
    let e = Entry::Update {
        node: n("n1"),
        module: n("m"),
        field: Field::EnvAdded { key: "K".into() },
    };
    let v = serde_json::to_value(&e).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"change": "update", "node": "n1", "module": "m", "field": "env-added", "key": "K"})
    );
    let o = serde_json::to_value(Entry::ObjectRemoved(Object::Stream(StreamSpec {
        name: "S".into(),
        subjects: vec![],
        retention: jetstream::Retention::Limits,
        max_msgs_per_subject: None,
        max_age_secs: None,
        replicas: 1,
    })))
    .unwrap();
    assert_eq!(o["change"], "object-removed");
    assert_eq!(o["object"], "stream");
    assert_eq!(o["name"], "S");
}

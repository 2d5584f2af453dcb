use super::*;
use crate::catalogue::Aliases;
use crate::manifest;
use crate::records::Assignment;

static NO_PORTS: BTreeMap<(Name, Name), u16> = BTreeMap::new();
static NO_KEYS: BTreeMap<(Name, Name), String> = BTreeMap::new();

fn n(s: &str) -> Name {
    Name::new(s).unwrap()
}

fn catalogue(manifests: &[&str]) -> Catalogue {
    let parsed = manifests
        .iter()
        .enumerate()
        .map(|(i, t)| manifest::parse(&format!("m{i}.toml"), t).unwrap())
        .collect();
    Catalogue::build(parsed, Aliases::new())
}

const ECHO: &str = r#"
[module]
name = "echo"
description = "answers"

[run]
command = ["mesh-echo", "--store", "${seat:store:5432}", "--conf", "${file:conf}"]
env = { MODE = "loud" }

[uses]
seats = ["store"]

[[file]]
name = "conf"
path = "conf/echo.toml"
"#;
const STORE: &str = r#"
[module]
name = "store"
description = "keeps"

[run]
command = ["store"]

[[seat]]
name = "store"
scope = "mesh"
protocol = "pg"

[holds]
seats = ["store"]
"#;

/// Every assigned module composed, none left out.
fn composed(m: NodeModules) -> Vec<ModuleDecl> {
    assert!(m.left_out.is_empty(), "{:?}", m.left_out);
    m.modules
}

/// The one module assigned, left out.
fn refused(m: NodeModules) -> ComposeError {
    assert!(m.modules.is_empty(), "{:?}", m.modules);
    assert_eq!(m.left_out.len(), 1, "{:?}", m.left_out);
    m.left_out.into_iter().next().unwrap()
}

fn records(assign: &[(&str, &str)]) -> Records {
    Records {
        nodes: vec![n("n1"), n("n2")],
        assignments: assign
            .iter()
            .map(|(nd, m)| Assignment::new(n(nd), n(m)))
            .collect(),
        ..Records::default()
    }
}

#[test]
fn placeholders_are_filled_from_the_records() {
    let no_left_out = BTreeMap::new();
    let c = catalogue(&[ECHO, STORE]);
    let r = records(&[("n1", "echo"), ("n2", "store")]);
    let versions = BTreeMap::from([(n("echo"), "sha256:e".to_string())]);
    let addresses = BTreeMap::from([(n("n2"), "10.0.0.2".to_string())]);
    let inputs = Inputs {
        catalogue: &c,
        records: &r,
        versions: &versions,
        addresses: &addresses,
        seat_ports: &NO_PORTS,
        secrets: &NoSecrets,
        keys: &NO_KEYS,
        users_file: Err("no composition"),
        left_out: &no_left_out,
    };
    let ms = composed(compose_modules(&inputs, &n("n1")));
    assert_eq!(ms.len(), 1);
    assert_eq!(
        ms[0].run.command,
        [
            "mesh-echo",
            "--store",
            "10.0.0.2:5432",
            "--conf",
            "conf/echo.toml"
        ]
    );
    assert_eq!(ms[0].run.env["MODE"], "loud");
    assert_eq!(ms[0].version, "sha256:e");
    assert_eq!(ms[0].files[0].path, "conf/echo.toml");
    // A node with nothing assigned runs nothing.
    let r = records(&[("n2", "store")]);
    let inputs = Inputs {
        records: &r,
        ..inputs
    };
    assert!(composed(compose_modules(&inputs, &n("n1"))).is_empty());
}

#[test]
fn the_health_check_is_filled_and_the_pinned_version_declared() {
    let no_left_out = BTreeMap::new();
    let echo = format!(
        "{ECHO}\n[health]\nhttp = \"http://${{seat:store:5432}}/ready\"\ninterval = \"1s\"\ntimeout = \"500ms\"\nhealthy_after = \"3s\"\n"
    );
    let c = catalogue(&[&echo, STORE]);
    let mut r = records(&[("n1", "echo"), ("n2", "store")]);
    r.pins.insert((n("n1"), n("echo")), "v7".into());
    let addresses = BTreeMap::from([(n("n2"), "10.0.0.2".to_string())]);
    let inputs = Inputs {
        catalogue: &c,
        records: &r,
        versions: &BTreeMap::new(),
        addresses: &addresses,
        seat_ports: &NO_PORTS,
        secrets: &NoSecrets,
        keys: &NO_KEYS,
        users_file: Err("no composition"),
        left_out: &no_left_out,
    };
    let ms = composed(compose_modules(&inputs, &n("n1")));
    assert_eq!(
        ms[0].health,
        Some(super::HealthDecl {
            check: super::CheckDecl::Http("http://10.0.0.2:5432/ready".into()),
            interval_ms: 1000,
            timeout_ms: 500,
            healthy_after_ms: 3000,
        })
    );
    assert_eq!(ms[0].pinned.as_deref(), Some("v7"));
    // The store has neither.
    let ms = composed(compose_modules(&inputs, &n("n2")));
    assert_eq!((ms[0].health.as_ref(), ms[0].pinned.as_ref()), (None, None));
    // A check naming a seat whose holder has no address leaves the module out.
    let addresses = BTreeMap::new();
    let inputs = Inputs {
        addresses: &addresses,
        ..inputs
    };
    let e = refused(compose_modules(&inputs, &n("n1")));
    assert!(e.to_string().contains("has no address recorded"), "{e}");
}

#[test]
fn an_unfilled_placeholder_is_an_error_naming_it() {
    let no_left_out = BTreeMap::new();
    let c = catalogue(&[ECHO, STORE]);
    // The store's holder is not assigned anywhere.
    let r = records(&[("n1", "echo")]);
    let empty = BTreeMap::new();
    let inputs = Inputs {
        catalogue: &c,
        records: &r,
        versions: &empty,
        addresses: &empty,
        seat_ports: &NO_PORTS,
        secrets: &NoSecrets,
        keys: &NO_KEYS,
        users_file: Err("no composition"),
        left_out: &no_left_out,
    };
    let e = refused(compose_modules(&inputs, &n("n1")));
    assert!(
        matches!(&e, ComposeError::Unfilled { placeholder, why, .. }
            if placeholder == "${seat:store:5432}" && why.contains("assign its holder")),
        "{e}"
    );
    // Assigned, but its node's address is not known.
    let r = records(&[("n1", "echo"), ("n2", "store")]);
    let inputs = Inputs {
        records: &r,
        ..inputs
    };
    let e = refused(compose_modules(&inputs, &n("n1")));
    assert!(e.to_string().contains("no address recorded"), "{e}");
}

#[test]
fn a_secret_and_a_module_without_run_are_refused() {
    let no_left_out = BTreeMap::new();
    let c = catalogue(&[
        r#"
[module]
name = "signer"
description = "signs"
[run]
command = ["signer"]
env = { KEY = "${secret:key}" }
secrets-in-environment = "the signer reads its key only from KEY"
"#,
        r#"
[module]
name = "marker"
description = "marks"
"#,
    ]);
    let empty = BTreeMap::new();
    let r = records(&[("n1", "signer")]);
    let inputs = Inputs {
        catalogue: &c,
        records: &r,
        versions: &empty,
        addresses: &empty,
        seat_ports: &NO_PORTS,
        secrets: &NoSecrets,
        keys: &NO_KEYS,
        users_file: Err("no composition"),
        left_out: &no_left_out,
    };
    let e = refused(compose_modules(&inputs, &n("n1")));
    assert!(e.to_string().contains("${secret:key}"), "{e}");
    let r = records(&[("n1", "marker")]);
    let inputs = Inputs {
        records: &r,
        ..inputs
    };
    assert!(matches!(
        refused(compose_modules(&inputs, &n("n1"))),
        ComposeError::NothingToRun { .. }
    ));
    let r = records(&[("n1", "ghost")]);
    let inputs = Inputs {
        records: &r,
        ..inputs
    };
    assert!(matches!(
        refused(compose_modules(&inputs, &n("n1"))),
        ComposeError::Unregistered { .. }
    ));
}

#[test]
fn the_users_file_goes_to_the_broker_holder_and_nowhere_else() {
    let no_left_out = BTreeMap::new();
    let c = catalogue(&[
        r#"
[module]
name = "bus"
description = "the broker"
[run]
command = ["nats-server"]
[holds]
seats = ["mesh-broker"]
[[file]]
name = "bus-users"
path = "users.conf"
[[file]]
name = "extra"
path = "extra.conf"
"#,
        r#"
[module]
name = "other"
description = "not the broker"
[run]
command = ["other"]
[[file]]
name = "conf"
path = "other.conf"
"#,
    ]);
    let r = records(&[("n1", "bus"), ("n1", "other")]);
    let empty = BTreeMap::new();
    let inputs = Inputs {
        catalogue: &c,
        records: &r,
        versions: &empty,
        addresses: &empty,
        seat_ports: &NO_PORTS,
        secrets: &NoSecrets,
        keys: &NO_KEYS,
        users_file: Ok("USERS"),
        left_out: &no_left_out,
    };
    let ms = composed(compose_modules(&inputs, &n("n1")));
    let body = |m: &str, f: &str| {
        ms.iter()
            .find(|d| d.name.as_str() == m)
            .unwrap()
            .files
            .iter()
            .find(|x| x.name.as_str() == f)
            .unwrap()
            .body
            .clone()
    };
    assert_eq!(body("bus", "bus-users"), FileBody::Content("USERS".into()));
    assert_eq!(body("bus", "extra"), FileBody::Content(String::new()));
    assert_eq!(body("other", "conf"), FileBody::Content(String::new()));
}

const BUS: &str = r#"
[module]
name = "bus"
description = "the broker"
[run]
command = ["nats-server"]
[holds]
seats = ["mesh-broker"]
[[file]]
name = "bus-users"
path = "users.conf"
"#;

#[test]
fn a_broker_holder_with_no_users_file_is_left_out_and_the_node_keeps_the_rest() {
    let c = catalogue(&[BUS, STORE]);
    let r = records(&[("n1", "bus"), ("n1", "store")]);
    let empty = BTreeMap::new();
    let inputs = Inputs {
        catalogue: &c,
        records: &r,
        versions: &empty,
        addresses: &empty,
        seat_ports: &NO_PORTS,
        secrets: &NoSecrets,
        keys: &NO_KEYS,
        users_file: Err("the controller has no credential"),
        left_out: &empty,
    };
    let m = compose_modules(&inputs, &n("n1"));
    let names: Vec<&str> = m.modules.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["store"]);
    assert_eq!(m.left_out.len(), 1, "{:?}", m.left_out);
    let e = &m.left_out[0];
    assert_eq!(e.module().as_str(), "bus");
    assert!(
        matches!(e, ComposeError::NoUserList { why, .. } if why == "the controller has no credential"),
        "{e}"
    );
    assert!(
        e.to_string().contains("would refuse every connection"),
        "{e}"
    );
}

#[test]
fn a_module_the_catalogue_leaves_out_is_named_and_the_rest_declared() {
    let c = catalogue(&[ECHO, STORE]);
    let r = records(&[("n1", "echo"), ("n1", "store")]);
    let empty = BTreeMap::new();
    let left_out = BTreeMap::from([(n("echo"), "seat ghost is declared by nobody".to_string())]);
    let inputs = Inputs {
        catalogue: &c,
        records: &r,
        versions: &empty,
        addresses: &empty,
        seat_ports: &NO_PORTS,
        secrets: &NoSecrets,
        keys: &NO_KEYS,
        users_file: Ok("USERS"),
        left_out: &left_out,
    };
    let m = compose_modules(&inputs, &n("n1"));
    assert_eq!(m.modules.len(), 1);
    assert_eq!(m.modules[0].name.as_str(), "store");
    let e = &m.left_out[0];
    assert!(
        matches!(e, ComposeError::DoesNotDerive { module, why } if module.as_str() == "echo" && why.contains("ghost")),
        "{e}"
    );
    assert!(e.to_string().contains("mesh catalogue register"), "{e}");
}

#[test]
fn one_unfillable_placeholder_leaves_out_one_module() {
    let c = catalogue(&[ECHO, STORE]);
    // echo's store holder runs on n1, whose address nobody recorded.
    let r = records(&[("n1", "echo"), ("n1", "store")]);
    let empty = BTreeMap::new();
    let inputs = Inputs {
        catalogue: &c,
        records: &r,
        versions: &empty,
        addresses: &empty,
        seat_ports: &NO_PORTS,
        secrets: &NoSecrets,
        keys: &NO_KEYS,
        users_file: Ok("USERS"),
        left_out: &empty,
    };
    let m = compose_modules(&inputs, &n("n1"));
    assert_eq!(m.modules.len(), 1);
    assert_eq!(m.modules[0].name.as_str(), "store");
    assert!(
        matches!(&m.left_out[..], [ComposeError::Unfilled { module, .. }] if module.as_str() == "echo"),
        "{:?}",
        m.left_out
    );
}

/// Secrets as the controller holds them, sealing with a fresh "nonce"
/// each time (a counter), the digest keyed by `key`.
#[derive(Debug)]
struct TestSecrets {
    values: BTreeMap<Name, String>,
    sealable: Vec<Name>,
    key: &'static str,
    nonce: std::sync::atomic::AtomicU32,
}

impl Secrets for TestSecrets {
    fn value(&self, name: &Name) -> Option<String> {
        self.values.get(name).cloned()
    }

    fn seal(&self, node: &Name, plaintext: &str) -> Result<String, String> {
        if !self.sealable.contains(node) {
            return Err(format!("node {node} has no sealing key recorded"));
        }
        let nonce = self
            .nonce
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        // Stands for a box: nothing of the plaintext but its length.
        Ok(format!("box{nonce}-{}", plaintext.len()))
    }

    fn digest(&self, values: &[(String, String)]) -> String {
        use std::hash::{Hash as _, Hasher as _};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (self.key, values).hash(&mut h);
        format!("{:016x}", h.finish())
    }
}

const SIGNER: &str = r#"
[module]
name = "signer"
description = "signs"
[run]
command = ["signer", "--key-file", "${file:key}"]
env = { DB_PASSWORD = "${secret:db-password}", MODE = "plain" }
secrets-in-environment = "the driver reads its password only from DB_PASSWORD"
[[file]]
name = "key"
path = "secrets/key"
content = "${secret:signing-key}"
[[file]]
name = "conf"
path = "conf.toml"
content = "mode = 1"
"#;

#[test]
fn secrets_are_sealed_to_the_node_and_only_a_new_value_is_a_change() {
    let no_left_out = BTreeMap::new();
    let c = catalogue(&[SIGNER]);
    let r = records(&[("n1", "signer")]);
    let empty = BTreeMap::new();
    let secrets = |pw: &str| TestSecrets {
        values: BTreeMap::from([
            (n("db-password"), pw.to_string()),
            (n("signing-key"), "KEY-PLAINTEXT".to_string()),
        ]),
        sealable: vec![n("n1")],
        key: "k",
        nonce: std::sync::atomic::AtomicU32::new(0),
    };
    let first = secrets("PW-ONE");
    let inputs = Inputs {
        catalogue: &c,
        records: &r,
        versions: &empty,
        addresses: &empty,
        users_file: Ok("USERS"),
        left_out: &no_left_out,
        seat_ports: &NO_PORTS,
        secrets: &first,
        keys: &NO_KEYS,
    };
    let ms = composed(compose_modules(&inputs, &n("n1")));
    let m = &ms[0];
    assert_eq!(m.run.env.keys().collect::<Vec<_>>(), ["MODE"]);
    assert_eq!(m.run.sealed_env.keys().collect::<Vec<_>>(), ["DB_PASSWORD"]);
    assert!(matches!(&m.files[0].body, FileBody::Sealed(b) if b.starts_with("box")));
    assert_eq!(m.files[1].body, FileBody::Content("mode = 1".into()));
    let wire = String::from_utf8(
        next_declaration(&n("n1"), ms.clone(), None, None, 1)
            .unwrap()
            .to_bytes(),
    )
    .unwrap();
    // Nor does the manifest's reason for a secret in the environment
    // reach the machine: it stays in the catalogue (L87).
    assert!(
        !wire.contains("reads its password only") && !wire.contains("secrets-in-environment"),
        "{wire}"
    );
    assert!(
        !wire.contains("PW-ONE") && !wire.contains("KEY-PLAINTEXT"),
        "{wire}"
    );

    // Sealed again (another nonce), the same values: no new declaration.
    let last = next_declaration(&n("n1"), ms.clone(), None, None, 1).unwrap();
    let again = composed(compose_modules(&inputs, &n("n1")));
    assert_ne!(again[0].run.sealed_env, ms[0].run.sealed_env, "fresh seals");
    assert_eq!(
        next_declaration(&n("n1"), again, None, Some(&last), 2),
        None
    );
    // A new value: a new declaration.
    let second = secrets("PW-TWO");
    let inputs2 = Inputs {
        secrets: &second,
        ..inputs
    };
    let changed = composed(compose_modules(&inputs2, &n("n1")));
    assert_ne!(changed[0].secrets, ms[0].secrets);
    assert!(next_declaration(&n("n1"), changed, None, Some(&last), 3).is_some());
}

#[test]
fn a_secret_with_no_value_or_no_sealing_key_leaves_its_module_out() {
    let no_left_out = BTreeMap::new();
    let c = catalogue(&[SIGNER, STORE]);
    let r = records(&[("n2", "signer"), ("n2", "store")]);
    let empty = BTreeMap::new();
    let none = TestSecrets {
        values: BTreeMap::from([(n("signing-key"), "K".to_string())]),
        sealable: vec![n("n2")],
        key: "k",
        nonce: std::sync::atomic::AtomicU32::new(0),
    };
    let inputs = Inputs {
        catalogue: &c,
        records: &r,
        versions: &empty,
        addresses: &empty,
        users_file: Ok("USERS"),
        left_out: &no_left_out,
        seat_ports: &NO_PORTS,
        secrets: &none,
        keys: &NO_KEYS,
    };
    let m = compose_modules(&inputs, &n("n2"));
    assert_eq!(m.modules.len(), 1, "store is still declared");
    assert!(
        m.left_out[0]
            .to_string()
            .contains("no value is recorded for secret db-password; set one with `mesh secret set db-password`"),
        "{}",
        m.left_out[0]
    );
    let unsealable = TestSecrets {
        values: BTreeMap::from([
            (n("db-password"), "P".to_string()),
            (n("signing-key"), "K".to_string()),
        ]),
        sealable: vec![],
        key: "k",
        nonce: std::sync::atomic::AtomicU32::new(0),
    };
    let inputs = Inputs {
        secrets: &unsealable,
        ..inputs
    };
    let m = compose_modules(&inputs, &n("n2"));
    assert!(
        matches!(&m.left_out[..], [ComposeError::Unsealable { node, why, .. }]
            if node.as_str() == "n2" && why.contains("no sealing key")),
        "{:?}",
        m.left_out
    );
}

#[test]
fn a_seat_address_takes_the_nodes_given_port_over_the_manifests() {
    let no_left_out = BTreeMap::new();
    let c = catalogue(&[ECHO, STORE]);
    let r = records(&[("n1", "echo"), ("n2", "store")]);
    let versions = BTreeMap::new();
    let addresses = BTreeMap::from([(n("n2"), "10.0.0.2".to_string())]);
    let given = BTreeMap::from([((n("n2"), n("store")), 6432u16)]);
    let inputs = Inputs {
        catalogue: &c,
        records: &r,
        versions: &versions,
        addresses: &addresses,
        users_file: Ok("USERS"),
        left_out: &no_left_out,
        seat_ports: &given,
        secrets: &NoSecrets,
        keys: &NO_KEYS,
    };
    let ms = composed(compose_modules(&inputs, &n("n1")));
    assert_eq!(ms[0].run.command[2], "10.0.0.2:6432");
    // Given on another node: the manifest's number.
    let elsewhere = BTreeMap::from([((n("n1"), n("store")), 6432u16)]);
    let inputs = Inputs {
        seat_ports: &elsewhere,
        ..inputs
    };
    let ms = composed(compose_modules(&inputs, &n("n1")));
    assert_eq!(ms[0].run.command[2], "10.0.0.2:5432");
}

#[test]
fn paths_stay_inside_the_module_directory() {
    for ok in ["a", "a/b.toml", "conf/echo.toml"] {
        assert!(is_inside(ok), "{ok}");
    }
    for bad in ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a/."] {
        assert!(!is_inside(bad), "{bad}");
    }
}

#[test]
fn only_a_change_makes_a_new_declaration() {
    let m = ModuleDecl {
        name: n("echo"),
        version: "v1".into(),
        run: RunDecl {
            driver: crate::manifest::Driver::Process,
            image: None,
            command: vec!["e".into()],
            env: BTreeMap::new(),
            stop_grace_s: 10,
            sealed_env: BTreeMap::new(),
        },
        files: vec![],
        secrets: None,
        key: None,
        artifacts: Vec::new(),
        pinned: None,
        health: None,
    };
    let bus = |port: u16| {
        Some(BusDecl {
            urls: vec![format!("tls://127.0.0.1:{port}")],
        })
    };
    let first = next_declaration(&n("n1"), vec![m.clone()], bus(4222), None, 7).unwrap();
    assert_eq!((first.sequence, first.composed_at), (1, 7));
    assert_eq!(
        next_declaration(&n("n1"), vec![m.clone()], bus(4222), Some(&first), 8),
        None
    );
    let mut changed = m.clone();
    changed.version = "v2".into();
    let at4 = Declaration {
        sequence: 4,
        ..first.clone()
    };
    let next = next_declaration(&n("n1"), vec![changed], bus(4222), Some(&at4), 9).unwrap();
    assert_eq!(next.sequence, 5);
    // Everything unassigned is a declaration too: run nothing.
    let none = next_declaration(&n("n1"), vec![], bus(4222), Some(&next), 9).unwrap();
    assert!(none.modules.is_empty());
    // The broker moved: a new declaration, modules unchanged.
    let moved = next_declaration(&n("n1"), vec![m.clone()], bus(4333), Some(&first), 10)
        .expect("a new address is a change");
    assert_eq!((moved.sequence, moved.modules), (2, vec![m]));
    assert_eq!(moved.bus, bus(4333));
}

#[test]
fn a_host_ahead_of_the_records_is_declared_again_above_what_it_applied() {
    let node = n("n1");
    let last = next_declaration(&node, Vec::new(), None, None, 1).unwrap();
    assert_eq!(last.sequence, 1);
    // In step (the host applied the newest recorded, or an older one):
    // unchanged is no declaration, a change is the next sequence.
    for applied in [None, Some(0), Some(1)] {
        assert_eq!(
            next_declaration_after(&node, Vec::new(), None, Some(&last), applied, 2),
            None,
            "{applied:?}"
        );
    }
    // Applied 3 while the records hold 1 (a restored store): declared
    // again, unchanged, at 4 — the host refuses anything not above 3.
    let again = next_declaration_after(&node, Vec::new(), None, Some(&last), Some(3), 2).unwrap();
    assert_eq!((again.sequence, again.composed_at), (4, 2));
    assert_eq!(again.node, node);
    // Nothing recorded at all, the host applied 2: declared at 3.
    let first = next_declaration_after(&node, Vec::new(), None, None, Some(2), 5).unwrap();
    assert_eq!(first.sequence, 3);
    // Applied exactly what the records hold: the usual next one.
    let bus = Some(BusDecl {
        urls: vec!["tls://10.0.0.1:4222".into()],
    });
    let moved = next_declaration_after(&node, Vec::new(), bus, Some(&last), Some(1), 6).unwrap();
    assert_eq!(moved.sequence, 2);
}

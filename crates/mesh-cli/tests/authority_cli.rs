//! `mesh fleet load`, `mesh authority compose` and `mesh authority explain`
//! from the binary, against a SQLite store in a temp dir.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .canonicalize()
        .unwrap()
}

/// Runs `mesh` with its store in `dir`, whatever it exits with.
fn run_mesh(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(args)
        .env(
            "MESH_STORE",
            format!("sqlite://{}", dir.join("mesh.db").display()),
        )
        .current_dir(dir)
        .output()
        .unwrap()
}

/// Runs `mesh` with its store in `dir` and requires success.
fn mesh(dir: &Path, args: &[&str]) -> Output {
    let out = run_mesh(dir, args);
    assert!(
        out.status.success(),
        "mesh {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn load_fleet(dir: &Path) {
    let catalogue = examples().join("catalogue");
    let fleet = examples().join("fleet.toml");
    mesh(
        dir,
        &[
            "fleet",
            "load",
            fleet.to_str().unwrap(),
            "--catalogue",
            catalogue.to_str().unwrap(),
        ],
    );
}

fn compose(dir: &Path, out: &str) -> (Vec<u8>, String) {
    let catalogue = examples().join("catalogue");
    let o = mesh(
        dir,
        &[
            "authority",
            "compose",
            "--catalogue",
            catalogue.to_str().unwrap(),
            "--out",
            out,
        ],
    );
    (
        std::fs::read(dir.join(out)).unwrap(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn compose_is_deterministic_and_the_server_accepts_it() {
    let dir = tempfile::tempdir().unwrap();
    load_fleet(dir.path());
    let (a, stderr) = compose(dir.path(), "broker/users.conf");
    // The node that only holds a token has no host credential yet: named.
    assert!(
        stderr.contains("left out") && stderr.contains("host_n4"),
        "{stderr}"
    );
    // Loading again mints nothing and changes nothing.
    load_fleet(dir.path());
    let (b, _) = compose(dir.path(), "broker/users.conf");
    assert_eq!(a, b, "same records, same bytes");
    let text = String::from_utf8(a).unwrap();
    // The enrolment principal is the token's enrolment key.
    assert!(text.contains("# enrol_n4\n"), "{text}");
    assert!(!text.contains("host_n4"));

    // The broker's own config includes ours by bare name, from its directory.
    let broker = dir.path().join("broker");
    std::fs::write(
        broker.join("nats.conf"),
        format!(
            "listen: \"127.0.0.1:-1\"\njetstream {{ store_dir: {:?} }}\ninclude users.conf\n",
            dir.path().join("js").display().to_string()
        ),
    )
    .unwrap();
    mesh_testkit::nats::test_config(&broker.join("nats.conf"))
        .expect("nats-server -t accepts the composed users file");
}

/// Authority is derived from the records every time, never read back: the
/// users file a clustered bus shares through the store (the one stored
/// text with permissions in it) has no say in what is composed (L40).
#[test]
fn a_shared_users_file_is_never_read_back_as_authority() {
    let dir = tempfile::tempdir().unwrap();
    load_fleet(dir.path());
    let (derived, _) = compose(dir.path(), "broker/users.conf");
    let url = format!("sqlite://{}", dir.path().join("mesh.db").display());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = mesh_store::Store::open(&url).await.unwrap();
        store
            .share_users_file(
                "authorization { users = [ { nkey: \"UAAA\", permissions: { publish: \">\" } } ] }",
            )
            .await
            .unwrap();
        store.close().await;
    });
    let (again, _) = compose(dir.path(), "broker/users.conf");
    assert_eq!(
        String::from_utf8(again).unwrap(),
        String::from_utf8(derived).unwrap(),
        "a stored users file changed what the records derive"
    );
}

/// (principal, "nkey" or "password") for every user of a composed file: an
/// NKey user is named by the comment above it, a password user by `user:`.
fn users_of(text: &str) -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    let mut name = None;
    for raw in text.lines() {
        let line = raw.trim();
        // Users sit at six spaces; the file's own header comments at none.
        if let Some(n) = raw.strip_prefix("      # ") {
            name = Some(n.to_string());
        } else if let Some(n) = line.strip_prefix("user: ") {
            name = Some(n.trim_matches('"').to_string());
        } else if line.starts_with("nkey: ") {
            out.push((name.take().expect("an nkey names its principal"), "nkey"));
        } else if line.starts_with("password: ") {
            out.push((name.take().expect("a password has its user"), "password"));
        } else if line.starts_with('}') {
            name = None;
        }
    }
    out
}

/// Machines authenticate by NKey, never by password (DESIGN §5): from the
/// example fleet, every machine principal is an `nkey:` and only persons
/// have a `password:`; the secrets written are seeds for the machines.
#[test]
fn every_machine_is_an_nkey_and_only_persons_have_passwords() {
    let dir = tempfile::tempdir().unwrap();
    load_fleet(dir.path());
    let (bytes, _) = compose(dir.path(), "broker/users.conf");
    let text = String::from_utf8(bytes).unwrap();
    let users = users_of(&text);
    let passwords: Vec<&str> = users
        .iter()
        .filter(|(_, c)| *c == "password")
        .map(|(p, _)| p.as_str())
        .collect();
    assert_eq!(passwords, ["person_alice", "person_bob"], "{text}");
    let nkeys: Vec<&str> = users
        .iter()
        .filter(|(_, c)| *c == "nkey")
        .map(|(p, _)| p.as_str())
        .collect();
    // The controller, three hosts, ten modules and n4's enrolment.
    assert_eq!(nkeys.len(), 15, "{nkeys:?}");
    for p in ["controller", "host_n1", "host_n2", "host_n3", "enrol_n4"] {
        assert!(nkeys.contains(&p), "{p} is not an nkey: {nkeys:?}");
    }
    assert!(nkeys.iter().all(|p| !p.starts_with("person_")));
    assert_eq!(
        nkeys.iter().filter(|p| p.starts_with("module_")).count(),
        10
    );
    for line in text.lines().filter(|l| l.trim().starts_with("nkey: ")) {
        let key = line.trim()["nkey: ".len()..].trim_matches('"');
        assert!(key.starts_with('U') && key.len() == 56, "{line}");
    }
    // What the load wrote for each machine is its seed, for persons a password.
    let secrets = dir.path().join(".mesh/secrets");
    for p in &nkeys {
        let seed = std::fs::read_to_string(secrets.join(p)).unwrap();
        assert!(seed.starts_with("SU"), "{p}'s secret is not a seed");
    }
    for p in &passwords {
        let pw = std::fs::read_to_string(secrets.join(p)).unwrap();
        assert!(!pw.starts_with("SU"), "{p}'s secret is a seed");
    }

    let broker = dir.path().join("broker");
    std::fs::write(
        broker.join("nats.conf"),
        "listen: \"127.0.0.1:-1\"\ninclude users.conf\n",
    )
    .unwrap();
    mesh_testkit::nats::test_config(&broker.join("nats.conf"))
        .expect("nats-server -t accepts the composed users file");
}

/// The `nkey:` line composed for `principal`.
fn nkey_of(text: &str, principal: &str) -> String {
    let at = text
        .find(&format!("      # {principal}\n"))
        .unwrap_or_else(|| panic!("{principal} is not an nkey user"));
    let line = text[at..].lines().nth(2).unwrap().trim();
    line.strip_prefix("nkey: ").expect(line).to_string()
}

/// `--remint` of a machine rotates its key: a new seed in its file, the new
/// public key composed, every other principal's key as it was.
#[test]
fn reminting_a_machine_rotates_its_key_alone() {
    let dir = tempfile::tempdir().unwrap();
    load_fleet(dir.path());
    let (before, _) = compose(dir.path(), "users.conf");
    let before = String::from_utf8(before).unwrap();
    let seed_file = dir.path().join(".mesh/secrets/host_n1");
    let old_seed = std::fs::read(&seed_file).unwrap();
    let catalogue = examples().join("catalogue");
    let fleet = examples().join("fleet.toml");
    let out = mesh(
        dir.path(),
        &[
            "fleet",
            "load",
            fleet.to_str().unwrap(),
            "--catalogue",
            catalogue.to_str().unwrap(),
            "--remint",
            "host_n1",
        ],
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("1 credential minted"), "{said}");
    let (after, _) = compose(dir.path(), "users.conf");
    let after = String::from_utf8(after).unwrap();
    assert_ne!(std::fs::read(&seed_file).unwrap(), old_seed, "a new seed");
    assert_ne!(nkey_of(&before, "host_n1"), nkey_of(&after, "host_n1"));
    for p in ["controller", "host_n2", "module_n1_git-server", "enrol_n4"] {
        assert_eq!(nkey_of(&before, p), nkey_of(&after, p), "{p} changed");
    }
}

#[test]
fn explain_names_the_manifest_line_behind_each_grant() {
    let dir = tempfile::tempdir().unwrap();
    load_fleet(dir.path());
    let catalogue = examples().join("catalogue");
    let out = mesh(
        dir.path(),
        &[
            "authority",
            "explain",
            "module_n1_audit-log",
            "--catalogue",
            catalogue.to_str().unwrap(),
            "--format",
            "json",
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["name"], "module_n1_audit-log");
    assert_eq!(v["has_credential"], true);
    let emits = v["permissions"]["publish"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["subject"] == "mesh.mod.audit-log.event.entry-written")
        .expect("the emitted event is granted");
    assert_eq!(emits["cause"]["from"], "manifest");
    assert!(
        emits["cause"]["file"]
            .as_str()
            .unwrap()
            .ends_with("audit-log/mesh.toml")
    );
    assert_eq!(emits["cause"]["line"], 15);
    // What it hears: its EVENTS consumer and that consumer's filters.
    let consumers = v["consumers"].as_array().unwrap();
    assert_eq!(consumers.len(), 1);
    assert_eq!(consumers[0]["name"], "mod_audit-log");
    assert!(
        consumers[0]["filter_subjects"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "mesh.seat.mesh-build-machine.event.built")
    );

    let text = mesh(
        dir.path(),
        &[
            "authority",
            "explain",
            "person_bob",
            "--catalogue",
            catalogue.to_str().unwrap(),
        ],
    );
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("mesh.seat.git.tool.clone"), "{text}");
    assert!(text.contains("allow_responses: no"), "{text}");
    // The same grants on a mesh on AMQP: a RabbitMQ user's permissions.
    assert!(
        text.contains("on AMQP (RabbitMQ user person_bob):"),
        "{text}"
    );
    assert!(
        text.contains(
            r"publish mesh.seat.git.tool.clone  ->  topic write mesh\.seat\.git\.tool\.clone"
        ),
        "{text}"
    );
    assert!(text.contains(r"  configure: ^(amq\.gen-.+)$"), "{text}");
    // And in JSON, the queue the module's consumer waits in.
    let amqp = &v["amqp"];
    assert_eq!(amqp["user"], "module_n1_audit-log");
    assert!(
        amqp["read"]
            .as_str()
            .unwrap()
            .contains(r"mesh\.queue\.mod_audit-log"),
        "{amqp}"
    );
}

#[test]
fn explaining_an_unknown_principal_suggests_close_names() {
    let dir = tempfile::tempdir().unwrap();
    load_fleet(dir.path());
    let catalogue = examples().join("catalogue");
    let out = run_mesh(
        dir.path(),
        &[
            "authority",
            "explain",
            "host_nope",
            "--catalogue",
            catalogue.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no principal \"host_nope\"") && err.contains("host_n1"),
        "{err}"
    );
}

#[test]
fn a_fleet_file_with_a_typo_is_refused_with_its_location() {
    let err = refused_fleet("[[node]]\nname = \"n1\"\nmodulse = [\"git-server\"]\n");
    assert!(err.contains("fleet.toml:3:1"), "{err}");
    assert!(err.contains("modulse"), "{err}");
}

#[test]
fn help_never_prints_the_store_password() {
    for cmd in [
        &["authority", "compose", "--help"][..],
        &["fleet", "load", "--help"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_mesh"))
            .args(cmd)
            .env("MESH_STORE", "postgres://mesh:hunter2@127.0.0.1/mesh")
            .output()
            .unwrap();
        assert!(out.status.success(), "{cmd:?}");
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.contains("MESH_STORE"), "{help}");
        assert!(
            !help.contains("hunter2"),
            "{cmd:?} printed the password: {help}"
        );
    }
}

/// Runs `fleet load` on `text`; returns its stderr after asserting it was
/// refused and wrote nothing: no store, no secret.
fn refused_fleet(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let fleet = dir.path().join("fleet.toml");
    std::fs::write(&fleet, text).unwrap();
    let catalogue = examples().join("catalogue");
    let out = run_mesh(
        dir.path(),
        &[
            "fleet",
            "load",
            fleet.to_str().unwrap(),
            "--catalogue",
            catalogue.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        !dir.path().join("mesh.db").exists(),
        "the store was written"
    );
    assert!(!dir.path().join(".mesh").exists(), "secrets were written");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_fleet_file_is_checked_whole_before_anything_is_recorded() {
    // The first node is fine; the second names a module the catalogue lacks.
    let err = refused_fleet(
        "[[node]]\nname = \"n1\"\nmodules = [\"audit-log\"]\n\n\
         [[node]]\nname = \"n2\"\nmodules = [\"audit-logg\"]\n",
    );
    assert!(
        err.contains("fleet.toml:7:12: error[bad-value]: node `n2` runs `audit-logg`, which is not in the catalogue"),
        "{err}"
    );
    assert!(err.contains("did you mean `audit-log`?"), "{err}");
}

#[test]
fn a_star_beside_other_tools_is_refused_not_read_as_every_tool() {
    let err = refused_fleet("[[person]]\nname = \"carol\"\ntools = [\"*\", \"audit-log.serch\"]\n");
    assert!(err.contains("fleet.toml:3:10: error[bad-value]"), "{err}");
    assert!(err.contains("`*` stands alone"), "{err}");
    // The other entry is checked too, not hidden behind the first error.
    assert!(err.contains("did you mean `audit-log.search`?"), "{err}");
}

//! Secrets and addresses, live: a real broker on the composed users file, a
//! real `mesh controller`, real `mesh host`s. A module using two secrets
//! (one in its environment, with the manifest's reason; one in a file) runs
//! and sees both values; then every place the mesh keeps or shows anything
//! is scanned for each plaintext, and none holds it but the module's own
//! environment and file. Rotation restarts exactly the module that uses
//! the secret; a controller restart restarts nothing. `${seat:S:PORT}` is
//! filled from node addresses and given ports, and a module that cannot be
//! filled is left out alone, named. A container's secret never reaches the
//! engine, and no secret outlives its module (`secrets_live/engine.rs`).

#[path = "secrets_live/engine.rs"]
mod engine;
#[path = "join_live/harness.rs"]
mod harness;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use harness::{Backend, Daemon, Mesh, wait_bound, wait_until};
use mesh_core::names::Name;
use sha2::Digest as _;

const LONG: Duration = Duration::from_secs(60);

const VAULT_USER: &str = r#"[module]
name = "vault-user"
description = "reads a password from its environment and a token from a file"

[run]
command = ["sh", "-c", "printf %s \"$DB_PASSWORD\" | sha256sum > env.sha; sha256sum < \"$1\" > file.sha; echo $$ > pid; exec sleep 3600", "vault-user", "${file:token}"]
env = { DB_PASSWORD = "${secret:db-password}" }
secrets-in-environment = "the database driver reads its password only from DB_PASSWORD"

[[file]]
name = "token"
path = "secrets/token"
content = "${secret:api-token}"
"#;

const BYSTANDER: &str = r#"[module]
name = "bystander"
description = "uses no secret"

[run]
command = ["sh", "-c", "echo $$ > pid; exec sleep 3600"]
"#;

const DB: &str = r#"[module]
name = "db"
description = "holds the db seat"

[run]
command = ["sleep", "3600"]

[[seat]]
name = "db"
scope = "mesh"
protocol = "pg"

[holds]
seats = ["db"]
"#;

const APP: &str = r#"[module]
name = "app"
description = "reaches the db seat's holder"

[run]
command = ["sh", "-c", "printf %s \"$DB_ADDR\" > addr; exec sleep 3600"]
env = { DB_ADDR = "${seat:db:5432}" }
"#;

const DB2: &str = r#"[module]
name = "db2"
description = "holds the db2 seat"

[run]
command = ["sleep", "3600"]

[[seat]]
name = "db2"
scope = "mesh"
protocol = "pg"

[holds]
seats = ["db2"]
"#;

const APP2: &str = r#"[module]
name = "app2"
description = "reaches the db2 seat's holder, on a node with no address"

[run]
command = ["sleep", "3600"]
env = { DB_ADDR = "${seat:db2:5432}" }
"#;

const NFT: &str = r#"[module]
name = "nft"
description = "holds the node-scoped filter seat"

[run]
command = ["sleep", "3600"]

[[seat]]
name = "filter"
scope = "node"
protocol = "http"

[holds]
seats = ["filter"]
"#;

const APP3: &str = r#"[module]
name = "app3"
description = "reaches its own node's filter"

[run]
command = ["sh", "-c", "printf %s \"$FILTER_ADDR\" > addr; exec sleep 3600"]
env = { FILTER_ADDR = "${seat:filter:8080}" }
"#;

/// A random value nothing else in the mesh could hold by chance.
fn plaintext(what: &str) -> String {
    use rand::RngCore as _;
    let mut b = [0u8; 12];
    rand::rng().fill_bytes(&mut b);
    format!("{what}-{}", hex::encode(b))
}

fn sha256_hex(s: &str) -> String {
    hex::encode(sha2::Sha256::digest(s.as_bytes()))
}

fn catalogue(dir: &Path) -> PathBuf {
    let root = dir.join("catalogue");
    for (name, text) in [
        ("vault-user", VAULT_USER),
        ("bystander", BYSTANDER),
        ("db", DB),
        ("app", APP),
        ("db2", DB2),
        ("app2", APP2),
        ("nft", NFT),
        ("app3", APP3),
    ] {
        std::fs::create_dir_all(root.join(name)).unwrap();
        std::fs::write(root.join(name).join("mesh.toml"), text).unwrap();
    }
    root
}

/// `mesh secret set NAME` with `value` on standard input.
fn set_secret(mesh: &Mesh, name: &str, value: &str) {
    set_secret_with(mesh, name, value, &[]);
}

/// `set_secret` with more arguments; what it printed.
fn set_secret_with(mesh: &Mesh, name: &str, value: &str, more: &[&str]) -> String {
    use std::io::Write as _;
    let mut child = Command::new(harness::mesh_bin())
        .args(["secret", "set", name])
        .args(more)
        .args([
            "--dir",
            mesh.dir.to_str().unwrap(),
            "--store",
            &mesh.store_url,
        ])
        .env_remove("MESH_STORE")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{value}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "secret set {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ok(mesh: &Mesh, args: &[&str]) -> String {
    let out = mesh.mesh(args);
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// A mesh of `backend` with the test catalogue, its controller serving
/// HTTP, and two enrolled hosts: n1 advertising 127.0.0.1, n2 given an
/// address by the operator.
async fn mesh(backend: Backend) -> (Mesh, Vec<Daemon>, String) {
    let mut mesh = Mesh::new(backend);
    let http = format!("127.0.0.1:{}", mesh_testkit::broker::free_port().unwrap());
    mesh.start_controller_with(&["--http", &http]);
    let cat = catalogue(mesh.tmp.path());
    mesh.register(&cat);
    let t1 = mesh.node_add("n1", "1h");
    let out = mesh.mesh(&["node", "add", "n2", "--address", "10.9.8.7"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t2 = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let hosts = vec![
        mesh.host_with("n1", Some(&t1), &["--advertise", "127.0.0.1"]),
        mesh.host("n2", Some(&t2)),
    ];
    let js = async_nats::jetstream::new(mesh.observer().await);
    wait_bound(&js, &["n1", "n2"], LONG).await;
    (mesh, hosts, http)
}

/// What a module wrote in its work directory on `node`.
fn work(mesh: &Mesh, node: &str, module: &str, file: &str) -> PathBuf {
    mesh.module_dir(node, module).join("work").join(file)
}

/// Every file under `dir`, recursively (symlinks not followed).
fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(ty) = e.file_type() else { continue };
        if ty.is_dir() {
            files_under(&e.path(), out);
        } else if ty.is_file() {
            out.push(e.path());
        }
    }
}

/// Each place scanned, and where a plaintext was found.
#[derive(Default)]
struct Scan {
    places: usize,
    found: Vec<String>,
}

impl Scan {
    /// Looks for each secret as it is, and as it reads inside base64 at any
    /// alignment (a declaration's envelope is base64 of its bytes).
    fn check(&mut self, place: &str, bytes: &[u8], secrets: &[&str]) {
        self.places += 1;
        for s in secrets {
            if needles(s)
                .iter()
                .any(|n| bytes.windows(n.len()).any(|w| w == n.as_slice()))
            {
                self.found.push(format!("{s:.12}… in {place}"));
            }
        }
    }
}

/// `s`, and the base64 characters that encode `s` alone whatever came
/// before it (three alignments) in standard and URL-safe alphabets.
fn needles(s: &str) -> Vec<Vec<u8>> {
    use base64::Engine as _;
    let mut out = vec![s.as_bytes().to_vec()];
    for k in 0..3usize {
        let mut bytes = vec![0u8; k];
        bytes.extend_from_slice(s.as_bytes());
        for engine in [
            &base64::engine::general_purpose::STANDARD,
            &base64::engine::general_purpose::URL_SAFE,
        ] {
            let text = engine.encode(&bytes);
            let start = (4 * k).div_ceil(3);
            let end = 4 * (bytes.len() / 3);
            out.push(text.as_bytes()[start..end].to_vec());
        }
    }
    out
}

/// Every message NODES, CONTROL and EVENTS hold, read as the controller.
async fn scan_streams(mesh: &Mesh, scan: &mut Scan, secrets: &[&str]) {
    let js = async_nats::jetstream::new(mesh.observer().await);
    for name in ["NODES", "CONTROL", "EVENTS"] {
        let mut stream = js.get_stream(name).await.unwrap();
        let (first, last) = {
            let info = stream.info().await.unwrap();
            (info.state.first_sequence, info.state.last_sequence)
        };
        for seq in first..=last {
            if let Ok(m) = stream.get_raw_message(seq).await {
                scan.check(&format!("{name} message {seq}"), &m.payload, secrets);
            }
        }
    }
}

/// Every process's command line on this machine.
fn scan_cmdlines(scan: &mut Scan, secrets: &[&str]) {
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        if let Ok(bytes) = std::fs::read(e.path().join("cmdline")) {
            scan.check(&format!("/proc/{pid}/cmdline"), &bytes, secrets);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_reach_only_the_module_and_rotate_the_module_that_uses_them() {
    let (mut mesh, _hosts, http) = mesh(Backend::Sqlite).await;
    let (pw1, pw2, token) = (plaintext("pw"), plaintext("pw"), plaintext("token"));
    set_secret(&mesh, "db-password", &pw1);
    set_secret(&mesh, "api-token", &token);
    mesh.assign("vault-user", "n1", true);
    mesh.assign("bystander", "n1", true);
    let env_sha = work(&mesh, "n1", "vault-user", "env.sha");
    let file_sha = work(&mesh, "n1", "vault-user", "file.sha");
    assert!(
        wait_until(LONG, || read(&env_sha)
            .is_some_and(|s| s.contains(&sha256_hex(&pw1)))),
        "the module sees the password in its environment: {:?}",
        read(&env_sha)
    );
    // The module writes the file's digest after the environment's: waited
    // for, not read the moment the first appears.
    assert!(
        wait_until(LONG, || read(&file_sha)
            .is_some_and(|s| s.contains(&sha256_hex(&token)))),
        "the module sees the token in its file: {:?}",
        read(&file_sha)
    );
    let token_file = work(&mesh, "n1", "vault-user", "secrets/token");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let n1_dir = mesh.host_dir("n1");
    let pid_of = |m: &str| {
        read(&n1_dir.join("modules").join(m).join("work/pid")).map(|p| p.trim().to_string())
    };
    // Each module writes its pid last: waited for, not read.
    assert!(wait_until(LONG, || pid_of("bystander").is_some()
        && pid_of("vault-user").is_some()));
    let (user_pid, bystander_pid) = (pid_of("vault-user").unwrap(), pid_of("bystander").unwrap());

    // Listed by name and use, never by value.
    let listed = ok(&mesh, &["secret", "list", "--output", "json"]);
    let rows: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(rows[0]["name"], "api-token");
    assert_eq!(rows[1]["used_by"], serde_json::json!(["vault-user"]));
    let out = mesh.mesh(&["secret", "remove", "db-password"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("used by vault-user"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Rotation: a new value restarts exactly the module that uses it.
    let (before, _) = newest(&mesh, "n1").await;
    let started = harness::module_pid(&mesh, "n1", "vault-user");
    // `--wait` returns once the node reports the declaration carrying the
    // new value: the module was already started again.
    let waited = set_secret_with(&mesh, "db-password", &pw2, &["--wait", "--timeout", "90s"]);
    assert!(
        waited.contains(&format!(
            "vault-user on n1: running (declaration {})",
            before + 1
        )),
        "`secret set --wait` answered with another declaration than the new value's: {waited}"
    );
    let restarted = harness::module_pid(&mesh, "n1", "vault-user");
    assert!(
        started.is_some() && restarted.is_some() && restarted != started,
        "`secret set --wait` returned before the module restarted: {started:?} then {restarted:?}"
    );
    assert!(
        wait_until(LONG, || read(&env_sha)
            .is_some_and(|s| s.contains(&sha256_hex(&pw2)))),
        "the module restarts with the new value"
    );
    // The module writes its pid after the digest: waited for, not read.
    assert!(
        wait_until(LONG, || pid_of("vault-user").is_some_and(|p| p != user_pid)),
        "a new process, not the old one"
    );
    assert_eq!(pid_of("bystander").unwrap(), bystander_pid, "untouched");
    let (after, _) = newest(&mesh, "n1").await;
    assert_eq!(after, before + 1, "one new declaration for the new value");

    // A controller restart seals every value again, with fresh nonces:
    // no change, nothing restarted.
    let user_pid = pid_of("vault-user").unwrap();
    mesh.controller.as_mut().unwrap().stop();
    mesh.start_controller_with(&["--http", &http]);
    mesh.controller().wait_log("declarations composed", LONG);
    assert_eq!(newest(&mesh, "n1").await.0, after, "no new declaration");
    assert_eq!(pid_of("vault-user").unwrap(), user_pid);

    // n1's declaration replayed to n2's host: refused before anything is
    // opened, nothing written.
    let (_, body) = newest(&mesh, "n1").await;
    let js = async_nats::jetstream::new(mesh.observer().await);
    js.publish("mesh.node.n2.declaration", body.into_bytes().into())
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(
        wait_until(LONG, || {
            let out = mesh.mesh(&["reports", "n2", "--output", "json"]);
            String::from_utf8_lossy(&out.stdout).contains("for node n1, not this node")
        }),
        "n2's host refuses n1's declaration"
    );
    assert!(!mesh.module_dir("n2", "vault-user").exists());

    // Everything the mesh keeps or shows, scanned for every plaintext.
    let secrets = [pw1.as_str(), pw2.as_str(), token.as_str()];
    let mut scan = Scan::default();
    let mut files = Vec::new();
    files_under(mesh.tmp.path(), &mut files);
    for f in files.iter().filter(|f| **f != token_file) {
        if let Ok(bytes) = std::fs::read(f) {
            scan.check(&f.display().to_string(), &bytes, &secrets);
        }
    }
    scan_streams(&mesh, &mut scan, &secrets).await;
    for args in [
        &["plan", "assign", "bystander", "n2"][..],
        &["modules", "--output", "json"],
        &["reports", "n1", "--output", "json"],
        &["status", "--output", "json", "--http", &http],
        &["secret", "list"],
        &["nodes", "--output", "json"],
    ] {
        let out = mesh.mesh(args);
        scan.check(&format!("mesh {}", args.join(" ")), &out.stdout, &secrets);
        scan.check(
            &format!("mesh {} (stderr)", args.join(" ")),
            &out.stderr,
            &secrets,
        );
    }
    for path in [
        "/api/status",
        "/api/nodes",
        "/api/modules",
        "/api/seats",
        "/api/catalogue",
        "/api/reports/n1",
        "/metrics",
    ] {
        let (_, body) = mesh_cli::status::http_get(&http, path).unwrap();
        scan.check(path, body.as_bytes(), &secrets);
    }
    scan_cmdlines(&mut scan, &secrets);
    assert!(scan.found.is_empty(), "plaintext found: {:#?}", scan.found);
    assert!(scan.places > 100, "{}", scan.places);
    // And where it is meant to be: the module's file, and its environment.
    assert_eq!(std::fs::read_to_string(&token_file).unwrap(), token);
    let environ =
        std::fs::read(format!("/proc/{}/environ", pid_of("vault-user").unwrap())).unwrap();
    assert!(
        environ.windows(pw2.len()).any(|w| w == pw2.as_bytes()),
        "the module's environment holds the new password"
    );
    println!(
        "secrets: {} places scanned, {} plaintext",
        scan.places,
        scan.found.len()
    );

    // A sealed value that does not open on n2 (sealed to another key): the
    // module is reported failed, naming the variable, never started.
    let genesis = mesh_controller::Genesis::open(&mesh.dir).unwrap();
    let other = nkeys::XKey::new();
    let stranger = mesh_core::secret::Secret::new(other.seed().unwrap());
    let sealed = mesh_core::sealed::seal(&stranger, &nkeys::XKey::new().public_key(), "x").unwrap();
    let seed_hex = std::fs::read_to_string(mesh.dir.join("controller/signing.seed")).unwrap();
    let seed: [u8; 32] = hex::decode(seed_hex.trim()).unwrap().try_into().unwrap();
    let signing = ed25519_dalek::SigningKey::from_bytes(&seed);
    let forged = mesh_core::declaration::Declaration {
        node: Name::new("n2").unwrap(),
        sequence: 1000,
        composed_at: 1,
        modules: vec![mesh_core::declaration::ModuleDecl {
            name: Name::new("bystander").unwrap(),
            version: "v".into(),
            run: mesh_core::declaration::RunDecl {
                command: vec!["sleep".into(), "3600".into()],
                env: Default::default(),
                stop_grace_s: 1,
                sealed_env: [("DB_PASSWORD".to_string(), sealed)].into(),
                driver: Default::default(),
                image: None,
            },
            files: vec![],
            secrets: Some("d".into()),
            key: None,
            artifacts: vec![],
            pinned: None,
            health: None,
        }],
        bus: None,
        sealed_by: Some(genesis.xkey.clone()),
    };
    js.publish("mesh.node.n2.declaration", forged.sign(&signing).into())
        .await
        .unwrap()
        .await
        .unwrap();
    let reports = || {
        let out = mesh.mesh(&["reports", "n2", "--limit", "1", "--output", "json"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(
        wait_until(LONG, || {
            let text = reports();
            text.contains("\"failed\"")
                && text.contains("the sealed value of DB_PASSWORD does not open")
        }),
        "{}",
        reports()
    );
    assert!(
        !work(&mesh, "n2", "bystander", "pid").exists(),
        "never started"
    );
}

/// n1's newest recorded declaration: its sequence and envelope.
async fn newest(mesh: &Mesh, node: &str) -> (i64, String) {
    let store = mesh_store::Store::open_existing(&mesh.store_url)
        .await
        .unwrap();
    let d = store
        .latest_declaration(&Name::new(node).unwrap())
        .await
        .unwrap()
        .expect("a declaration");
    store.close().await;
    (d.version, d.body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seat_addresses_come_from_the_nodes_and_an_unfillable_one_leaves_one_module_out() {
    let (mesh, _hosts, _http) = mesh(Backend::Sqlite).await;
    // n1's host advertises its address itself.
    assert!(
        wait_until(LONG, || mesh
            .nodes()
            .iter()
            .any(|n| n["node"] == "n1" && n["address"] == "127.0.0.1")),
        "{:?}",
        mesh.nodes()
    );
    mesh.assign("db", "n2", true);
    mesh.assign("app", "n1", true);
    let addr = work(&mesh, "n1", "app", "addr");
    assert!(
        wait_until(LONG, || read(&addr).as_deref() == Some("10.9.8.7:5432")),
        "the manifest's number at n2's address: {:?}",
        read(&addr)
    );
    // The node's given port wins over the manifest's number.
    ok(&mesh, &["node", "set", "n2", "--port", "db=6432"]);
    assert!(
        wait_until(LONG, || read(&addr).as_deref() == Some("10.9.8.7:6432")),
        "{:?}",
        read(&addr)
    );
    let nodes = mesh.nodes();
    let n2 = nodes.iter().find(|n| n["node"] == "n2").unwrap();
    assert_eq!(n2["ports"]["db"], 6432);

    // db2's holder runs on n3, which has no address: app2 is left out, app
    // still runs on the same node, and `mesh status` names the fix.
    ok(&mesh, &["node", "add", "n3"]);
    mesh.assign("db2", "n3", true);
    let out = mesh.mesh(&["assign", "app2", "n1", "--wait", "--timeout", "50s"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("app2 on n1: left out of the declaration")
            && stdout.contains("node n3 (holding seat db2) has no address recorded; record one with `mesh node set n3 --address A`"),
        "{stdout}"
    );
    let status: serde_json::Value =
        serde_json::from_str(&ok(&mesh, &["status", "--output", "json"])).unwrap();
    assert!(
        status["needs_action"]
            .as_array()
            .unwrap()
            .iter()
            .any(
                |a| a["what"] == "module app2 is left out of the declaration of n1"
                    && a["next"]
                        .as_str()
                        .unwrap()
                        .contains("mesh node set n3 --address A")
            ),
        "{status:#}"
    );
    assert_eq!(
        read(&addr).as_deref(),
        Some("10.9.8.7:6432"),
        "app untouched"
    );
    // Given an address, app2 is declared.
    ok(&mesh, &["node", "set", "n3", "--address", "10.9.8.9"]);
    let out = mesh.mesh(&["plan", "unassign", "app2", "n1"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("stop   app2"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // A node-scoped seat is addressed at the holder on the module's own
    // node, though n1's comes first in the records.
    mesh.assign("nft", "n1", true);
    mesh.assign("nft", "n2", true);
    mesh.assign("app3", "n2", true);
    let addr3 = work(&mesh, "n2", "app3", "addr");
    assert!(
        wait_until(LONG, || read(&addr3).is_some()),
        "app3 on n2 never wrote its address"
    );
    assert_eq!(
        read(&addr3).as_deref(),
        Some("10.9.8.7:8080"),
        "n2's own filter"
    );

    // db's holder moved to n1 in one step: app follows it, never left out.
    let out = mesh.mesh(&["assign", "db", "n1", "--move-from", "n2", "--wait"]);
    assert!(
        out.status.success() && !String::from_utf8_lossy(&out.stderr).contains("warning"),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        wait_until(LONG, || read(&addr).as_deref() == Some("127.0.0.1:5432")),
        "app reaches db on n1: {:?}",
        read(&addr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgresql_store_holds_no_plaintext() {
    let (mesh, _hosts, _http) = mesh(Backend::Postgres).await;
    let (pw, token) = (plaintext("pw"), plaintext("token"));
    set_secret(&mesh, "db-password", &pw);
    set_secret(&mesh, "api-token", &token);
    mesh.assign("vault-user", "n1", true);
    let env_sha = work(&mesh, "n1", "vault-user", "env.sha");
    assert!(
        wait_until(LONG, || read(&env_sha)
            .is_some_and(|s| s.contains(&sha256_hex(&pw)))),
        "the module sees the password"
    );
    let dump = Command::new(mesh_testkit::postgres_bin_dir().unwrap().join("pg_dump"))
        .arg(&mesh.store_url)
        .output()
        .unwrap();
    assert!(
        dump.status.success(),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let text = String::from_utf8_lossy(&dump.stdout);
    assert!(
        text.contains("db-password"),
        "the dump holds the secrets table"
    );
    let mut scan = Scan::default();
    scan.check("pg_dump", &dump.stdout, &[pw.as_str(), token.as_str()]);
    assert!(scan.found.is_empty(), "{:?}", scan.found);
}

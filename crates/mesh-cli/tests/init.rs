//! `mesh init`: genesis from the real binary. The first users file admits the
//! controller alone by the key genesis made, the broker's configuration that
//! includes it passes `nats-server -t`, the store records that key, and a
//! second genesis in the same directory is refused with nothing changed.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use support::{examples, mesh_bin};

fn mesh(dir: &Path, args: &[&str]) -> Output {
    Command::new(mesh_bin())
        .args(args)
        .current_dir(dir)
        .env_remove("MESH_STORE")
        .output()
        .unwrap()
}

/// Every file under `dir` with its bytes: what a refused genesis must leave.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.insert(p.display().to_string(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[test]
fn genesis_writes_a_users_file_of_the_controller_alone_and_refuses_a_second() {
    let root = tempfile::tempdir().unwrap();
    let out = mesh(
        root.path(),
        &["init", "--dir", "state", "--address", "10.1.2.3"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let key = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("controller key"))
        .map(str::trim)
        .expect("the controller key is printed")
        .to_string();
    assert!(key.starts_with('U') && key.len() == 56, "{key}");
    // Its seed stays in the state directory, never on the terminal.
    let seed = std::fs::read_to_string(root.path().join("state/controller/nkey.seed")).unwrap();
    assert!(!stdout.contains(seed.trim()));

    let users = std::fs::read_to_string(root.path().join("state/broker/users.conf")).unwrap();
    assert_eq!(users.matches("nkey:").count(), 1, "{users}");
    assert!(users.contains(&format!("# controller\n      {{\n        nkey: \"{key}\"")));
    assert!(!users.contains("password:"), "{users}");
    mesh_testkit::nats::test_config(&root.path().join("state/broker/nats.conf"))
        .expect("nats-server -t accepts the broker configuration with the first users file");

    // The store holds the key the file names.
    let store = format!("sqlite://{}", root.path().join("state/mesh.db").display());
    let catalogue = examples().join("catalogue").display().to_string();
    let explain = mesh(
        root.path(),
        &[
            "authority",
            "explain",
            "controller",
            "--catalogue",
            &catalogue,
            "--store",
            &store,
        ],
    );
    let text = String::from_utf8_lossy(&explain.stdout);
    assert!(explain.status.success(), "{text}");
    assert!(text.contains("credential: recorded"), "{text}");

    // A second genesis pointed at this store: its key is not put over the
    // recorded one, and the refusal says the new keys are not in use.
    let other = mesh(root.path(), &["init", "--dir", "other", "--store", &store]);
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert_eq!(other.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("already records a controller key of another genesis"),
        "{stderr}"
    );
    assert!(!root.path().join("other/broker/users.conf").exists());
    std::fs::remove_dir_all(root.path().join("other")).unwrap();

    let before = snapshot(root.path());
    let again = mesh(root.path(), &["init", "--dir", "state"]);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("already holds a store"), "{stderr}");
    assert_eq!(
        snapshot(root.path()),
        before,
        "a refused genesis changed files"
    );

    // An existing genesis without a store is refused naming what is there.
    std::fs::remove_file(root.path().join("state/mesh.db")).unwrap();
    let before = snapshot(root.path());
    let third = mesh(root.path(), &["init", "--dir", "state"]);
    let stderr = String::from_utf8_lossy(&third.stderr);
    assert_eq!(third.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("already holds a genesis"), "{stderr}");
    assert!(stderr.contains("controller/nkey.seed"), "{stderr}");
    assert_eq!(snapshot(root.path()), before);
}

/// A fleet file loaded into a mesh made by `mesh init`: the controller's key
/// is the genesis's, never in the fleet's secrets directory, so nothing may
/// call it missing nor advise re-minting it (that would rotate the live key).
#[test]
fn a_fleet_loaded_after_genesis_names_no_controller_secret_as_missing() {
    let root = tempfile::tempdir().unwrap();
    let out = mesh(root.path(), &["init", "--port", "4399"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ex = examples();
    let out = mesh(
        root.path(),
        &[
            "fleet",
            "load",
            &ex.join("fleet.toml").display().to_string(),
            "--catalogue",
            &ex.join("catalogue").display().to_string(),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    assert!(
        !stderr.contains("warning") && !stderr.contains("--remint"),
        "{stderr}"
    );
}

/// A clustered bus over machines on the default SQLite store cannot work
/// (the other machines' controllers never read the file): refused before
/// anything is made, naming the PostgreSQL store it needs.
#[test]
fn a_bus_over_machines_on_a_sqlite_store_is_refused_before_anything_is_made() {
    let tmp = tempfile::tempdir().unwrap();
    let out = mesh(
        tmp.path(),
        &[
            "init",
            "--replicas",
            "3",
            "--address",
            "10.0.0.1",
            "--address",
            "10.0.0.2",
            "--address",
            "10.0.0.3",
        ],
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("servers on 3 machines") && said.contains("postgres://"),
        "{said}"
    );
    assert!(snapshot(tmp.path()).is_empty(), "nothing is made");
}

/// A store of its own elsewhere is named in the directory (0600, beside
/// the keys), so every command given the directory reads it — on each
/// machine the directory is copied to — and a store that cannot be
/// reached leaves no genesis behind for the next `mesh init` to refuse.
#[test]
fn a_store_named_at_genesis_is_the_one_every_command_reads() {
    use std::os::unix::fs::PermissionsExt as _;
    let tmp = tempfile::tempdir().unwrap();
    let down = mesh(
        tmp.path(),
        &[
            "init",
            "--dir",
            "m",
            "--store",
            "postgres://mesh@127.0.0.1:1/mesh",
        ],
    );
    let said = String::from_utf8_lossy(&down.stderr);
    assert!(
        !down.status.success() && said.contains("opening the store"),
        "{said}"
    );
    assert!(
        snapshot(tmp.path()).is_empty(),
        "nothing is made: {:?}",
        snapshot(tmp.path()).keys()
    );

    let store = format!("sqlite://{}", tmp.path().join("records.db").display());
    let out = mesh(tmp.path(), &["init", "--dir", "m", "--store", &store]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let named = tmp.path().join("m/store.url");
    assert_eq!(std::fs::read_to_string(&named).unwrap().trim(), store);
    assert_eq!(
        std::fs::metadata(&named).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let copy = tmp.path().join("copy");
    assert!(
        Command::new("cp")
            .arg("-a")
            .arg(tmp.path().join("m"))
            .arg(&copy)
            .status()
            .unwrap()
            .success()
    );
    let nodes = mesh(
        tmp.path(),
        &["node", "add", "n1", "--dir", copy.to_str().unwrap()],
    );
    assert!(
        nodes.status.success(),
        "{}",
        String::from_utf8_lossy(&nodes.stderr)
    );
    assert!(
        !copy.join("mesh.db").exists(),
        "no store of its own in the copy"
    );
    let listed = mesh(tmp.path(), &["nodes", "--dir", "m"]);
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("n1"),
        "the node added through the copy is in the one store: {}",
        String::from_utf8_lossy(&listed.stdout)
    );
}

//! `mesh seats` and `mesh status` as JSON a script can parse, on a store
//! with no controller running.

use std::path::Path;
use std::process::{Command, Output};

use mesh_state::views::{NodeView, SeatView, StatusView};

fn mesh(dir: &Path, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(args)
        .arg("--dir")
        .arg(dir)
        .env_remove("MESH_STORE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn examples() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/catalogue")
        .to_str()
        .unwrap()
        .into()
}

#[test]
fn seats_and_status_print_json_with_holders_and_next_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    let port = mesh_testkit::broker::free_port().unwrap().to_string();
    mesh(&dir, &["init", "--port", &port]);
    mesh(&dir, &["catalogue", "register", &examples()]);
    mesh(&dir, &["node", "add", "n1"]);
    mesh(&dir, &["assign", "git-server", "n1"]);

    let seats: Vec<SeatView> =
        serde_json::from_slice(&mesh(&dir, &["seats", "--output", "json"]).stdout).unwrap();
    let git = seats
        .iter()
        .find(|s| s.seat == "git")
        .expect("the git seat");
    assert_eq!(git.kind, "seat");
    assert_eq!(git.declared_by.as_deref(), Some("git-server"));
    assert_eq!(git.scope, "mesh");
    assert_eq!(
        git.holders
            .iter()
            .map(|h| (h.node.as_str(), h.module.as_str()))
            .collect::<Vec<_>>(),
        [("n1", "git-server")]
    );
    let broker = seats.iter().find(|s| s.seat == "mesh-broker").unwrap();
    assert_eq!(
        (broker.kind.as_str(), broker.declared_by.as_deref()),
        ("role", None)
    );
    let text = String::from_utf8(mesh(&dir, &["seats"]).stdout).unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("git ") && l.ends_with("git-server on n1")),
        "{text}"
    );

    let addr = format!("127.0.0.1:{}", mesh_testkit::broker::free_port().unwrap());
    let status: StatusView = serde_json::from_slice(
        &mesh(&dir, &["status", "--http", &addr, "--output", "json"]).stdout,
    )
    .unwrap();
    assert!(!status.controller.reachable);
    assert_eq!(status.nodes.get("not enrolled"), Some(&1), "{status:?}");
    assert_eq!(status.modules.get("unreported"), Some(&1), "{status:?}");
    let steps: Vec<&str> = status
        .needs_action
        .iter()
        .map(|a| a.next.as_str())
        .collect();
    assert!(steps[0].contains("mesh controller"), "{steps:?}");
    assert!(
        steps.contains(
            &"run `mesh host --token -` on n1 with its token on standard input (or in MESH_TOKEN)"
        ),
        "{steps:?}"
    );
    let text = String::from_utf8(mesh(&dir, &["status", "--http", &addr]).stdout).unwrap();
    assert!(
        text.starts_with(&format!("controller   not reachable at http://{addr}")),
        "{text}"
    );
}

/// `mesh` in `cwd` with no --dir and no store named: what it finds itself.
fn mesh_in(cwd: &Path, mesh_dir: Option<&Path>, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mesh"));
    cmd.args(args)
        .current_dir(cwd)
        .env_remove("MESH_STORE")
        .env_remove("MESH_DIR");
    if let Some(d) = mesh_dir {
        cmd.env("MESH_DIR", d);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{args:?} in {}: {}",
        cwd.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn node_names(out: &Output) -> Vec<String> {
    let nodes: Vec<NodeView> = serde_json::from_slice(&out.stdout).unwrap();
    nodes.into_iter().map(|n| n.node).collect()
}

#[test]
fn commands_find_the_nearest_mesh_above_and_mesh_dir_from_anywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("project");
    let deep = project.join("src/deeper");
    let elsewhere = tmp.path().join("elsewhere");
    for d in [&deep, &elsewhere] {
        std::fs::create_dir_all(d).unwrap();
    }
    let port = mesh_testkit::broker::free_port().unwrap().to_string();
    // `mesh init` makes `.mesh` where it runs.
    mesh_in(&project, None, &["init", "--port", &port]);
    assert!(project.join(".mesh/mesh.db").is_file());

    // From two levels below, a writer and a reader find it.
    mesh_in(&deep, None, &["node", "add", "n1"]);
    let listed = mesh_in(&deep, None, &["nodes", "--output", "json"]);
    assert_eq!(node_names(&listed), ["n1"]);
    assert!(!deep.join(".mesh").exists(), "a mesh was made below");

    // From anywhere, MESH_DIR names it; nothing is made there.
    let mesh_dir = project.join(".mesh");
    let listed = mesh_in(&elsewhere, Some(&mesh_dir), &["nodes", "--output", "json"]);
    assert_eq!(node_names(&listed), ["n1"]);
    // --dir comes before MESH_DIR: here it names a mesh that is not there.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mesh"));
    let out = cmd
        .args(["nodes", "--dir", "nope"])
        .current_dir(&elsewhere)
        .env_remove("MESH_STORE")
        .env("MESH_DIR", &mesh_dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no mesh store at sqlite://nope/mesh.db"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}

/// Given the directory a mesh was made in (a checkout's root after `mesh
/// up`) for the mesh itself, a command names the `.mesh` below it instead
/// of reading an empty store there; `--dir` may come before the command.
#[test]
fn a_directory_above_the_mesh_names_the_mesh_below_it() {
    let tmp = tempfile::tempdir().unwrap();
    let below = tmp.path().join(".mesh");
    let port = mesh_testkit::broker::free_port().unwrap().to_string();
    mesh(&below, &["init", "--port", &port]);
    let out = Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(["--dir"])
        .arg(tmp.path())
        .args(["status"])
        .env_remove("MESH_STORE")
        .env_remove("MESH_DIR")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{} holds no mesh, but {} does: give --dir {}",
            tmp.path().display(),
            below.display(),
            below.display()
        )),
        "{err}"
    );
    // Before the command, as a person may type it.
    let nodes = Command::new(env!("CARGO_BIN_EXE_mesh"))
        .arg("--dir")
        .arg(&below)
        .args(["nodes", "--output", "json"])
        .env_remove("MESH_STORE")
        .output()
        .unwrap();
    assert!(
        nodes.status.success(),
        "{}",
        String::from_utf8_lossy(&nodes.stderr)
    );
}

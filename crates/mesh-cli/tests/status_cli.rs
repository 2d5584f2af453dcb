//! `mesh seats` and `mesh status` as JSON a script can parse, on a store
//! with no controller running.

use std::path::Path;
use std::process::{Command, Output};

use mesh_state::views::{SeatView, StatusView};

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
        steps.contains(&"run `mesh host --token <token>` on n1"),
        "{steps:?}"
    );
    let text = String::from_utf8(mesh(&dir, &["status", "--http", &addr]).stdout).unwrap();
    assert!(
        text.starts_with(&format!("controller   not reachable at http://{addr}")),
        "{text}"
    );
}

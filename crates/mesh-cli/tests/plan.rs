//! `mesh plan register` and `mesh unassign --dry-run` against a store with
//! no controller: what a changed manifest and an unassignment would do,
//! as JSON a script parses, and nothing written.

mod cli;

use std::path::Path;
use std::process::Output;

use cli::ok;
use serde_json::Value;

/// `mesh ARGS --dir DIR`.
fn mesh(dir: &Path, args: &[&str]) -> Output {
    let mut all = args.to_vec();
    all.extend(["--dir", dir.to_str().unwrap()]);
    cli::mesh(&all)
}

fn examples() -> String {
    cli::examples().to_str().unwrap().to_string()
}

fn revision(dir: &Path) -> i64 {
    let url = format!("sqlite://{}", dir.join("mesh.db").display());
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let s = mesh_store::Store::open_existing(&url).await.unwrap();
            let r = s.records_revision().await.unwrap();
            s.close().await;
            r
        })
}

#[test]
fn a_changed_manifest_and_an_unassignment_are_planned_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ctl");
    let port = mesh_testkit::broker::free_port().unwrap().to_string();
    ok(&mesh(&dir, &["init", "--port", &port]));
    // The example echo, run from the node's PATH: no broker here to put
    // its program into (a module whose version lacks its artifact is left
    // out of the declaration).
    let text = std::fs::read_to_string(Path::new(&examples()).join("echo/mesh.toml"))
        .unwrap()
        .replace("${artifact:mesh-echo}", "mesh-echo");
    let base = tmp.path().join("base/echo");
    std::fs::create_dir_all(&base).unwrap();
    std::fs::write(base.join("mesh.toml"), &text).unwrap();
    ok(&mesh(
        &dir,
        &[
            "catalogue",
            "register",
            base.parent().unwrap().to_str().unwrap(),
        ],
    ));
    ok(&mesh(&dir, &["node", "add", "n1"]));
    ok(&mesh(&dir, &["node", "add", "n2"]));
    ok(&mesh(&dir, &["assign", "echo", "n1"]));
    let changed = tmp.path().join("catalogue/echo");
    std::fs::create_dir_all(&changed).unwrap();
    std::fs::write(
        changed.join("mesh.toml"),
        text.replace(
            "command = [\"mesh-echo\"]",
            "command = [\"mesh-echo\", \"--loud\"]",
        ),
    )
    .unwrap();
    let rev = revision(&dir);

    let plan: Value = serde_json::from_str(&ok(&mesh(
        &dir,
        &[
            "plan",
            "register",
            changed.parent().unwrap().to_str().unwrap(),
            "--output",
            "json",
        ],
    )))
    .unwrap();
    let entries = plan["entries"].as_array().unwrap();
    let fields: Vec<(&str, &str)> = entries
        .iter()
        .map(|e| (e["node"].as_str().unwrap(), e["field"].as_str().unwrap()))
        .collect();
    assert_eq!(fields, [("n1", "version"), ("n1", "command")], "{plan:#}");
    assert_eq!(
        entries[1]["after"],
        serde_json::json!(["mesh-echo", "--loud"])
    );
    assert_eq!(plan["declarations"]["n1"][0]["run"]["command"][1], "--loud");

    let plan: Value = serde_json::from_str(&ok(&mesh(
        &dir,
        &["unassign", "echo", "n1", "--dry-run", "--output", "json"],
    )))
    .unwrap();
    let entries = plan["entries"].as_array().unwrap();
    assert_eq!(
        entries[0],
        serde_json::json!({"change": "stop", "node": "n1", "module": "echo"})
    );
    assert!(
        entries
            .iter()
            .any(|e| e["change"] == "principal-removed" && e["principal"] == "module_n1_echo")
    );
    assert!(entries.iter().any(|e| e["change"] == "grant-removed"
        && e["principal"] == "module_n1_echo"
        && e["subject"] == "mesh.mod.echo.event.heard"));
    assert_eq!(plan["declarations"]["n1"], serde_json::json!([]));

    // Nothing was written: the records are as they were, echo still assigned.
    assert_eq!(revision(&dir), rev);
    let modules: Vec<Value> =
        serde_json::from_str(&ok(&mesh(&dir, &["modules", "--output", "json"]))).unwrap();
    assert_eq!(modules.len(), 1);

    // A change that cannot be made is refused by name, as the real one is.
    let o = mesh(&dir, &["plan", "unassign", "echo", "n2"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("echo is not assigned to n2"));
    let o = mesh(&dir, &["plan", "assign", "echo", "n9"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("node n9 is not recorded"));
}

#[test]
fn a_second_holder_of_a_mesh_scoped_seat_is_refused_at_assign_naming_the_first() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ctl");
    let port = mesh_testkit::broker::free_port().unwrap().to_string();
    ok(&mesh(&dir, &["init", "--port", &port]));
    ok(&mesh(&dir, &["catalogue", "register", &examples()]));
    ok(&mesh(&dir, &["node", "add", "n1"]));
    ok(&mesh(&dir, &["node", "add", "n2"]));
    // git-server holds `git`, a mesh-scoped seat.
    ok(&mesh(&dir, &["assign", "git-server", "n1"]));
    ok(&mesh(&dir, &["assign", "git-server", "n1"]));
    let o = mesh(&dir, &["assign", "git-server", "n2"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("seat `git` is mesh-scoped and already held by module git-server on node n1"),
        "{err}"
    );
    assert!(
        err.contains("run `mesh unassign git-server n1` first"),
        "{err}"
    );
    // nftables holds `packet-filter`, node-scoped: one per node is fine.
    ok(&mesh(&dir, &["assign", "nftables", "n1"]));
    ok(&mesh(&dir, &["assign", "nftables", "n2"]));
    // Moved as the refusal says.
    ok(&mesh(&dir, &["unassign", "git-server", "n1"]));
    ok(&mesh(&dir, &["assign", "git-server", "n2"]));
}

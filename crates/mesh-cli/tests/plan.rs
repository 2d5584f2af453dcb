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
        err.contains("run `mesh assign git-server n2 --move-from n1`"),
        "{err}"
    );
    // nftables holds `packet-filter`, node-scoped: one per node is fine.
    ok(&mesh(&dir, &["assign", "nftables", "n1"]));
    ok(&mesh(&dir, &["assign", "nftables", "n2"]));
    // Moved as the refusal says.
    let o = mesh(&dir, &["assign", "git-server", "n2", "--move-from", "n1"]);
    assert_eq!(ok(&o), "moved git-server from n1 to n2\n");
}

/// Unassigning a seat's holder says which modules it leaves without an
/// address (their `${seat:..}` cannot be filled, so the controller leaves
/// them out) and how to move the holder in one step; the move leaves
/// nobody without one.
#[test]
fn unassigning_a_holder_names_who_it_leaves_without_an_address_and_a_move_leaves_nobody() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ctl");
    let port = mesh_testkit::broker::free_port().unwrap().to_string();
    ok(&mesh(&dir, &["init", "--port", &port]));
    ok(&mesh(&dir, &["catalogue", "register", &examples()]));
    for node in ["n1", "n2", "n3"] {
        ok(&mesh(&dir, &["node", "add", node]));
    }
    // git-server holds `git` (mesh-scoped); code-search fills in
    // `${seat:git:9418}`.
    ok(&mesh(&dir, &["assign", "git-server", "n1"]));
    ok(&mesh(&dir, &["assign", "code-search", "n2"]));
    let left = "code-search on n2 is left without an address for seat git (held by git-server on n1 until now): the controller leaves it out of n2's declaration until a holder is assigned";
    let help = "= help: `mesh assign git-server NODE --move-from n1` moves the holder in one step, leaving nobody without an address";

    let text = ok(&mesh(&dir, &["plan", "unassign", "git-server", "n1"]));
    assert!(
        text.contains(&format!("left without an address:\n  {left}\n    {help}\n")),
        "{text}"
    );
    let plan: Value = serde_json::from_str(&ok(&mesh(
        &dir,
        &[
            "unassign",
            "git-server",
            "n1",
            "--dry-run",
            "--output",
            "json",
        ],
    )))
    .unwrap();
    assert_eq!(
        plan["unaddressed"],
        serde_json::json!([{
            "module": "code-search",
            "node": "n2",
            "seat": "git",
            "node_scoped": false,
            "holder": {"node": "n1", "module": "git-server"}
        }])
    );

    // The move, planned then made: nobody is left without an address.
    let plan: Value = serde_json::from_str(&ok(&mesh(
        &dir,
        &[
            "plan",
            "assign",
            "git-server",
            "n3",
            "--move-from",
            "n1",
            "--output",
            "json",
        ],
    )))
    .unwrap();
    assert_eq!(plan["pending"], "move git-server from n1 to n3");
    assert_eq!(plan["unaddressed"], serde_json::json!([]));
    let principals: Vec<(&str, &str)> = plan["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| Some((e["change"].as_str()?, e["principal"].as_str()?)))
        .filter(|(c, _)| c.starts_with("principal-"))
        .collect();
    assert_eq!(
        principals,
        [
            ("principal-added", "module_n3_git-server"),
            ("principal-removed", "module_n1_git-server")
        ],
        "{plan:#}"
    );
    let o = mesh(&dir, &["assign", "git-server", "n3", "--move-from", "n1"]);
    assert_eq!(ok(&o), "moved git-server from n1 to n3\n");
    assert_eq!(String::from_utf8_lossy(&o.stderr), "", "no warning");
    let modules: Vec<Value> =
        serde_json::from_str(&ok(&mesh(&dir, &["modules", "--output", "json"]))).unwrap();
    let placed: Vec<(&str, &str)> = modules
        .iter()
        .map(|m| (m["module"].as_str().unwrap(), m["node"].as_str().unwrap()))
        .collect();
    assert_eq!(placed, [("code-search", "n2"), ("git-server", "n3")]);
    // A move from where it does not run is refused, saying what runs there.
    let o = mesh(&dir, &["assign", "git-server", "n2", "--move-from", "n1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("git-server is not assigned to n1"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = mesh(&dir, &["unassign", "git-server", "n3", "--move-from", "n1"]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--move-from is for assigning"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // Unassigned: done, and the warning names who is left without.
    let o = mesh(&dir, &["unassign", "git-server", "n3"]);
    assert_eq!(ok(&o), "unassigned git-server from n3\n");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err,
        format!(
            "warning: {}\n  {}\n",
            left.replace("n1 until", "n3 until"),
            help.replace("from n1", "from n3")
        )
    );
}

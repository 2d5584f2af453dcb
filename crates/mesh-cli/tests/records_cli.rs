//! Record commands with no controller running: `mesh modules` as a table
//! under its header (JSON unchanged), and `mesh person add|remove` saying
//! at once that nothing can put the change in force yet.

mod cli;

use std::path::Path;
use std::process::Output;

use cli::ok;
use mesh_state::views::ModuleView;

/// `mesh ARGS --dir DIR`.
fn mesh(dir: &Path, args: &[&str]) -> Output {
    let mut all = args.to_vec();
    all.extend(["--dir", dir.to_str().unwrap()]);
    cli::mesh(&all)
}

fn init(tmp: &tempfile::TempDir) -> std::path::PathBuf {
    let dir = tmp.path().join("ctl");
    let port = mesh_testkit::broker::free_port().unwrap().to_string();
    ok(&mesh(&dir, &["init", "--port", &port]));
    dir
}

#[test]
fn modules_are_listed_under_a_header_and_as_json_as_before() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = init(&tmp);
    let examples = cli::examples();
    ok(&mesh(
        &dir,
        &["catalogue", "register", examples.to_str().unwrap()],
    ));
    ok(&mesh(&dir, &["node", "add", "n1"]));
    ok(&mesh(&dir, &["assign", "echo", "n1"]));
    ok(&mesh(&dir, &["assign", "greeter", "n1"]));

    let text = ok(&mesh(&dir, &["modules"]));
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["MODULE", "NODE", "STATE", "RESTARTS", "REASON"],
            vec!["echo", "n1", "unreported", "0", "-"],
            vec!["greeter", "n1", "unreported", "0", "-"],
        ],
        "{text}"
    );
    // Columns line up under their headings.
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0].find("STATE"),
        lines[1].find("unreported"),
        "{text}"
    );

    let json: Vec<ModuleView> =
        serde_json::from_str(&ok(&mesh(&dir, &["modules", "--output", "json"]))).unwrap();
    assert_eq!(json.len(), 2);
    assert_eq!(
        (
            json[0].module.as_str(),
            json[0].node.as_str(),
            json[0].state.as_str()
        ),
        ("echo", "n1", "unreported")
    );
}

#[test]
fn a_person_recorded_with_no_broker_running_is_said_to_wait_for_the_controller() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = init(&tmp);
    let key = nkeys::KeyPair::new_user().public_key();
    // Not cut short by the broker's absence, the wait would last 30 s and
    // end naming the controller instead.
    let add = [
        "person",
        "add",
        "ada",
        "--tools",
        "*",
        "--nkey",
        &key,
        "--timeout",
        "30s",
    ];
    let o = mesh(&dir, &add);
    assert_eq!(ok(&o), "person ada may call *\n");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("not confirmed live: the broker is not running")
            && err.contains("person ada is recorded and is admitted once the controller composes"),
        "{err}"
    );

    let o = mesh(&dir, &["person", "remove", "ada", "--timeout", "30s"]);
    assert_eq!(ok(&o), "person ada removed\n");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("not confirmed live: the broker is not running")
            && err.contains("refused once the controller composes"),
        "{err}"
    );

    // --no-wait: recorded, nothing said about the broker.
    let o = mesh(&dir, &[&add[..7], &["--no-wait"]].concat());
    assert_eq!(ok(&o), "person ada may call *\n");
    assert_eq!(String::from_utf8_lossy(&o.stderr), "");
    // Removing someone who is not there is refused before any wait.
    let o = mesh(&dir, &["person", "remove", "bob"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("there is no person bob"));
}

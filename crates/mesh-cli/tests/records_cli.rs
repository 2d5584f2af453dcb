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
            vec![
                "MODULE", "NODE", "STATE", "HEALTH", "VERSION", "RESTARTS", "REASON"
            ],
            vec!["echo", "n1", "unreported", "-", "-", "0", "-"],
            vec!["greeter", "n1", "unreported", "-", "-", "0", "-"],
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

/// A person's role is recorded and said; each change made here is an
/// audit row naming the local user, in order, with the revision it made;
/// a role that is not one is a usage error listing the three.
#[test]
fn a_role_is_recorded_and_every_change_made_here_is_audited() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = init(&tmp);
    assert_eq!(ok(&mesh(&dir, &["audit"])), "no change recorded\n");
    let key = nkeys::KeyPair::new_user().public_key();
    let o = mesh(
        &dir,
        &[
            "person",
            "add",
            "dan",
            "--role",
            "viewer",
            "--nkey",
            &key,
            "--no-wait",
        ],
    );
    let said = ok(&o);
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines[0], "person dan (viewer) may call no tool", "{said}");
    assert!(
        lines[1].starts_with(
            "on their machine: mesh login --person dan --key SEED_FILE --bus tls://127.0.0.1:"
        ) && lines[1].contains(" --pin "),
        "{said}"
    );
    let bad = mesh(
        &dir,
        &["person", "add", "eve", "--role", "root", "--no-wait"],
    );
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{err}");
    assert!(err.contains("write viewer, operator or admin"), "{err}");
    ok(&mesh(&dir, &["person", "remove", "dan", "--no-wait"]));

    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&ok(&mesh(&dir, &["audit", "--output", "json"]))).unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let who = format!("local {}", whoami());
    assert_eq!(
        (rows[0]["who"].as_str(), rows[0]["operation"].as_str()),
        (Some(who.as_str()), Some("person-add"))
    );
    assert_eq!(rows[0]["arguments"]["role"], "viewer");
    assert_eq!(
        rows[0]["arguments"]["nkey"],
        key.as_str(),
        "a public key is no secret"
    );
    assert_eq!(rows[1]["operation"], "person-remove");
    assert!(
        rows[1]["revision"].as_i64() > rows[0]["revision"].as_i64(),
        "{rows:?}"
    );
    let text = ok(&mesh(&dir, &["audit"]));
    assert!(
        text.lines().count() == 2 && text.contains("person-remove") && text.contains(&who),
        "{text}"
    );
    assert_eq!(
        ok(&mesh(&dir, &["audit", "--person", "dan"])),
        "no change recorded\n",
        "dan asked for nothing: the changes were made here"
    );
}

fn whoami() -> String {
    let out = std::process::Command::new("id")
        .arg("-un")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

//! A backup restored, as the README's "Several machines" says: the mesh's
//! directory copied with the controller stopped, changes made after it,
//! then the copy put back and the controller started on it. The hosts,
//! which applied declarations the restored records never made, converge on
//! what the restored records say.

#[path = "join_live/harness.rs"]
mod harness;

use std::path::Path;
use std::time::Duration;

use harness::{Backend, Mesh, module_pid, out_text, wait_until};

const CONVERGE: Duration = Duration::from_secs(60);

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        let kind = e.file_type().unwrap();
        if kind.is_dir() {
            copy_dir(&e.path(), &target);
        } else if kind.is_file() {
            std::fs::copy(e.path(), &target).unwrap();
            std::fs::set_permissions(&target, e.metadata().unwrap().permissions()).unwrap();
        }
    }
}

fn waited(mesh: &Mesh, args: &[&str]) {
    let out = mesh.mesh(args);
    assert!(out.status.success(), "{args:?}: {}", out_text(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restored_backup_is_what_the_mesh_converges_on() {
    let (mut mesh, _hosts) = Mesh::with_hosts(Backend::Sqlite, &["n1"]).await;
    waited(
        &mesh,
        &["assign", "echo", "n1", "--wait", "--timeout", "60s"],
    );
    let echo = module_pid(&mesh, "n1", "echo").expect("echo runs");

    // The backup: the directory (keys, broker configuration, mesh.db),
    // copied with the controller stopped.
    assert!(mesh.controller.as_mut().unwrap().stop().success());
    let backup = mesh.tmp.path().join("backup");
    copy_dir(&mesh.dir, &backup);
    mesh.start_controller();

    // After it: echo moved out, greeter in.
    waited(
        &mesh,
        &["unassign", "echo", "n1", "--wait", "--timeout", "60s"],
    );
    waited(
        &mesh,
        &["assign", "greeter", "n1", "--wait", "--timeout", "60s"],
    );
    assert!(module_pid(&mesh, "n1", "echo").is_none());
    assert!(!mesh_testkit::pid_alive(echo));
    let greeter = module_pid(&mesh, "n1", "greeter").expect("greeter runs");

    // The machine lost: the directory back from the backup.
    assert!(mesh.controller.as_mut().unwrap().stop().success());
    std::fs::remove_dir_all(&mesh.dir).unwrap();
    copy_dir(&backup, &mesh.dir);
    mesh.start_controller();

    let converged = wait_until(CONVERGE, || {
        module_pid(&mesh, "n1", "echo").is_some() && module_pid(&mesh, "n1", "greeter").is_none()
    });
    let host_log = std::fs::read_dir(mesh.tmp.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("host-n1-"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect::<String>();
    assert!(
        converged,
        "the host did not converge on the restored records (echo {:?}, greeter {:?}); controller:\n{}\nhost:\n{host_log}",
        module_pid(&mesh, "n1", "echo"),
        module_pid(&mesh, "n1", "greeter"),
        mesh.controller().log()
    );
    assert!(!mesh_testkit::pid_alive(greeter));
    // The controller said why it declared above its records.
    let log = mesh.controller().log();
    assert!(
        log.contains("was the store restored from a backup?") && log.contains("applied=3"),
        "{log}"
    );
    eprintln!("restored: echo running again, greeter stopped");
}

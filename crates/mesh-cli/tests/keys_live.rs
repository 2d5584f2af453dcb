//! Keys announced ahead, live: a host makes a few module keys before it
//! enrols and announces them; a module newly declared to it is given one,
//! recorded and admitted by the broker before the declaration is published,
//! so no module's first start is refused — restarts 0, at the first
//! assignment and at every later one. A declaration that widens a module's
//! grants waits for the composition that grants them.

#[path = "join_live/harness.rs"]
mod harness;

use std::path::{Path, PathBuf};
use std::time::Duration;

use harness::{Backend, Mesh, wait_bound, wait_until};

const LONG: Duration = Duration::from_secs(90);

/// `mesh modules --output json` rows on n1: (module, state, restarts).
fn modules(mesh: &Mesh) -> Vec<(String, String, u64)> {
    let out = mesh.mesh(&["modules", "--output", "json"]);
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
    rows.iter()
        .filter(|r| r["node"] == "n1")
        .map(|r| {
            (
                r["module"].as_str().unwrap_or_default().to_string(),
                r["state"].as_str().unwrap_or_default().to_string(),
                r["restarts"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect()
}

fn all_running(mesh: &Mesh, names: &[&str]) -> bool {
    let rows = modules(mesh);
    names
        .iter()
        .all(|n| rows.iter().any(|(m, s, _)| m == n && s == "running"))
}

fn public_key_of(seed_file: &Path) -> String {
    let seed = std::fs::read_to_string(seed_file).unwrap();
    nkeys::KeyPair::from_seed(seed.trim()).unwrap().public_key()
}

fn spares(mesh: &Mesh) -> Vec<String> {
    let mut keys: Vec<String> = std::fs::read_dir(mesh.host_dir("n1").join("spare"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    keys.sort();
    keys
}

async fn one_host() -> (Mesh, harness::Daemon) {
    let mut mesh = Mesh::new(Backend::Sqlite);
    mesh.start_controller();
    mesh.register(&Mesh::examples());
    let token = mesh.node_add("n1", "1h");
    let host = mesh.host("n1", Some(&token));
    let js = async_nats::jetstream::new(mesh.observer().await);
    wait_bound(&js, &["n1"], LONG).await;
    (mesh, host)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_module_starts_with_a_key_the_broker_admits_restarts_zero() {
    let (mesh, _host) = one_host().await;
    let announced = spares(&mesh);
    assert_eq!(
        announced.len(),
        mesh_host::spare::KEEP,
        "the keys made before enrolling"
    );
    let first = ["echo", "greeter", "ticker", "recorder"];
    for m in first {
        mesh.assign(m, "n1", true);
    }
    assert!(
        wait_until(LONG, || all_running(&mesh, &first)),
        "{:?}",
        modules(&mesh)
    );
    for (m, _, restarts) in modules(&mesh) {
        assert_eq!(
            restarts,
            0,
            "{m} was refused and restarted: {:?}",
            modules(&mesh)
        );
        // Never refused at all (a restart count is reset by a declaration
        // that changes the module, so the log is the witness).
        let log = std::fs::read_to_string(mesh.module_dir("n1", &m).join("log")).unwrap();
        assert!(!log.to_lowercase().contains("authorization"), "{m}: {log}");
    }
    // Each started with one of the keys its host announced ahead.
    let used: Vec<String> = first
        .iter()
        .map(|m| public_key_of(&mesh.module_dir("n1", m).join("nkey.seed")))
        .collect();
    for k in &used {
        assert!(announced.contains(k), "{k} was not a spare: {announced:?}");
    }
    // The host makes new spares for the next ones.
    assert!(
        wait_until(LONG, || spares(&mesh).len() == mesh_host::spare::KEEP),
        "{:?}",
        spares(&mesh)
    );
    assert!(spares(&mesh).iter().all(|k| !used.contains(k)));

    // A module assigned later: the same, with a spare made since.
    mesh.assign("worker", "n1", true);
    assert!(
        wait_until(LONG, || all_running(&mesh, &["worker"])),
        "{:?}",
        modules(&mesh)
    );
    let worker = modules(&mesh)
        .into_iter()
        .find(|(m, _, _)| m == "worker")
        .unwrap();
    assert_eq!(worker.2, 0, "{worker:?}");
    let log = std::fs::read_to_string(mesh.module_dir("n1", "worker").join("log")).unwrap();
    assert!(!log.to_lowercase().contains("authorization"), "{log}");
}

/// `count` copies of the example echo, `echo-0` …, each connecting to the
/// bus with its own key the moment it starts.
fn echoes(dir: &Path, count: usize) -> (PathBuf, Vec<String>) {
    let root = dir.join("echoes");
    let names: Vec<String> = (0..count).map(|i| format!("echo-{i}")).collect();
    for name in &names {
        std::fs::create_dir_all(root.join(name)).unwrap();
        std::fs::write(
            root.join(name).join("mesh.toml"),
            format!(
                "[module]\nname = \"{name}\"\ndescription = \"an echo\"\n\n[run]\ncommand = [\"mesh-echo\"]\n\n[events]\nemits = [\"started\", \"heard\"]\n"
            ),
        )
        .unwrap();
    }
    (root, names)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_modules_than_spares_all_start_with_admitted_keys() {
    let (mesh, host) = one_host().await;
    let (catalogue, names) = echoes(mesh.tmp.path(), mesh_host::spare::KEEP + 2);
    mesh.register(&catalogue);
    // The host held still, so no report brings new spares meanwhile: one
    // burst gives out every spare it announced and holds one module back;
    // a module assigned after it finds the node with no spare left, which
    // is not a host that makes none — it waits too, rather than be
    // declared without a key, started under one its host makes, and
    // refused by the broker once.
    let (first, last) = names.split_at(names.len() - 1);
    let signal = |sig| {
        // SAFETY: kill(2) on the host this test started, not yet reaped.
        unsafe { libc::kill(host.pid() as libc::pid_t, sig) };
    };
    signal(libc::SIGSTOP);
    for name in first {
        mesh.assign(name, "n1", true);
    }
    assert!(
        wait_until(LONG, || mesh.controller().log().contains(
            "modules held back until their nodes announce more spare keys"
        )),
        "{}",
        mesh.controller().log()
    );
    let passes = mesh.controller().log().matches("records changed").count();
    mesh.assign(&last[0], "n1", true);
    assert!(
        wait_until(LONG, || mesh
            .controller()
            .log()
            .matches("records changed")
            .count()
            > passes),
        "{}",
        mesh.controller().log()
    );
    // Past the burst window and the pass it starts.
    std::thread::sleep(Duration::from_secs(3));
    signal(libc::SIGCONT);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert!(
        wait_until(LONG, || all_running(&mesh, &names)),
        "{:?}",
        modules(&mesh)
    );
    for (m, _, restarts) in modules(&mesh) {
        let log = std::fs::read_to_string(mesh.module_dir("n1", &m).join("log")).unwrap();
        assert_eq!(restarts, 0, "{m} was refused and restarted: {log}");
        assert!(!log.to_lowercase().contains("authorization"), "{m}: {log}");
    }
}

/// `emitter`, running `mesh-ticker`, its manifest declaring `emits` as given.
fn ticker(dir: &Path, emits: &str) -> PathBuf {
    let root = dir.join("widen");
    std::fs::create_dir_all(root.join("emitter")).unwrap();
    std::fs::write(
        root.join("emitter/mesh.toml"),
        format!(
            "[module]\nname = \"emitter\"\ndescription = \"emits ticks (nobody consumes them)\"\n\n[run]\ncommand = [\"mesh-ticker\", \"--count\", \"3\"]\n\n[events]\nemits = [{emits}]\n"
        ),
    )
    .unwrap();
    root
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_widened_grant_is_live_before_the_declaration_that_needs_it() {
    let (mesh, host) = one_host().await;
    // Declared without the event it emits: refused by the broker, failing.
    mesh.register(&ticker(mesh.tmp.path(), "\"tock\""));
    mesh.assign("emitter", "n1", true);
    let log = mesh.module_dir("n1", "emitter").join("log");
    assert!(
        wait_until(LONG, || std::fs::read_to_string(&log).is_ok_and(
            |l| l.contains("the bus refused event \"tick\" of module emitter")
        )),
        "the narrow grant refuses the tick"
    );
    // Registered again with the event while the broker does not take the
    // new composition (its pid file names another process, so the reload
    // signal goes astray): the declaration that restarts the module on the
    // new manifest waits for the composition that grants the event.
    let pid_file = mesh.dir.join("broker/nats.pid");
    let real = std::fs::read_to_string(&pid_file).unwrap();
    let mut decoy = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    std::fs::write(&pid_file, format!("{}\n", decoy.id())).unwrap();
    let applied = host.log().matches("declaration applied").count();
    let not_live = mesh
        .controller()
        .log()
        .matches("composition not live")
        .count();
    mesh.register(&ticker(mesh.tmp.path(), "\"tick\""));
    assert!(
        wait_until(LONG, || mesh
            .controller()
            .log()
            .matches("composition not live")
            .count()
            > not_live),
        "the new composition was not refused live"
    );
    assert_eq!(
        host.log().matches("declaration applied").count(),
        applied,
        "declared before the composition it needs was live:\n{}",
        host.log()
    );
    // The broker's own pid again: the composition goes live, and only then
    // the declaration.
    std::fs::write(&pid_file, real).unwrap();
    let _ = decoy.kill();
    let _ = decoy.wait();
    let ticked = mesh.module_dir("n1", "emitter").join("work/ticked");
    assert!(
        wait_until(LONG, || std::fs::read_to_string(&ticked)
            .is_ok_and(|t| t == "3")),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(
        wait_until(LONG, || all_running(&mesh, &["emitter"])),
        "{:?}",
        modules(&mesh)
    );
    let row = modules(&mesh)
        .into_iter()
        .find(|(m, _, _)| m == "emitter")
        .unwrap();
    assert_eq!(
        row.2,
        0,
        "restarted on the new manifest without a refusal: {row:?}\n{}\n{}",
        std::fs::read_to_string(&log).unwrap_or_default(),
        host.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_assigned_before_its_node_enrols_starts_with_a_spare() {
    let mut mesh = Mesh::new(Backend::Sqlite);
    mesh.start_controller();
    mesh.register(&Mesh::examples());
    let token = mesh.node_add("n1", "1h");
    // Assigned while no host has enrolled: nothing to declare yet, and the
    // wait says whom it waits for (a declaration made now would name no
    // key, and the host, enrolling later, would start echo under a key of
    // its own, refused once).
    let out = mesh.mesh(&["assign", "echo", "n1", "--wait", "--timeout", "5s"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("n1 has not enrolled") && err.contains("mesh host --token"),
        "{err}"
    );
    let _host = mesh.host("n1", Some(&token));
    assert!(
        wait_until(LONG, || all_running(&mesh, &["echo"])),
        "{:?}",
        modules(&mesh)
    );
    let row = modules(&mesh)
        .into_iter()
        .find(|(m, _, _)| m == "echo")
        .unwrap();
    assert_eq!(row.2, 0, "{row:?}");
    let log = std::fs::read_to_string(mesh.module_dir("n1", "echo").join("log")).unwrap();
    assert!(!log.to_lowercase().contains("authorization"), "{log}");
}

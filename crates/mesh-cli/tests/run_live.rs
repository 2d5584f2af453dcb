//! Running modules, live: a real controller declares, real `mesh host`
//! processes verify and apply through the process driver, and the example
//! module `mesh-echo` is seen working from outside.

#[path = "join_live/harness.rs"]
mod harness;

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream;
use harness::{Backend, Mesh, wait_until};
use mesh_core::names::Name;

const LONG: Duration = Duration::from_secs(60);

/// Pids whose working directory is `dir` (a module's `work/`).
fn processes_in(dir: &Path) -> Vec<u32> {
    let Ok(dir) = dir.canonicalize() else {
        return Vec::new();
    };
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == dir))
        .collect()
}

/// The address `mesh-echo` wrote once it listened.
fn echo_addr(mesh: &Mesh, host: &str) -> Option<String> {
    let text =
        std::fs::read_to_string(mesh.module_dir(host, "echo").join("work/echo.addr")).ok()?;
    Some(text.trim().to_string()).filter(|s| !s.is_empty())
}

/// Sends a line to the echo module and returns its answer.
fn talk(addr: &str, line: &str) -> std::io::Result<String> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    writeln!(s, "{line}")?;
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer)?;
    Ok(answer.trim_end().to_string())
}

/// Waits until echo on `host` answers; returns its address.
fn wait_echo(mesh: &Mesh, host: &str) -> String {
    let mut got = None;
    assert!(
        wait_until(LONG, || {
            got =
                echo_addr(mesh, host).filter(|a| talk(a, "ping").is_ok_and(|r| r == "echo: ping"));
            got.is_some()
        }),
        "echo never answered on {host}; its log:\n{}",
        std::fs::read_to_string(mesh.module_dir(host, "echo").join("log")).unwrap_or_default()
    );
    got.unwrap()
}

async fn store(mesh: &Mesh) -> mesh_store::Store {
    mesh_store::Store::open(&mesh.store_url).await.unwrap()
}

/// Waits until `node`'s newest report satisfies `f`.
async fn wait_report(
    mesh: &Mesh,
    node: &str,
    f: impl FnMut(&mesh_store::Report) -> bool,
) -> mesh_store::Report {
    wait_report_after(mesh, node, 0, f).await.report
}

/// Waits for a report newer than the one with id `after` satisfying `f`.
async fn wait_report_after(
    mesh: &Mesh,
    node: &str,
    after: i64,
    mut f: impl FnMut(&mesh_store::Report) -> bool,
) -> mesh_store::StoredReport {
    let s = store(mesh).await;
    let node = Name::new(node).unwrap();
    for _ in 0..1200 {
        if let Some(r) = s.latest_report(&node).await.unwrap()
            && r.id > after
            && f(&r.report)
        {
            s.close().await;
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "no such report from {node}: {:?}",
        s.latest_report(&node).await.unwrap()
    );
}

/// Waits for a report newer than `after` saying the host refused something;
/// not only the newest (a report of a module's state may follow it).
async fn wait_refusal_after(mesh: &Mesh, node: &str, after: i64) -> mesh_store::StoredReport {
    let s = store(mesh).await;
    let node = Name::new(node).unwrap();
    loop {
        let found = s
            .reports(&node, 50)
            .await
            .unwrap()
            .into_iter()
            .filter(|r| r.id > after && r.report.refused.is_some())
            .min_by_key(|r| r.id);
        if let Some(r) = found {
            s.close().await;
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn running(r: &mesh_store::Report, module: &str) -> bool {
    r.outcomes
        .iter()
        .any(|o| o.module.as_str() == module && o.state == mesh_store::ModuleState::Running)
}

async fn echo_on_two_of_three(backend: Backend) {
    let (mesh, mut hosts) = Mesh::with_hosts(backend, &["n1", "n2", "n3"]).await;
    mesh.assign("echo", "n1", true);
    mesh.assign("echo", "n2", true);
    for n in ["n1", "n2"] {
        let addr = wait_echo(&mesh, n);
        assert_eq!(talk(&addr, "hi").unwrap(), "echo: hi", "{n}");
        let r = wait_report(&mesh, n, |r| running(r, "echo")).await;
        assert_eq!(r.refused, None);
    }
    // The listings say the same, as JSON a script can read.
    let out = mesh.mesh(&["modules", "--output", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let mut seen: Vec<(String, String)> = rows
        .iter()
        .map(|r| {
            (
                r["node"].as_str().unwrap().into(),
                r["state"].as_str().unwrap().into(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("n1".into(), "running".into()),
            ("n2".into(), "running".into())
        ],
        "{rows:?}"
    );
    let out = mesh.mesh(&["reports", "n1", "--limit", "3", "--output", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reports: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!reports.is_empty() && reports.len() <= 3, "{reports:?}");
    assert_eq!(reports[0]["modules"][0]["module"], "echo");
    let out = mesh.mesh(&["reports", "n3", "--output", "json"]);
    assert_eq!(
        serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout)
            .unwrap()
            .len(),
        0
    );

    // Nothing declared for n3: nothing runs there, nothing is reported.
    assert!(echo_addr(&mesh, "n3").is_none());
    let s = store(&mesh).await;
    assert_eq!(
        s.latest_report(&Name::new("n3").unwrap()).await.unwrap(),
        None
    );
    // Each echo's key is recorded for its own node only.
    for n in ["n1", "n2"] {
        let c = s.credential(&format!("module_{n}_echo")).await.unwrap();
        assert!(c.is_some(), "module_{n}_echo recorded");
    }
    assert!(s.credential("module_n3_echo").await.unwrap().is_none());

    // n3's host names a key for echo, which is not assigned to n3: the
    // controller records the report and ignores the key.
    let seed = std::fs::read_to_string(mesh.host_dir("n3").join("nkey.seed")).unwrap();
    let host3 = mesh_bus::connect(&mesh.bus("host_n3", seed.trim(), Some("_INBOX.host_n3".into())))
        .await
        .unwrap();
    let forged = mesh_core::report::Report {
        id: "forged-1".into(),
        node: Name::new("n3").unwrap(),
        sequence: 0,
        modules: vec![mesh_core::report::ModuleReport {
            name: Name::new("echo").unwrap(),
            state: mesh_core::report::ModuleState::Running,
            reason: None,
            restarts: 0,
            nkey: Some(nkeys::KeyPair::new_user().public_key()),
            pinned: None,
            health: None,
        }],
        refused: None,
        address: None,
        spare_keys: Vec::new(),
        amqp_hashes: Default::default(),
    };
    jetstream::new(host3)
        .publish("mesh.control.report.n3", forged.to_json().into())
        .await
        .unwrap()
        .await
        .unwrap();
    mesh.controller()
        .wait_log("key of a module not assigned to this node ignored", LONG);
    assert!(
        s.latest_report(&Name::new("n3").unwrap())
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        s.credential("module_n3_echo").await.unwrap().is_none(),
        "no key for an unassigned module"
    );
    s.close().await;

    // A host stopped stops its modules: nothing left behind.
    let modules: Vec<u32> = ["n1", "n2"]
        .iter()
        .flat_map(|n| processes_in(&mesh.module_dir(n, "echo").join("work")))
        .collect();
    assert_eq!(modules.len(), 2, "{modules:?}");
    for h in &mut hosts {
        assert!(h.stop().success(), "{}", h.log());
    }
    for pid in modules {
        assert!(
            !mesh_testkit::pid_alive(pid),
            "module pid {pid} left behind"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_on_two_of_three_hosts_runs_and_reports_on_sqlite() {
    echo_on_two_of_three(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_on_two_of_three_hosts_runs_and_reports_on_postgres() {
    echo_on_two_of_three(Backend::Postgres).await;
}

/// The module's own key, as its host made it.
fn module_seed(mesh: &Mesh, host: &str, module: &str) -> String {
    std::fs::read_to_string(mesh.module_dir(host, module).join("nkey.seed"))
        .unwrap()
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_emits_what_it_declares_and_nothing_else_unassigned_it_is_gone() {
    let (mesh, _hosts) = Mesh::with_hosts(Backend::Sqlite, &["n1"]).await;
    mesh.assign("echo", "n1", true);
    let addr = wait_echo(&mesh, "n1");
    talk(&addr, "hello").unwrap();

    // The module's `heard` event is in EVENTS, in the one envelope.
    let js = jetstream::new(mesh.observer().await);
    let events = js.get_stream("EVENTS").await.unwrap();
    let mut heard = None;
    for _ in 0..200 {
        if let Ok(m) = events
            .get_last_raw_message_by_subject("mesh.mod.echo.event.heard")
            .await
        {
            heard = Some(m);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let heard = heard.expect("echo emitted heard");
    let envelope: serde_json::Value = serde_json::from_slice(&heard.payload).unwrap();
    assert_eq!(envelope["module"], "echo");
    assert_eq!(envelope["node"], "n1");

    // With only the key its host made: the declared event is stored, an
    // undeclared one is refused by the server.
    let seed = module_seed(&mesh, "n1", "echo");
    let (tx, mut violations) = tokio::sync::mpsc::unbounded_channel();
    let client = mesh_bus::connect_with(
        &mesh.bus(
            "module_n1_echo",
            &seed,
            Some("_INBOX.module_n1_echo".into()),
        ),
        move |o| {
            o.event_callback(move |e| {
                let tx = tx.clone();
                async move {
                    if let async_nats::Event::ServerError(e) = e {
                        let _ = tx.send(e.to_string());
                    }
                }
            })
        },
    )
    .await
    .unwrap();
    let mjs = jetstream::new(client.clone());
    mjs.publish("mesh.mod.echo.event.heard", "{}".into())
        .await
        .unwrap()
        .await
        .expect("a declared event is stored");
    client
        .publish("mesh.mod.echo.event.undeclared", "{}".into())
        .await
        .unwrap();
    client.flush().await.unwrap();
    let refused = tokio::time::timeout(Duration::from_secs(10), violations.recv())
        .await
        .expect("the server answers the undeclared publish")
        .unwrap();
    assert!(
        refused.to_lowercase().contains("permissions violation")
            && refused.contains("mesh.mod.echo.event.undeclared"),
        "{refused}"
    );

    // Unassigned: the process is gone and, once recomposed, its key refused.
    let work = mesh.module_dir("n1", "echo").join("work");
    let pids = processes_in(&work);
    assert_eq!(pids.len(), 1, "one echo: {pids:?}");
    mesh.assign("echo", "n1", false);
    assert!(
        wait_until(LONG, || pids.iter().all(|p| !mesh_testkit::pid_alive(*p))),
        "echo {pids:?} still running"
    );
    let mut refused = false;
    for _ in 0..400 {
        let r = mesh_bus::connect(&mesh.bus(
            "module_n1_echo",
            &seed,
            Some("_INBOX.module_n1_echo".into()),
        ))
        .await;
        if r.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(refused, "the unassigned module's key is refused");
    wait_report(&mesh, "n1", |r| r.outcomes.is_empty()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_module_is_restarted_and_reported_failed_with_its_status_and_last_lines() {
    let (mesh, _hosts) = Mesh::with_hosts(Backend::Sqlite, &["n1"]).await;
    let dir = mesh.tmp.path().join("crash-catalogue/crash");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("mesh.toml"),
        r#"[module]
name = "crash"
description = "fails at once, for the driver's restarts"

[run]
command = ["sh", "-c", "echo boom >&2; exit 3"]
"#,
    )
    .unwrap();
    mesh.register(dir.parent().unwrap());
    mesh.assign("crash", "n1", true);
    let r = wait_report(&mesh, "n1", |r| {
        r.outcomes.iter().any(|o| {
            o.module.as_str() == "crash"
                && matches!(o.state, mesh_store::ModuleState::Failed { .. })
        })
    })
    .await;
    let o = r
        .outcomes
        .iter()
        .find(|o| o.module.as_str() == "crash")
        .unwrap();
    let mesh_store::ModuleState::Failed { reason } = &o.state else {
        unreachable!()
    };
    assert!(reason.contains('3') && reason.contains("boom"), "{reason}");
    assert!(
        o.restarts >= 2,
        "restarted before it was called failed: {o:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_and_started_again_runs_each_module_once() {
    let (mesh, mut hosts) = Mesh::with_hosts(Backend::Sqlite, &["n1"]).await;
    mesh.assign("echo", "n1", true);
    wait_echo(&mesh, "n1");
    let work: PathBuf = mesh.module_dir("n1", "echo").join("work");
    let before = processes_in(&work);
    assert_eq!(before.len(), 1, "{before:?}");

    // SIGKILL: the host has no chance to stop its module.
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(hosts[0].pid() as i32, libc::SIGKILL) };
    hosts[0].wait_exit(Duration::from_secs(10));
    assert!(
        mesh_testkit::pid_alive(before[0]),
        "the module outlived its host"
    );

    hosts[0] = mesh.host("n1", None);
    assert!(
        wait_until(LONG, || !mesh_testkit::pid_alive(before[0])),
        "the leftover {before:?} was not killed"
    );
    wait_echo(&mesh, "n1");
    // Settled: exactly one process, and not the old one.
    std::thread::sleep(Duration::from_millis(500));
    let after = processes_in(&work);
    assert_eq!(after.len(), 1, "one echo after the restart: {after:?}");
    assert_ne!(after, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_a_foreign_and_a_replayed_declaration_are_refused_and_nothing_applied() {
    use mesh_core::declaration::{Declaration, Envelope};
    let (mesh, hosts) = Mesh::with_hosts(Backend::Sqlite, &["n1"]).await;
    mesh.assign("echo", "n1", true);
    wait_echo(&mesh, "n1");
    let s = store(&mesh).await;
    let n1 = Name::new("n1").unwrap();
    let first = s.latest_declaration(&n1).await.unwrap().unwrap();
    mesh.assign("echo", "n1", false);
    let mut last = wait_report_after(&mesh, "n1", 0, |r| r.outcomes.is_empty())
        .await
        .id;
    let work = mesh.module_dir("n1", "echo").join("work");
    assert!(wait_until(LONG, || processes_in(&work).is_empty()));

    // What the first declaration said, for forgeries that would start echo.
    let env: Envelope = serde_json::from_str(&first.body).unwrap();
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let decl: Declaration = serde_json::from_slice(&b64.decode(&env.declaration).unwrap()).unwrap();
    let seed: [u8; 32] = hex::decode(
        std::fs::read_to_string(mesh.dir.join("controller/signing.seed"))
            .unwrap()
            .trim(),
    )
    .unwrap()
    .try_into()
    .unwrap();
    let controller = ed25519_dalek::SigningKey::from_bytes(&seed);
    let newer = Declaration {
        sequence: 100,
        ..decl.clone()
    };
    let flipped = {
        let wire = newer.sign(&controller);
        let env: Envelope = serde_json::from_slice(&wire).unwrap();
        let mut bytes = b64.decode(&env.declaration).unwrap();
        let i = bytes.len() - 3;
        bytes[i] ^= 0x01;
        serde_json::to_vec(&Envelope {
            declaration: b64.encode(&bytes),
            signature: env.signature,
        })
        .unwrap()
    };
    let foreign = newer.sign(&ed25519_dalek::SigningKey::from_bytes(&[7; 32]));
    let replay = first.body.clone().into_bytes();

    let js = jetstream::new(mesh.observer().await);
    for (what, payload, says) in [
        ("a flipped byte", flipped, "signature"),
        ("another key", foreign, "signature"),
        ("a replay", replay, "not newer"),
    ] {
        js.publish("mesh.node.n1.declaration", payload.into())
            .await
            .unwrap()
            .await
            .unwrap();
        let r = tokio::time::timeout(
            Duration::from_secs(20),
            wait_refusal_after(&mesh, "n1", last),
        )
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{what}: no refusal reported; host log:\n{}\ncontroller log:\n{}",
                hosts[0].log(),
                mesh.controller().log()
            )
        });
        let why = r.report.refused.clone().unwrap();
        assert!(why.contains(says), "{what}: {why}");
        assert!(
            r.report.outcomes.is_empty(),
            "{what}: nothing applied: {:?}",
            r.report
        );
        last = r.id;
        assert!(processes_in(&work).is_empty(), "{what}: echo started");
    }
    s.close().await;
}

/// `mesh up` stopped when the case ends before it stops it (a failed
/// assertion): SIGTERM, which stops everything it started, then SIGKILL if
/// it has not ended within 15 s. Without it a failed case left `mesh up`,
/// its broker and its modules running.
struct StoppedOnDrop(std::process::Child);

impl std::ops::Deref for StoppedOnDrop {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for StoppedOnDrop {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for StoppedOnDrop {
    fn drop(&mut self) {
        if !matches!(self.0.try_wait(), Ok(None)) {
            return;
        }
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        if !wait_until(Duration::from_secs(15), || {
            !matches!(self.0.try_wait(), Ok(None))
        }) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// `mesh up` as a process, its output in `log`.
fn up(dir: &Path, port: u16, log: &Path) -> std::process::Child {
    let out = std::fs::File::create(log).unwrap();
    std::process::Command::new(harness::mesh_bin())
        .args([
            "up",
            "--dir",
            dir.to_str().unwrap(),
            "--port",
            &port.to_string(),
        ])
        .args(["--catalogue", Mesh::examples().to_str().unwrap()])
        .env("PATH", harness::path_with_bins())
        .env(
            "MESH_NATS_SERVER",
            mesh_testkit::nats_server_binary().unwrap(),
        )
        .env("MESH_LOG", "info,async_nats=off")
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap()
}

#[test]
fn mesh_up_runs_echo_reuses_its_genesis_and_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(".mesh");
    let port = mesh_testkit::broker::free_port().unwrap();
    let work = dir.join("host/modules/echo/work");
    // The default HTTP port taken (here, or by anything else on this
    // machine): the summary names where the controller serves instead.
    let default = mesh_controller::http::DEFAULT_ADDR;
    let held = std::net::TcpListener::bind(default).ok();
    let addr_file = dir.join(mesh_controller::http::ADDR_FILE);
    for run in 1..=2 {
        let log = tmp.path().join(format!("up-{run}.log"));
        let mut child = StoppedOnDrop(up(&dir, port, &log));
        let read = || std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            wait_until(LONG, || read().contains("module      echo on local")
                || child.try_wait().unwrap().is_some()),
            "run {run}: mesh up never said echo runs:\n{}",
            read()
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "run {run}: mesh up ended:\n{}",
            read()
        );
        let http = std::fs::read_to_string(&addr_file).unwrap();
        let http = http.trim();
        assert!(
            wait_until(LONG, || read().contains(&format!(
                "  dashboard   http://{http}/ (/metrics, /api/status)"
            ))),
            "run {run}: the summary does not name {http}:\n{}",
            read()
        );
        if held.is_some() {
            assert_ne!(http, default, "run {run}");
        }
        let (code, body) = mesh_cli::status::http_get(http, "/api/status").unwrap();
        assert_eq!(code, 200, "run {run}: {body}");
        let mut answered = false;
        assert!(
            wait_until(LONG, || {
                let addr = std::fs::read_to_string(work.join("echo.addr")).unwrap_or_default();
                answered = talk(addr.trim(), "hi").is_ok_and(|a| a == "echo: hi");
                answered
            }),
            "run {run}: echo never answered:\n{}",
            read()
        );
        let broker: u32 = std::fs::read_to_string(dir.join("broker/nats.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let modules = processes_in(&work);
        assert_eq!(modules.len(), 1, "run {run}: {modules:?}");
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = child.wait().unwrap();
        assert!(status.success(), "run {run}: {status}:\n{}", read());
        for pid in modules.iter().chain([&broker]) {
            assert!(
                !mesh_testkit::pid_alive(*pid),
                "run {run}: pid {pid} left behind:\n{}",
                read()
            );
        }
        assert!(processes_in(&work).is_empty());
        assert!(
            !addr_file.exists(),
            "run {run}: the HTTP address outlived the stop"
        );
        if run == 2 {
            assert!(
                !read().contains("up: node local enrolled"),
                "the second run reuses the enrolled host:\n{}",
                read()
            );
        }
    }
}

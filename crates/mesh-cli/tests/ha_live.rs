//! The mesh outlives any one machine, live: controllers sharing one
//! PostgreSQL store (one active, the others standing by), faulted under
//! streams of reports. Each fault is a row of one table — reports sent,
//! recorded, lost, recorded twice — closed by one line:
//! `failover: N faults, 0 reports lost, 0 recorded twice`.

#[path = "join_live/harness.rs"]
mod harness;
#[path = "join_live/report_stream.rs"]
mod report_stream;

use std::time::{Duration, Instant};

use async_nats::jetstream;
use harness::{Backend, Daemon, Mesh, module_pid, wait_bound, wait_until};
use mesh_core::names::Name;
use report_stream::{
    as_host, count, epochs, eventually, leader_of, lease_epoch, send_reports, send_reports_at,
    send_reports_retrying, wait_count,
};

const LONG: Duration = Duration::from_secs(90);

/// Short, so a frozen controller is deposed within the test's patience.
const LEASE: &[&str] = &["--lease", "3s"];

const LOG: &str = "info,async_nats=off";

/// One fault's line of the table.
struct Row {
    fault: &'static str,
    sent: usize,
    recorded: usize,
    duplicated: usize,
    /// What else the fault is judged by, printed after the counts.
    note: String,
}

/// Where `d` serves HTTP, as its log says.
fn http_of(d: &Daemon) -> String {
    let mut found = None;
    assert!(
        wait_until(LONG, || {
            found = d.log().lines().find_map(|l| {
                let at = l.split("url=http://").nth(1)?;
                Some(at.split('/').next()?.to_string())
            });
            found.is_some()
        }),
        "{} never said where it serves HTTP:\n{}",
        d.name,
        d.log()
    );
    found.unwrap()
}

/// `GET /readyz`: its code and body.
fn readyz(addr: &str) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET /readyz HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, body.trim().to_string())
}

/// How long after `since` `d` logged `needle` (polled every 20 ms).
fn time_to_log(d: &Daemon, needle: &str, since: Instant) -> Duration {
    d.wait_log(needle, LONG);
    since.elapsed()
}

fn signal(d: &Daemon, sig: libc::c_int) {
    // SAFETY: kill(2) on a child of this test, not yet reaped.
    unsafe { libc::kill(d.pid() as libc::pid_t, sig) };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_failover_table_loses_nothing_and_records_nothing_twice() {
    let mut rows = Vec::new();
    let db = mesh_testkit::fresh_database().expect("a PostgreSQL database");
    // One cluster for every row: three servers, every stream on each.
    let mut mesh = Mesh::with_servers(Some(db), 3);
    let mut a = mesh.spawn_controller("controller a", LEASE, LOG);
    a.wait_log("controller running", LONG);
    mesh.register(&Mesh::examples());
    // The programs put by commands: the artifact store still kept on every
    // server (a command once scaled it down to its own one copy).
    // Both of its streams: the bucket and the metas written once into it.
    for stream in ["OBJ_ARTIFACTS", "ARTIFACT_METAS"] {
        let copies = jetstream::new(mesh.observer().await)
            .get_stream(stream)
            .await
            .expect("the artifact store")
            .cached_info()
            .config
            .num_replicas;
        assert_eq!(copies, 3, "{stream}'s copies after `mesh artifact put`");
    }
    let b = mesh.spawn_controller("controller b", LEASE, LOG);
    b.wait_log("standing by", LONG);
    let b_http = http_of(&b);
    let (code, body) = readyz(&b_http);
    assert_eq!(code, 503, "{body}");
    assert!(
        body.starts_with("standby: mesh controller on ")
            && body.contains(&format!("pid {}", a.pid())),
        "a standby names the active controller: {body}"
    );
    let token = mesh.node_add("n1", "1h");
    let host = mesh.host("n1", Some(&token));
    host.wait_log("enrolled as node n1", LONG);
    let js = jetstream::new(mesh.observer().await);
    wait_bound(&js, &["n1"], LONG).await;
    let client = as_host(&mesh, "n1").await;

    rows.push(killed_mid_stream(&mesh, &mut a, &b, &b_http, &client).await);
    let a2 = mesh.spawn_controller("controller a again", LEASE, LOG);
    a2.wait_log("standing by", LONG);
    rows.push(frozen_past_its_lease(&mesh, &b, &a2, &client).await);
    rows.push(stream_leader_killed(&mut mesh, &client).await);
    rows.push(one_server_down(&mut mesh, &[&b, &a2]).await);

    println!("failover table:");
    println!(
        "  {:<56} {:>5} {:>9} {:>5} {:>6}  and",
        "fault", "sent", "recorded", "lost", "twice"
    );
    for r in &rows {
        println!(
            "  {:<56} {:>5} {:>9} {:>5} {:>6}  {}",
            r.fault,
            r.sent,
            r.recorded,
            r.sent.saturating_sub(r.recorded),
            r.duplicated,
            r.note
        );
    }
    let lost: usize = rows.iter().map(|r| r.sent.saturating_sub(r.recorded)).sum();
    let twice: usize = rows.iter().map(|r| r.duplicated).sum();
    println!(
        "failover: {} faults, {lost} reports lost, {twice} recorded twice",
        rows.len()
    );
    assert_eq!((lost, twice), (0, 0));
}

/// The active controller SIGKILLed while it records 2,000 reports: the
/// standby takes over (its lock released with the dead one's session),
/// records every report once, and declares what is assigned after.
async fn killed_mid_stream(
    mesh: &Mesh,
    a: &mut Daemon,
    b: &Daemon,
    b_http: &str,
    client: &async_nats::Client,
) -> Row {
    const SENT: usize = 2_000;
    send_reports(client, "n1", "k", 0..SENT).await;
    assert!(
        wait_count(&mesh.store_url, "n1", "k", 50).await.0 >= 50,
        "the active controller never took reports"
    );
    let killed = Instant::now();
    a.kill();
    let took = time_to_log(b, "controller running", killed);
    let before = count(&mesh.store_url, "n1", "k").await.0;
    assert!(before < SENT, "killed before the end ({before} recorded)");
    let (recorded, duplicated) = wait_count(&mesh.store_url, "n1", "k", SENT).await;
    assert!(
        wait_until(LONG, || readyz(b_http).0 == 200),
        "the new active controller is never ready: {:?}",
        readyz(b_http)
    );
    let status = harness::ok(mesh, &["status"]);
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("lease ") && l.contains(&format!("pid {}", b.pid()))),
        "`mesh status` names the new active controller:\n{status}"
    );
    // Declared after the takeover, and run.
    mesh.assign("echo", "n1", true);
    assert!(
        wait_until(LONG, || module_pid(mesh, "n1", "echo").is_some()),
        "echo assigned after the takeover never ran; controller b:\n{}",
        b.log()
    );
    assert_eq!((recorded, duplicated), (SENT, 0));
    Row {
        fault: "active controller SIGKILLed mid-stream",
        sent: SENT,
        recorded,
        duplicated,
        note: format!(
            "standby active after {:.1} s (target < 5 s); {before} recorded before; echo assigned after ran",
            took.as_secs_f64()
        ),
    }
}

/// The active controller frozen (SIGSTOP) past its lease while reports
/// arrive, then resumed: the standby takes over once the store ends the
/// frozen one's session, and nothing the old one writes lands — every
/// report sent during the freeze is recorded under the new epoch.
async fn frozen_past_its_lease(
    mesh: &Mesh,
    b: &Daemon,
    a2: &Daemon,
    client: &async_nats::Client,
) -> Row {
    const SENT: usize = 500;
    let old = lease_epoch(&mesh.store_url).await;
    signal(b, libc::SIGSTOP);
    let frozen = Instant::now();
    // Delivered to the frozen controller alone (the standby binds nothing):
    // unacknowledged, they come round again only after CONTROL's ack wait.
    let sequence = newest_declaration(&mesh.store_url, "n1").await;
    send_reports_at(client, "n1", "s", sequence, 0..SENT).await;
    let took = time_to_log(a2, "controller running", frozen);
    let new = lease_epoch(&mesh.store_url).await;
    signal(b, libc::SIGCONT);
    b.wait_log("stepping down", LONG);
    let (recorded, duplicated) = wait_count(&mesh.store_url, "n1", "s", SENT).await;
    if recorded < SENT {
        panic!(
            "{recorded} of {SENT} recorded; {}:\n{}\n\n{}:\n{}",
            a2.name,
            tail(a2),
            b.name,
            tail(b)
        );
    }
    let by_epoch = epochs(&mesh.store_url, "n1", "s").await;
    let old_writes = by_epoch.values().filter(|e| **e == Some(old)).count();
    let refused = b.log().matches("left to the active controller").count();
    assert!(new > old, "the epoch moved ({old} → {new})");
    assert_eq!(old_writes, 0, "writes of the deposed controller landed");
    assert!(
        by_epoch.values().all(|e| *e == Some(new)),
        "every report of the freeze recorded under epoch {new}: {by_epoch:?}"
    );
    assert_eq!((recorded, duplicated), (SENT, 0));
    Row {
        fault: "active controller frozen past its lease, resumed",
        sent: SENT,
        recorded,
        duplicated,
        note: format!(
            "standby active after {:.1} s; epoch {old} → {new}; old one's writes refused {refused}, landed {old_writes}",
            took.as_secs_f64()
        ),
    }
}

/// SQLite holds one controller: a second one on the same store (from a
/// copy of the genesis elsewhere, as on another machine) is refused at
/// start, naming the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_controller_on_one_sqlite_store_is_refused_naming_the_first() {
    let mut mesh = Mesh::new(Backend::Sqlite);
    let first = mesh.start_controller().pid();
    let copy = mesh.tmp.path().join("copy");
    let out = std::process::Command::new("cp")
        .args(["-a", mesh.dir.to_str().unwrap(), copy.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let _ = std::fs::remove_file(copy.join("mesh.lock"));
    let out = std::process::Command::new(harness::mesh_bin())
        .args([
            "controller",
            "--dir",
            copy.to_str().unwrap(),
            "--store",
            &mesh.store_url,
            "--no-http",
        ])
        .env("MESH_LOG", "warn")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("has a controller running already: mesh controller on ")
            && err.contains(&format!("(pid {first}, "))
            && err.contains("PostgreSQL"),
        "{err}"
    );
    assert!(mesh.controller.as_mut().unwrap().running());
}

/// The last 40 lines of `d`'s log, newest first.
fn tail(d: &Daemon) -> String {
    d.log()
        .lines()
        .rev()
        .take(40)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The newest declaration of `node`: what a current report answers.
async fn newest_declaration(url: &str, node: &str) -> u64 {
    let s = mesh_store::Store::open(url).await.unwrap();
    let d = s
        .latest_declaration(&Name::new(node).unwrap())
        .await
        .unwrap();
    s.close().await;
    d.map_or(0, |d| u64::try_from(d.version).unwrap())
}

/// A module emitting a `tick` every second, as long as it runs: what shows
/// events still flow while a server is lost.
const PULSE: &str = r#"[module]
name = "pulse"
description = "Emits a tick every second"

[run]
command = ["${artifact:mesh-ticker}", "--count", "1", "--every", "1"]

[events]
emits = ["tick"]
"#;

/// Registers and assigns [`PULSE`] to `node`, its program put as the
/// example ticker's is.
fn assign_pulse(mesh: &Mesh, node: &str) {
    let catalogue = mesh.tmp.path().join("pulse-catalogue");
    std::fs::create_dir_all(catalogue.join("pulse")).unwrap();
    std::fs::write(catalogue.join("pulse/mesh.toml"), PULSE).unwrap();
    mesh.register(&catalogue);
    let program = harness::stripped("mesh-ticker");
    harness::ok(
        mesh,
        &[
            "artifact",
            "put",
            program.to_str().unwrap(),
            "--module",
            "pulse",
            "--name",
            "mesh-ticker",
        ],
    );
    mesh.assign("pulse", node, true);
}

/// The sequence of the newest `tick` in EVENTS (0 before the first).
async fn last_tick(js: &jetstream::Context) -> u64 {
    let Ok(s) = js.get_stream("EVENTS").await else {
        return 0;
    };
    s.get_last_raw_message_by_subject("mesh.mod.pulse.event.tick")
        .await
        .map_or(0, |m| m.sequence)
}

/// The server leading CONTROL SIGKILLed while 2,000 reports arrive and a
/// module emits events: a new leader is elected, every report is recorded
/// once, the host and its module carry on through the other servers, and
/// the server started again rejoins its streams' groups.
async fn stream_leader_killed(mesh: &mut Mesh, client: &async_nats::Client) -> Row {
    const SENT: usize = 2_000;
    let observer = mesh.observer().await;
    let js = jetstream::new(observer.clone());
    assign_pulse(mesh, "n1");
    assert!(
        eventually(|| async { last_tick(&js).await > 0 }).await,
        "pulse never ticked"
    );
    let (leader, _) = leader_of(&js, "CONTROL")
        .await
        .expect("CONTROL has a leader");
    let sequence = newest_declaration(&mesh.store_url, "n1").await;
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sending = tokio::spawn(send_reports_retrying(
        client.clone(),
        "n1",
        "b",
        sequence,
        SENT,
        sent.clone(),
    ));
    let so_far = || sent.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        eventually(|| async { so_far() >= SENT / 4 }).await,
        "reports never went out"
    );
    let killed = Instant::now();
    let at_kill = so_far();
    mesh.server_mut(leader).kill();
    let mut new_leader = None;
    while killed.elapsed() < LONG && new_leader.is_none_or(|l| l == leader) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        new_leader = leader_of(&js, "CONTROL").await.map(|l| l.0);
    }
    let elected = killed.elapsed();
    assert!(
        new_leader.is_some_and(|l| l != leader),
        "CONTROL led by {new_leader:?} after mesh-{leader} was lost"
    );
    let retries = sending.await.unwrap();
    let (recorded, duplicated) = wait_count(&mesh.store_url, "n1", "b", SENT).await;
    let then = last_tick(&js).await;
    assert!(
        eventually(|| async { last_tick(&js).await > then }).await,
        "no tick after mesh-{leader} was lost"
    );
    mesh.server_mut(leader)
        .start_again()
        .expect("the server starts again");
    let name = format!("mesh-{leader}");
    let rejoined = eventually(|| async {
        leader_of(&js, "CONTROL").await.is_some_and(|(l, peers)| {
            l == leader || peers.iter().any(|(n, current)| *n == name && *current)
        })
    })
    .await;
    assert!(rejoined, "{name} never rejoined CONTROL's group");
    assert_eq!((recorded, duplicated), (SENT, 0));
    Row {
        fault: "broker server leading the streams SIGKILLed",
        sent: SENT,
        recorded,
        duplicated,
        note: format!(
            "mesh-{leader} killed after {at_kill} sent; new leader in {:.1} s; {retries} publishes retried; ticks went on; rejoined once started again",
            elected.as_secs_f64()
        ),
    }
}

/// One server down: a node enrols (its token names every server) and a
/// module assigned to it runs, through the other two.
async fn one_server_down(mesh: &mut Mesh, controllers: &[&Daemon]) -> Row {
    mesh.server_mut(1).kill();
    let started = Instant::now();
    let token = mesh.node_add("n2", "1h");
    let host = mesh.host("n2", Some(&token));
    if !wait_until(LONG, || host.log().contains("enrolled as node n2")) {
        let tails: Vec<String> = controllers
            .iter()
            .map(|c| format!("{}:\n{}", c.name, tail(c)))
            .collect();
        panic!(
            "n2 never enrolled with server 1 down; host n2:\n{}\n{}",
            tail(&host),
            tails.join("\n\n")
        );
    }
    let enrolled = started.elapsed();
    mesh.assign("echo", "n2", true);
    assert!(
        wait_until(LONG, || module_pid(mesh, "n2", "echo").is_some()),
        "echo on n2 never ran with server 1 down; host n2:\n{}",
        host.log()
    );
    mesh.server_mut(1)
        .start_again()
        .expect("server 1 starts again");
    Row {
        fault: "one broker server down: an enrolment and an assignment",
        sent: 0,
        recorded: 0,
        duplicated: 0,
        note: format!(
            "n2 enrolled {:.1} s after mesh-1 was lost, and ran echo, through the other two servers",
            enrolled.as_secs_f64()
        ),
    }
}

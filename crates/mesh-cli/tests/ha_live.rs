//! The mesh outlives any one machine, live: controllers sharing one
//! PostgreSQL store (one active, the others standing by), faulted under
//! streams of reports. Each fault is a row of one table — reports sent,
//! recorded, lost, recorded twice — closed by one line:
//! `failover: N faults, 0 reports lost, 0 recorded twice`.

#[path = "join_live/harness.rs"]
mod harness;
#[path = "join_live/report_stream.rs"]
mod report_stream;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use harness::{Backend, Daemon, Mesh, module_pid, wait_bound, wait_until};
use report_stream::{as_host, count, send_reports, send_reports_at, wait_count};

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

/// (report id, epoch) of every report `node` sent with ids `tag-…`.
async fn epochs(url: &str, node: &str, tag: &str) -> BTreeMap<String, Option<i64>> {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    let rows: Vec<(String, Option<i64>)> = sqlx::query_as(
        "SELECT report_id, epoch FROM reports WHERE node = $1 AND report_id LIKE $2",
    )
    .bind(node)
    .bind(format!("{tag}-%"))
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    rows.into_iter().collect()
}

/// The epoch of the lease as the store records it.
async fn lease_epoch(url: &str) -> i64 {
    let s = mesh_store::Store::open(url).await.unwrap();
    let r = s.lease_record().await.unwrap().expect("a lease was taken");
    s.close().await;
    r.epoch
}

fn signal(d: &Daemon, sig: libc::c_int) {
    // SAFETY: kill(2) on a child of this test, not yet reaped.
    unsafe { libc::kill(d.pid() as libc::pid_t, sig) };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_failover_table_loses_nothing_and_records_nothing_twice() {
    let mut rows = Vec::new();
    let mesh = Mesh::new(Backend::Postgres);
    let mut a = mesh.spawn_controller("controller a", LEASE, LOG);
    a.wait_log("controller running", LONG);
    mesh.register(&Mesh::examples());
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
    let _host = mesh.host("n1", Some(&token));
    let js = jetstream::new(mesh.observer().await);
    wait_bound(&js, &["n1"], LONG).await;
    let client = as_host(&mesh, "n1").await;

    rows.push(killed_mid_stream(&mesh, &mut a, &b, &b_http, &client).await);
    let a2 = mesh.spawn_controller("controller a again", LEASE, LOG);
    a2.wait_log("standing by", LONG);
    rows.push(frozen_past_its_lease(&mesh, &b, &a2, &client).await);

    println!("failover table:");
    println!(
        "  {:<52} {:>5} {:>9} {:>5} {:>6}  and",
        "fault", "sent", "recorded", "lost", "twice"
    );
    for r in &rows {
        println!(
            "  {:<52} {:>5} {:>9} {:>5} {:>6}  {}",
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
    // They answer the declaration echo's assignment made (1).
    send_reports_at(client, "n1", "s", 1, 0..SENT).await;
    let took = time_to_log(a2, "controller running", frozen);
    let new = lease_epoch(&mesh.store_url).await;
    signal(b, libc::SIGCONT);
    b.wait_log("stepping down", LONG);
    let (recorded, duplicated) = wait_count(&mesh.store_url, "n1", "s", SENT).await;
    if recorded < SENT {
        let tail = |d: &Daemon| {
            d.log()
                .lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .join("\n")
        };
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

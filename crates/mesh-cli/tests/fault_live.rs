//! Nothing lost, live: the store stopped under a stream of reports, the
//! controller killed mid-stream, bus objects deleted and the broker's
//! JetStream directory wiped, the broker restarted under running modules, a
//! host paused. Each fault is counted in one table: reports sent, recorded,
//! lost, duplicated.

#[path = "join_live/harness.rs"]
mod harness;
#[path = "join_live/report_stream.rs"]
mod report_stream;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use async_nats::jetstream;
use harness::{Backend, Mesh, wait_bound, wait_until};
use mesh_core::names::Name;
use report_stream::{as_host, count, send_reports, wait_count};

const LONG: Duration = Duration::from_secs(90);

/// fault → (sent, recorded, lost, duplicated), printed when the binary's
/// last table-writing test finishes.
static TABLE: Mutex<BTreeMap<&'static str, Row>> = Mutex::new(BTreeMap::new());

/// sent, recorded, lost, duplicated.
type Row = (usize, usize, usize, usize);

fn tally(fault: &'static str, sent: usize, recorded: usize, duplicated: usize) {
    let mut t = TABLE.lock().unwrap();
    t.insert(
        fault,
        (sent, recorded, sent.saturating_sub(recorded), duplicated),
    );
}

/// The report faults one after another (each its own mesh), then the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fault_table_loses_nothing_and_duplicates_nothing() {
    the_controller_killed_mid_stream_records_every_report_once().await;
    the_controller_killed_mid_stream_on_postgres_records_every_report_once().await;
    postgres_stopped_under_reports_keeps_them_until_it_is_back().await;
    past_the_store_window_a_report_is_let_go_and_logged().await;
    let t = TABLE.lock().unwrap();
    println!("fault table:");
    println!(
        "  {:<46} {:>5} {:>9} {:>5} {:>11}",
        "fault", "sent", "recorded", "lost", "duplicated"
    );
    for (f, (s, r, l, d)) in t.iter() {
        println!("  {f:<46} {s:>5} {r:>9} {l:>5} {d:>11}");
    }
    assert_eq!(t.len(), 4);
    assert!(
        t.values().all(|(_, _, lost, dup)| *lost == 0 && *dup == 0),
        "{t:?}"
    );
}

/// One enrolled host, nothing assigned: reports of sequence 0 are current.
async fn mesh_with_host(mut mesh: Mesh, extra: &[&str]) -> (Mesh, harness::Daemon) {
    mesh.start_controller_with(extra);
    let token = mesh.node_add("n1", "1h");
    let host = mesh.host("n1", Some(&token));
    let js = jetstream::new(mesh.observer().await);
    wait_bound(&js, &["n1"], LONG).await;
    (mesh, host)
}

/// Reports sent before the controller is killed.
const KILLED_MID_STREAM: usize = 5_000;

async fn the_controller_killed_mid_stream_records_every_report_once() {
    let (mut mesh, _host) = mesh_with_host(Mesh::new(Backend::Sqlite), &[]).await;
    let client = as_host(&mesh, "n1").await;
    // Enough that a controller recording them in batches is still taking
    // them when it is killed.
    send_reports(&client, "n1", "k", 0..KILLED_MID_STREAM).await;
    // Killed while it is taking them: some recorded, the rest in CONTROL.
    assert!(
        wait_count(&mesh.store_url, "n1", "k", 50).await.0 >= 50,
        "the controller never took reports"
    );
    let ctl = mesh.controller.as_mut().unwrap();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(ctl.pid() as i32, libc::SIGKILL) };
    ctl.wait_exit(Duration::from_secs(10));
    let before = count(&mesh.store_url, "n1", "k").await.0;
    mesh.start_controller();
    let (recorded, duplicated) = wait_count(&mesh.store_url, "n1", "k", KILLED_MID_STREAM).await;
    tally(
        "controller SIGKILLed mid-stream",
        KILLED_MID_STREAM,
        recorded,
        duplicated,
    );
    assert!(
        before < KILLED_MID_STREAM,
        "killed before the end ({before} recorded)"
    );
    assert_eq!((recorded, duplicated), (KILLED_MID_STREAM, 0));
}

async fn postgres_stopped_under_reports_keeps_them_until_it_is_back() {
    let cluster = mesh_testkit::PgCluster::start().unwrap();
    let db = cluster.create_database().unwrap();
    let (mesh, _host) = mesh_with_host(Mesh::with_store(Some(db)), &[]).await;
    let client = as_host(&mesh, "n1").await;
    cluster.stop().unwrap();
    send_reports(&client, "n1", "pg", 0..200).await;
    mesh.controller().wait_log("store window opened", LONG);
    cluster.start_again().unwrap();
    let (recorded, duplicated) = wait_count(&mesh.store_url, "n1", "pg", 200).await;
    tally(
        "PostgreSQL stopped while reports arrive",
        200,
        recorded,
        duplicated,
    );
    assert_eq!((recorded, duplicated), (200, 0));
    mesh.controller().wait_log("store window closed", LONG);
}

async fn past_the_store_window_a_report_is_let_go_and_logged() {
    let cluster = mesh_testkit::PgCluster::start().unwrap();
    let db = cluster.create_database().unwrap();
    let (mesh, _host) = mesh_with_host(Mesh::with_store(Some(db)), &["--store-window", "2s"]).await;
    let client = as_host(&mesh, "n1").await;
    cluster.stop().unwrap();
    send_reports(&client, "n1", "late", 0..50).await;
    // Each is let go once a delivery finds the window older than its bound.
    assert!(
        wait_until(LONG, || mesh
            .controller()
            .log()
            .matches("report let go")
            .count()
            >= 50),
        "not every overdue report was let go:\n{}",
        mesh.controller().log()
    );
    let log = mesh.controller().log();
    assert!(
        log.contains("node=n1") && log.contains("sequence=0"),
        "let go with node and sequence"
    );
    cluster.start_again().unwrap();
    // Reports arriving once the store answers again are recorded.
    mesh.controller().wait_log("store window closed", LONG);
    send_reports(&client, "n1", "after", 0..50).await;
    let (recorded, duplicated) = wait_count(&mesh.store_url, "n1", "after", 50).await;
    assert_eq!(
        (recorded, duplicated),
        (50, 0),
        "the rest recorded; controller log ends:\n{}",
        mesh.controller()
            .log()
            .lines()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        count(&mesh.store_url, "n1", "late").await.0,
        0,
        "the overdue ones were let go"
    );
    tally(
        "store window past its bound (50 let go)",
        50,
        recorded,
        duplicated,
    );
}

async fn the_controller_killed_mid_stream_on_postgres_records_every_report_once() {
    let (mut mesh, _host) = mesh_with_host(Mesh::new(Backend::Postgres), &[]).await;
    let client = as_host(&mesh, "n1").await;
    send_reports(&client, "n1", "kp", 0..500).await;
    assert!(wait_count(&mesh.store_url, "n1", "kp", 50).await.0 >= 50);
    let ctl = mesh.controller.as_mut().unwrap();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(ctl.pid() as i32, libc::SIGKILL) };
    ctl.wait_exit(Duration::from_secs(10));
    mesh.start_controller();
    let (recorded, duplicated) = wait_count(&mesh.store_url, "n1", "kp", 500).await;
    tally(
        "controller SIGKILLed mid-stream (PostgreSQL)",
        500,
        recorded,
        duplicated,
    );
    assert_eq!((recorded, duplicated), (500, 0));
}

/// A mesh with echo running on each of `names`, every host bound.
async fn mesh_running_echo(names: &[&str]) -> (Mesh, Vec<harness::Daemon>) {
    let (mesh, hosts) = Mesh::with_hosts(Backend::Sqlite, names).await;
    for n in names {
        mesh.assign("echo", n, true);
    }
    for n in names {
        wait_echo_heard(&mesh, n, "up").await;
    }
    (mesh, hosts)
}

/// Talks to echo on `node` until its `heard` event for `line` is in
/// EVENTS (the module is connected and its emits are stored).
async fn wait_echo_heard(mesh: &Mesh, node: &str, line: &str) {
    use std::io::{BufRead as _, BufReader, Write as _};
    let js = jetstream::new(mesh.observer().await);
    let addr_file = mesh.module_dir(node, "echo").join("work/echo.addr");
    let want = format!("{line}-{node}");
    for _ in 0..(LONG.as_millis() / 200) {
        let addr = std::fs::read_to_string(&addr_file).unwrap_or_default();
        if let Ok(mut s) = std::net::TcpStream::connect(addr.trim()) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = writeln!(s, "{want}");
            let mut answer = String::new();
            let _ = BufReader::new(s).read_line(&mut answer);
        }
        if let Ok(events) = js.get_stream("EVENTS").await
            && let Ok(m) = events
                .get_last_raw_message_by_subject("mesh.mod.echo.event.heard")
                .await
            && String::from_utf8_lossy(&m.payload).contains(&want)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("echo on {node} never emitted heard {want}");
}

/// The id of `node`'s newest report, if any.
async fn newest_report(url: &str, node: &str) -> i64 {
    let s = mesh_store::Store::open(url).await.unwrap();
    let r = s.latest_report(&Name::new(node).unwrap()).await.unwrap();
    s.close().await;
    r.map_or(0, |r| r.id)
}

async fn wait_report_after(url: &str, node: &str, after: i64) {
    for _ in 0..(LONG.as_millis() / 100) {
        if newest_report(url, node).await > after {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no report from {node} after report {after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restarted_under_running_modules_is_rejoined_by_every_host_and_module() {
    let names = ["n1", "n2", "n3"];
    let (mut mesh, hosts) = mesh_running_echo(&names).await;
    let pids: Vec<u32> = hosts.iter().map(|h| h.pid()).collect();
    let echo_pids = |mesh: &Mesh| -> Vec<Option<u32>> {
        names
            .iter()
            .map(|n| harness::module_pid(mesh, n, "echo"))
            .collect()
    };
    let echoes = echo_pids(&mesh);
    assert!(echoes.iter().all(Option::is_some), "{echoes:?}");
    let mut before = Vec::new();
    for n in names {
        before.push(newest_report(&mesh.store_url, n).await);
    }
    mesh.broker.restart().unwrap();
    for (n, b) in names.iter().zip(&before) {
        wait_report_after(&mesh.store_url, n, *b).await;
    }
    for n in names {
        wait_echo_heard(&mesh, n, "again").await;
    }
    // No host was restarted to get there, and no module (L135: a lost
    // broker costs the mesh its changes, never the services it runs).
    assert_eq!(hosts.iter().map(|h| h.pid()).collect::<Vec<_>>(), pids);
    assert!(pids.iter().all(|p| mesh_testkit::pid_alive(*p)));
    assert_eq!(echo_pids(&mesh), echoes, "a module was restarted");
    assert!(echoes.iter().flatten().all(|p| mesh_testkit::pid_alive(*p)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_objects_and_a_wiped_jetstream_directory_converge_on_the_next_start() {
    let names = ["n1", "n2"];
    let (mut mesh, _hosts) = mesh_running_echo(&names).await;
    let js = jetstream::new(mesh.observer().await);

    // 1. Streams and consumers deleted while the controller is down.
    assert!(mesh.controller.as_mut().unwrap().stop().success());
    for stream in ["CONTROL", "EVENTS", "NODES"] {
        js.delete_stream(stream).await.unwrap();
    }
    let mut before = Vec::new();
    for n in names {
        before.push(newest_report(&mesh.store_url, n).await);
    }
    mesh.start_controller();
    mesh.controller()
        .wait_log("declaration published again", LONG);
    wait_bound(&js, &names, LONG).await;
    for (n, b) in names.iter().zip(&before) {
        wait_report_after(&mesh.store_url, n, *b).await;
    }

    // 2. The broker's JetStream directory wiped.
    assert!(mesh.controller.as_mut().unwrap().stop().success());
    let store_dir = mesh.dir.join("jetstream");
    mesh.broker.stop_for(|| {
        std::fs::remove_dir_all(&store_dir).unwrap();
        std::fs::create_dir(&store_dir).unwrap();
    });
    let mut before = Vec::new();
    for n in names {
        before.push(newest_report(&mesh.store_url, n).await);
    }
    mesh.start_controller();
    let js = jetstream::new(mesh.observer().await);
    wait_bound(&js, &names, LONG).await;
    for (n, b) in names.iter().zip(&before) {
        wait_report_after(&mesh.store_url, n, *b).await;
    }
    for n in names {
        wait_echo_heard(&mesh, n, "wiped").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_host_goes_stale_then_down_and_is_ready_again_when_resumed() {
    let (mesh, host) = mesh_with_host(Mesh::new(Backend::Sqlite), &[]).await;
    let live = |m: &Mesh| {
        m.nodes()
            .into_iter()
            .find(|r| r["node"] == "n1")
            .map(|r| r["liveness"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    assert!(
        wait_until(LONG, || live(&mesh) == "ready"),
        "{}",
        live(&mesh)
    );
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(host.pid() as i32, libc::SIGSTOP) };
    assert!(
        wait_until(LONG, || live(&mesh) == "stale"),
        "{}",
        live(&mesh)
    );
    assert!(
        wait_until(LONG, || live(&mesh) == "down"),
        "{}",
        live(&mesh)
    );
    unsafe { libc::kill(host.pid() as i32, libc::SIGCONT) };
    assert!(
        wait_until(LONG, || live(&mesh) == "ready"),
        "{}",
        live(&mesh)
    );
}

//! Nothing lost, live: the store stopped under a stream of reports, the
//! controller killed mid-stream, bus objects deleted and the broker's
//! JetStream directory wiped, the broker restarted under running modules, a
//! host paused. Each fault is counted in one table: reports sent, recorded,
//! lost, duplicated.

#[path = "join_live/harness.rs"]
mod harness;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use async_nats::jetstream;
use harness::{Backend, Mesh, wait_bound, wait_until};
use mesh_core::names::Name;
use mesh_core::report::Report;

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
    eprintln!("fault table:");
    eprintln!(
        "  {:<44} {:>5} {:>9} {:>5} {:>11}",
        "fault", "sent", "recorded", "lost", "duplicated"
    );
    for (f, (s, r, l, d)) in t.iter() {
        eprintln!("  {f:<44} {s:>5} {r:>9} {l:>5} {d:>11}");
    }
}

/// A client with host n's own key (from its state dir).
async fn as_host(mesh: &Mesh, node: &str) -> async_nats::Client {
    let seed = std::fs::read_to_string(mesh.host_dir(node).join("nkey.seed")).unwrap();
    let principal = format!("host_{node}");
    mesh_bus::connect(&mesh.bus(&principal, seed.trim(), Some(format!("_INBOX.{principal}"))))
        .await
        .unwrap()
}

/// Publishes `n` reports from `node` with ids `<tag>-<i>`, each confirmed
/// stored in CONTROL.
async fn send_reports(
    client: &async_nats::Client,
    node: &str,
    tag: &str,
    range: std::ops::Range<usize>,
) {
    let js = jetstream::new(client.clone());
    let mut acks = Vec::new();
    for i in range {
        let r = Report {
            id: format!("{tag}-{i}"),
            node: Name::new(node).unwrap(),
            sequence: 0,
            modules: vec![],
            refused: None,
        };
        acks.push(
            js.publish(format!("mesh.control.report.{node}"), r.to_json().into())
                .await
                .unwrap(),
        );
    }
    for a in acks {
        a.await.expect("CONTROL stores the report");
    }
}

/// How many of `node`'s recorded reports carry an id starting `tag-`, and
/// how many of those ids were recorded more than once.
async fn count(url: &str, node: &str, tag: &str) -> (usize, usize) {
    let s = mesh_store::Store::open(url).await.unwrap();
    let all = s.reports(&Name::new(node).unwrap(), 100_000).await.unwrap();
    s.close().await;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for r in all {
        if let Some(id) = r
            .report
            .report_id
            .filter(|i| i.starts_with(&format!("{tag}-")))
        {
            *seen.entry(id).or_default() += 1;
        }
    }
    (seen.len(), seen.values().filter(|n| **n > 1).count())
}

async fn wait_count(url: &str, node: &str, tag: &str, want: usize) -> (usize, usize) {
    let mut got = (0, 0);
    for _ in 0..(LONG.as_millis() / 100) {
        got = count(url, node, tag).await;
        if got.0 >= want {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    got
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_killed_mid_stream_records_every_report_once() {
    let (mut mesh, _host) = mesh_with_host(Mesh::new(Backend::Sqlite), &[]).await;
    let client = as_host(&mesh, "n1").await;
    send_reports(&client, "n1", "k", 0..500).await;
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
    let (recorded, duplicated) = wait_count(&mesh.store_url, "n1", "k", 500).await;
    tally("controller SIGKILLed mid-stream", 500, recorded, duplicated);
    assert!(before < 500, "killed before the end ({before} recorded)");
    assert_eq!((recorded, duplicated), (500, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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

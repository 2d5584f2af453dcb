//! One mesh life, the same body on both buses (DESIGN "the bus seam"):
//! `mesh init --bus nats|amqp`, the broker on the genesis's own
//! configuration (nats-server, or RabbitMQ from the environment the genesis
//! names), a real `mesh controller`, a real `mesh host` enrolled by token;
//! then a module declared, run and reported, a newer declaration
//! superseding it, the controller restarted and the broker restarted, the
//! host reporting through each. Then the faults of the nothing-lost table,
//! each on both buses: the controller killed mid-stream, PostgreSQL stopped
//! under reports, the store window's bound passed. What differs between
//! the buses is in [`Bus`] alone.

#[path = "join_live/harness.rs"]
mod harness;
#[path = "bus_live/mesh.rs"]
mod mesh;
#[path = "join_live/report_stream.rs"]
mod report_stream;

use harness::wait_until;
use mesh::{BusMesh, LONG, said};

/// A module every machine can run: a shell that sleeps, and says which
/// version of it runs (its environment differs between versions).
fn sleeper(version: &str) -> String {
    format!(
        r#"[module]
name = "sleeper"
description = "sleeps; declared, run and reported on either bus"

[run]
command = ["sh", "-c", "exec sleep 3600"]
env = {{ SLEEPER_VERSION = "{version}" }}
"#
    )
}

/// Reports `<tag>-<i>` of `node` answering declaration 0 (nothing
/// assigned yet).
async fn send_reports(
    bus: &mesh_bus::seam::Bus,
    node: &str,
    tag: &str,
    range: std::ops::Range<usize>,
) {
    mesh::send_reports_at(bus, node, tag, 0, range).await
}

fn a_mesh_lives_on(kind: &str) {
    let mut mesh = BusMesh::new(kind);
    mesh.start_controller();
    // Enrolment: the token's principal, the request, the signed answer,
    // the host's own key admitted.
    mesh.join("n1");
    mesh.controller().wait_log("node enrolled node=n1", LONG);

    // Declaration, run, report.
    mesh.register_as("sleeper", &sleeper("one"));
    mesh.ok(&["assign", "sleeper", "n1"]);
    assert!(
        wait_until(LONG, || mesh.state("n1", "sleeper").as_deref()
            == Some("running")),
        "sleeper never reported running on {kind}; host log:\n{}\ncontroller log:\n{}",
        mesh.host_log(),
        mesh.controller().log()
    );
    assert!(
        wait_until(LONG, || mesh.running_version("n1").as_deref()
            == Some("one")),
        "{kind}: {:?}",
        mesh.running_version("n1")
    );

    // A newer declaration supersedes it: the module runs as declared now.
    mesh.register_as("sleeper", &sleeper("two"));
    assert!(
        wait_until(LONG, || mesh.running_version("n1").as_deref()
            == Some("two")),
        "the newer declaration never ran on {kind}: {:?}; host log:\n{}",
        mesh.running_version("n1"),
        mesh.host_log()
    );

    // The controller restarted: the host goes on, its reports are heard by
    // the new one.
    mesh.controller.take().unwrap().stop();
    mesh.start_controller();
    let reports = said(mesh.controller(), "report recorded node=n1");
    mesh.register_as("sleeper", &sleeper("three"));
    assert!(
        wait_until(LONG, || mesh.running_version("n1").as_deref()
            == Some("three")),
        "after a controller restart on {kind}: {:?}",
        mesh.running_version("n1")
    );
    assert!(
        wait_until(LONG, || said(mesh.controller(), "report recorded node=n1")
            > reports),
        "the restarted controller heard no report on {kind}"
    );

    // The broker restarted: the host and the controller connect again,
    // and the module keeps running undisturbed.
    let pid_before =
        std::fs::read_to_string(mesh.tmp.path().join("host-n1/modules/sleeper/pid")).unwrap();
    mesh.restart_broker();
    mesh.register_as("sleeper", &sleeper("four"));
    assert!(
        wait_until(LONG, || mesh.running_version("n1").as_deref()
            == Some("four")),
        "after a broker restart on {kind}: {:?}; host log:\n{}\ncontroller log:\n{}",
        mesh.running_version("n1"),
        mesh.host_log(),
        mesh.controller().log()
    );
    assert_ne!(pid_before, "", "{kind}");
    assert!(
        wait_until(LONG, || mesh.state("n1", "sleeper").as_deref()
            == Some("running")),
        "{kind}"
    );
}

#[test]
fn a_mesh_lives_on_nats() {
    a_mesh_lives_on("nats");
}

#[test]
fn a_mesh_lives_on_amqp() {
    a_mesh_lives_on("amqp");
}

/// sent, recorded, lost, duplicated.
type Row = (usize, usize, usize, usize);

fn row(sent: usize, (recorded, duplicated): (usize, usize)) -> Row {
    (sent, recorded, sent.saturating_sub(recorded), duplicated)
}

/// A mesh on `kind` with n1 enrolled and nothing assigned: reports of
/// sequence 0 are current.
fn enrolled(kind: &str, db: Option<mesh_testkit::TestDatabase>, args: &[&str]) -> BusMesh {
    let mut mesh = BusMesh::with_store(kind, db, args);
    mesh.start_controller();
    mesh.join("n1");
    mesh.hosts[0].wait_log("bound the node's consumer", LONG);
    mesh
}

/// Reports sent before the controller is killed.
const KILLED_MID_STREAM: usize = 2_000;

async fn controller_killed_mid_stream(kind: &str) -> Row {
    let mut mesh = enrolled(kind, None, &[]);
    let bus = mesh.as_host("n1").await;
    send_reports(&bus, "n1", "k", 0..KILLED_MID_STREAM).await;
    let url = mesh.store_url.clone();
    assert!(
        report_stream::wait_count(&url, "n1", "k", 50).await.0 >= 50,
        "{kind}: the controller never took reports"
    );
    mesh.controller.as_mut().unwrap().kill();
    let before = report_stream::count(&url, "n1", "k").await.0;
    mesh.start_controller();
    let got = report_stream::wait_count(&url, "n1", "k", KILLED_MID_STREAM).await;
    assert!(
        before < KILLED_MID_STREAM,
        "{kind}: killed before the end ({before} recorded)"
    );
    bus.close().await;
    row(KILLED_MID_STREAM, got)
}

async fn postgres_stopped_under_reports(kind: &str) -> Row {
    let cluster = mesh_testkit::PgCluster::start().unwrap();
    let mesh = enrolled(kind, Some(cluster.create_database().unwrap()), &[]);
    let bus = mesh.as_host("n1").await;
    cluster.stop().unwrap();
    send_reports(&bus, "n1", "pg", 0..200).await;
    mesh.controller().wait_log("store window opened", LONG);
    cluster.start_again().unwrap();
    let got = report_stream::wait_count(&mesh.store_url, "n1", "pg", 200).await;
    mesh.controller().wait_log("store window closed", LONG);
    bus.close().await;
    row(200, got)
}

/// Each overdue report let go and logged; the rest, sent once the store is
/// back, recorded. The row counts the rest.
async fn past_the_store_window(kind: &str) -> Row {
    let cluster = mesh_testkit::PgCluster::start().unwrap();
    let mesh = enrolled(
        kind,
        Some(cluster.create_database().unwrap()),
        &["--store-window", "2s"],
    );
    let bus = mesh.as_host("n1").await;
    cluster.stop().unwrap();
    send_reports(&bus, "n1", "late", 0..50).await;
    assert!(
        wait_until(LONG, || said(mesh.controller(), "report let go") >= 50),
        "{kind}: not every overdue report was let go:\n{}",
        mesh.controller().log()
    );
    cluster.start_again().unwrap();
    mesh.controller().wait_log("store window closed", LONG);
    send_reports(&bus, "n1", "after", 0..50).await;
    let got = report_stream::wait_count(&mesh.store_url, "n1", "after", 50).await;
    assert_eq!(
        report_stream::count(&mesh.store_url, "n1", "late").await.0,
        0,
        "{kind}: the overdue ones were let go"
    );
    bus.close().await;
    row(50, got)
}

/// The faults, each on both buses, in one table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fault_table_loses_nothing_on_either_bus() {
    let mut table: Vec<(&str, &str, Row)> = Vec::new();
    for kind in ["nats", "amqp"] {
        table.push((
            kind,
            "controller SIGKILLed mid-stream",
            controller_killed_mid_stream(kind).await,
        ));
        table.push((
            kind,
            "PostgreSQL stopped while reports arrive",
            postgres_stopped_under_reports(kind).await,
        ));
        table.push((
            kind,
            "store window past its bound (50 let go)",
            past_the_store_window(kind).await,
        ));
    }
    println!("fault table, by bus:");
    println!(
        "  {:<5} {:<42} {:>5} {:>9} {:>5} {:>11}",
        "bus", "fault", "sent", "recorded", "lost", "duplicated"
    );
    for (kind, fault, (s, r, l, d)) in &table {
        println!("  {kind:<5} {fault:<42} {s:>5} {r:>9} {l:>5} {d:>11}");
    }
    assert!(
        table
            .iter()
            .all(|(_, _, (_, _, lost, dup))| *lost == 0 && *dup == 0),
        "{table:?}"
    );
}

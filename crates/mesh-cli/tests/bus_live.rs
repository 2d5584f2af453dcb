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
#[path = "join_live/report_stream.rs"]
mod report_stream;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use harness::{Daemon, mesh_bin, out_text, wait_until};
use mesh_controller::Genesis;

const LONG: Duration = Duration::from_secs(60);

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

/// The broker of one mesh, on its own bus.
enum Bus {
    Nats(mesh_testkit::Broker),
    Amqp(mesh_testkit::RabbitMq),
}

/// A mesh on this machine. Field order is drop order: processes first.
struct BusMesh {
    hosts: Vec<Daemon>,
    controller: Option<Daemon>,
    bus: Bus,
    dir: PathBuf,
    store_url: String,
    controller_args: Vec<String>,
    _db: Option<mesh_testkit::TestDatabase>,
    tmp: tempfile::TempDir,
}

impl BusMesh {
    fn new(kind: &str) -> BusMesh {
        BusMesh::with_store(kind, None, &[])
    }

    /// On `db` (SQLite in its directory when none), the controller given
    /// `controller_args` more.
    fn with_store(
        kind: &str,
        db: Option<mesh_testkit::TestDatabase>,
        controller_args: &[&str],
    ) -> BusMesh {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ctl");
        let store_url = match &db {
            None => format!("sqlite://{}", dir.join("mesh.db").display()),
            Some(db) => db.url().to_string(),
        };
        let port = || mesh_testkit::broker::free_port().unwrap().to_string();
        let mut args: Vec<String> = [
            "init",
            "--dir",
            dir.to_str().unwrap(),
            "--store",
            &store_url,
            "--bus",
            kind,
            "--port",
            &port(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if kind == "amqp" {
            for flag in ["--management-port", "--epmd-port", "--dist-port"] {
                args.extend([flag.to_string(), port()]);
            }
        }
        let out = Command::new(mesh_bin()).args(&args).output().unwrap();
        assert!(out.status.success(), "init: {}", out_text(&out));
        let genesis = Genesis::open(&dir).unwrap();
        let bus = match genesis.rabbitmq_env() {
            None => Bus::Nats(
                mesh_testkit::Broker::start(
                    &genesis.broker_configs()[0],
                    &tmp.path().join("nats.log"),
                )
                .expect("nats-server starts on the genesis configuration"),
            ),
            Some(env) => Bus::Amqp(
                mesh_testkit::RabbitMq::start_with_env(
                    env.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
                    genesis.amqp_ports.unwrap().epmd,
                )
                .expect("RabbitMQ starts in the genesis's environment"),
            ),
        };
        BusMesh {
            hosts: Vec::new(),
            controller: None,
            bus,
            dir,
            store_url,
            controller_args: controller_args.iter().map(|a| a.to_string()).collect(),
            _db: db,
            tmp,
        }
    }

    fn start_controller(&mut self) {
        let log = self.tmp.path().join(format!("controller-{}.log", nanos()));
        let mut args = vec![
            "controller",
            "--dir",
            self.dir.to_str().unwrap(),
            "--store",
            &self.store_url,
            "--no-http",
        ];
        args.extend(self.controller_args.iter().map(String::as_str));
        let d = Daemon::spawn("controller", &args, log, self.tmp.path());
        d.wait_log("controller running", LONG);
        self.controller = Some(d);
    }

    fn controller(&self) -> &Daemon {
        self.controller.as_ref().unwrap()
    }

    fn mesh(&self, args: &[&str]) -> Output {
        harness::mesh_in(&self.dir, &self.store_url, self.tmp.path(), args)
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.mesh(args);
        assert!(o.status.success(), "mesh {args:?}: {}", out_text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// `mesh host` enrolled by a fresh token for `node`.
    fn join(&mut self, node: &str) {
        let token = self.ok(&["node", "add", node, "--ttl", "10m"]);
        let state = self.tmp.path().join(format!("host-{node}"));
        let log = self.tmp.path().join(format!("host-{node}.log"));
        let args = [
            "host",
            "--state",
            state.to_str().unwrap(),
            "--token",
            token.trim(),
        ];
        let d = Daemon::spawn(&format!("host {node}"), &args, log, self.tmp.path());
        d.wait_log("enrolled", LONG);
        self.hosts.push(d);
    }

    fn register(&self, manifest: &str) {
        let dir = self.tmp.path().join(format!("catalogue-{}", nanos()));
        std::fs::create_dir_all(dir.join("sleeper")).unwrap();
        std::fs::write(dir.join("sleeper/mesh.toml"), manifest).unwrap();
        self.ok(&["catalogue", "register", dir.to_str().unwrap()]);
    }

    /// `module`'s state on `node` as the records say (the host's report).
    fn state(&self, node: &str, module: &str) -> Option<String> {
        let out = self.mesh(&["modules", "--output", "json"]);
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).ok()?;
        rows.iter()
            .find(|r| r["node"] == node && r["module"] == module)
            .and_then(|r| r["state"].as_str().map(String::from))
    }

    /// The environment the module's process runs with, as the host wrote
    /// its pid: the version it was declared.
    fn running_version(&self, node: &str) -> Option<String> {
        let dir = self.tmp.path().join(format!("host-{node}/modules/sleeper"));
        let pid: u32 = std::fs::read_to_string(dir.join("pid"))
            .ok()?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        environ
            .split(|b| *b == 0)
            .filter_map(|kv| std::str::from_utf8(kv).ok())
            .find_map(|kv| kv.strip_prefix("SLEEPER_VERSION=").map(String::from))
    }

    fn restart_broker(&mut self) {
        match &mut self.bus {
            Bus::Nats(b) => b.restart().expect("nats-server starts again"),
            Bus::Amqp(r) => {
                r.stop();
                r.boot().expect("RabbitMQ starts again");
            }
        }
    }

    fn host_log(&self) -> String {
        self.hosts[0].log()
    }

    /// A connection as `node`'s host, with its own key, to whichever bus.
    async fn as_host(&self, node: &str) -> mesh_bus::seam::Bus {
        let genesis = Genesis::open(&self.dir).unwrap();
        let seed = std::fs::read_to_string(self.tmp.path().join(format!("host-{node}/nkey.seed")))
            .unwrap();
        let principal = format!("host_{node}");
        let config = mesh_bus::BusConfig {
            url: genesis.local_url(),
            inbox_prefix: Some(format!("_INBOX.{principal}")),
            principal,
            credential: mesh_bus::ClientCredential::NKey(mesh_bus::Secret::new(seed.trim())),
            ca_file: None,
            pin: Some(mesh_bus::CertPin::from_hex(&genesis.cert_sha256).unwrap()),
        };
        mesh_bus::seam::Bus::connect(&config).await.unwrap()
    }
}

/// Reports `<tag>-<i>` of `node` answering declaration 0, each confirmed
/// kept by the bus (a JetStream ack, a publisher confirm), published
/// together in batches.
async fn send_reports(
    bus: &mesh_bus::seam::Bus,
    node: &str,
    tag: &str,
    range: std::ops::Range<usize>,
) {
    let subject = format!("mesh.control.report.{node}");
    let all: Vec<usize> = range.collect();
    for batch in all.chunks(256) {
        let sent = batch.iter().map(|i| {
            let r = mesh_core::report::Report {
                id: format!("{tag}-{i}"),
                node: mesh_core::names::Name::new(node).unwrap(),
                sequence: 0,
                modules: vec![],
                refused: None,
                address: None,
                spare_keys: Vec::new(),
                amqp_hashes: Default::default(),
            };
            let subject = subject.clone();
            async move { bus.publish_stored(&subject, &r.to_json()).await }
        });
        for r in futures::future::join_all(sent).await {
            r.expect("the bus keeps the report");
        }
    }
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Counted in the controller's log: how often `needle` was said.
fn said(d: &Daemon, needle: &str) -> usize {
    d.log().matches(needle).count()
}

fn a_mesh_lives_on(kind: &str) {
    let mut mesh = BusMesh::new(kind);
    mesh.start_controller();
    // Enrolment: the token's principal, the request, the signed answer,
    // the host's own key admitted.
    mesh.join("n1");
    mesh.controller().wait_log("node enrolled node=n1", LONG);

    // Declaration, run, report.
    mesh.register(&sleeper("one"));
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
    mesh.register(&sleeper("two"));
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
    mesh.register(&sleeper("three"));
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
    mesh.register(&sleeper("four"));
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

//! A clustered bus over three machines, as the README's "Several machines"
//! sets one up: a server and a controller on each machine, PostgreSQL on
//! machine 2, one genesis copied to each. The machine with the active
//! controller and CONTROL's leader is cut off from the other two while
//! 2,000 reports arrive.
//!
//! The machines share this test's filesystem, so each copy of the genesis
//! lives in a directory of its own and its servers' configurations are
//! pointed at it; on real machines the copies share one path.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use mesh_bus::{BusConfig, CertPin, ClientCredential, Secret};
use mesh_testkit::{Machines, PgCluster};

use crate::Row;
use crate::fleet::{Proc, mesh_bin, spawn_in, text, wait_until};
use crate::report_stream::{
    count, epochs, eventually, leader_of, lease_epoch, send_reports_retrying, wait_count,
};

const LONG: Duration = Duration::from_secs(90);
const REPORTS: usize = 2_000;
/// Every server's client port (each machine has its own ports).
const PORT: u16 = 4222;

/// What the row counted: reports sent, recorded, recorded twice.
pub struct Counted {
    pub rows: Vec<Row>,
    pub faults: usize,
    pub sent: usize,
    pub recorded: usize,
    pub twice: usize,
}

/// The mesh's processes, dropped before the machines and the store.
struct Cluster {
    host: Option<Proc>,
    controllers: Vec<Proc>,
    /// Held: they end with the cluster.
    _servers: Vec<Proc>,
    pg: PgCluster,
    kit: Machines,
    /// Machine i's copy of the genesis.
    dirs: Vec<PathBuf>,
    tmp: tempfile::TempDir,
}

impl Cluster {
    /// The last lines of every server's and controller's log: what a
    /// failed step is explained by.
    fn tails(&self) -> String {
        self._servers
            .iter()
            .chain(&self.controllers)
            .map(|p| {
                let log = p.log();
                let lines: Vec<&str> = log.lines().collect();
                let tail = lines[lines.len().saturating_sub(15)..].join("\n");
                format!("--- {}:\n{tail}", p.name)
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn addr(&self, i: usize) -> String {
        self.kit.machine(i).addr.to_string()
    }

    /// `mesh ARGS --dir <machine i's copy>` run in machine `i`.
    fn mesh(&self, i: usize, args: &[&str]) -> String {
        let out = self
            .kit
            .machine(i)
            .command(mesh_bin())
            .args(args)
            .arg("--dir")
            .arg(&self.dirs[i])
            .env_remove("MESH_STORE")
            .env_remove("MESH_STORE_FILE")
            .output()
            .unwrap();
        assert!(out.status.success(), "mesh {args:?}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A bus configuration as `principal` with `seed`, every server's URL
    /// in machine order.
    fn bus(&self, principal: &str, seed: &str) -> BusConfig {
        let fingerprint =
            mesh_bus::fingerprint_of_pem_file(&self.dirs[0].join("broker/cert.pem")).unwrap();
        let urls: Vec<String> = (0..3)
            .map(|i| format!("tls://{}:{PORT}", self.addr(i)))
            .collect();
        BusConfig {
            url: urls.join(","),
            principal: principal.into(),
            credential: ClientCredential::NKey(Secret::new(seed.trim())),
            ca_file: None,
            inbox_prefix: Some(format!("_INBOX.{principal}")),
            pin: Some(CertPin::from_hex(&fingerprint).unwrap()),
        }
    }
}

/// Three machines, each a server and a controller, PostgreSQL on machine
/// 2, node n1's host on machine 1; the controller on machine 0 active.
fn start() -> Cluster {
    let kit = Machines::new(3).unwrap_or_else(|e| panic!("{e}"));
    let tmp = tempfile::tempdir().unwrap();
    let db = kit.machine(2);
    let pg = db
        .within(|| PgCluster::start_on(db.addr.into(), "10.77.0.0/24"))
        .unwrap()
        .expect("PostgreSQL on machine 2");
    let url_file = tmp.path().join("store.url");
    mesh_files_private(&url_file, &pg.url_on("postgres").unwrap());
    let dirs: Vec<PathBuf> = (0..3).map(|i| tmp.path().join(format!("m{i}"))).collect();
    let addrs: Vec<String> = (0..3).map(|i| kit.machine(i).addr.to_string()).collect();
    let out = kit
        .machine(0)
        .command(mesh_bin())
        .args([
            "init",
            "--dir",
            dirs[0].to_str().unwrap(),
            "--replicas",
            "3",
        ])
        .args(addrs.iter().flat_map(|a| ["--address", a.as_str()]))
        .args(["--port", &PORT.to_string()])
        .arg("--store-file")
        .arg(&url_file)
        .env_remove("MESH_STORE")
        .env_remove("MESH_STORE_FILE")
        .output()
        .unwrap();
    assert!(out.status.success(), "init: {}", text(&out));
    for (i, dir) in dirs.iter().enumerate().skip(1) {
        copy_genesis(&dirs[0], dir, i + 1);
    }
    let nats = mesh_testkit::nats_server_binary().unwrap();
    let servers: Vec<Proc> = (0..3)
        .map(|i| {
            let conf = dirs[i].join(format!("broker/nats-{}.conf", i + 1));
            spawn_in(
                kit.machine(i),
                tmp.path(),
                &format!("nats-{}", i + 1),
                &nats,
                &["-c", conf.to_str().unwrap()],
                None,
            )
        })
        .collect();
    for s in &servers {
        s.wait_log("Server is ready", LONG);
    }
    let controller = |i: usize| {
        spawn_in(
            kit.machine(i),
            tmp.path(),
            &format!("controller-{i}"),
            Path::new(mesh_bin()),
            &[
                "controller",
                "--dir",
                dirs[i].to_str().unwrap(),
                "--no-http",
                "--lease",
                "3s",
            ],
            None,
        )
    };
    let first = controller(0);
    first.wait_log("controller running", LONG);
    let controllers = vec![first, controller(1), controller(2)];
    for c in &controllers[1..] {
        c.wait_log("standing by", LONG);
    }
    let mut cluster = Cluster {
        host: None,
        controllers,
        _servers: servers,
        pg,
        kit,
        dirs,
        tmp,
    };
    let token = cluster.mesh(0, &["node", "add", "n1", "--ttl", "10m"]);
    let state = cluster.tmp.path().join("host-n1");
    let advertise = cluster.addr(1);
    let host = spawn_in(
        cluster.kit.machine(1),
        cluster.tmp.path(),
        "host-n1",
        Path::new(mesh_bin()),
        &[
            "host",
            "--state",
            state.to_str().unwrap(),
            "--advertise",
            &advertise,
            "--token",
            "-",
        ],
        Some(token.trim()),
    );
    host.wait_log("enrolled as node n1", LONG);
    cluster.host = Some(host);
    cluster
}

fn mesh_files_private(path: &Path, text: &str) {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    writeln!(f, "{text}").unwrap();
}

/// `from` copied to `to` (as `scp -r .mesh` to another machine), server
/// `n`'s configuration pointed at the copy: its JetStream directory, its
/// pid file (what the copy's controller signals) and its users file.
fn copy_genesis(from: &Path, to: &Path, n: usize) {
    let ok = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(ok.success(), "cp -a {} {}", from.display(), to.display());
    let conf = to.join(format!("broker/nats-{n}.conf"));
    let text = std::fs::read_to_string(&conf).unwrap();
    let moved = text.replace(
        &format!("{}/", from.display()),
        &format!("{}/", to.display()),
    );
    assert_ne!(text, moved, "{} names its directory", conf.display());
    std::fs::write(&conf, moved).unwrap();
}

/// Asks CONTROL's leader to step down until server 1 leads it.
async fn lead_from_server_1(client: &async_nats::Client, js: &jetstream::Context) {
    let deadline = Instant::now() + LONG;
    loop {
        let leader = leader_of(js, "CONTROL").await.map(|l| l.0);
        if leader == Some(1) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "CONTROL never led by mesh-1 (now {leader:?})"
        );
        if leader.is_some() {
            let _ = client
                .request("$JS.API.STREAM.LEADER.STEPDOWN.CONTROL", "".into())
                .await;
        }
        let moved = Instant::now();
        while moved.elapsed() < Duration::from_secs(10)
            && leader_of(js, "CONTROL").await.map(|l| l.0) == leader
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// A client as `cfg` says, through the servers in order when `in_order`.
/// Tried again as a host tries (a server reloading its users file at that
/// instant may refuse a key it holds before and after), for 10 s.
async fn connect(cluster: &Cluster, cfg: BusConfig, in_order: bool) -> async_nats::Client {
    let started = Instant::now();
    loop {
        let tried = mesh_bus::connect_with(&cfg, |o| match in_order {
            true => o.retain_servers_order(),
            false => o,
        })
        .await;
        match tried {
            Ok(client) => return client,
            Err(e) if started.elapsed() > Duration::from_secs(10) => panic!(
                "{} did not connect: {e:?}\n{}",
                cfg.principal,
                cluster.tails()
            ),
            Err(e) => eprintln!("{} refused, trying again: {e}", cfg.principal),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Which of `controllers` logged `needle` first (polled).
fn first_to_log(controllers: &[Proc], needle: &str, within: Duration) -> Option<usize> {
    let mut found = None;
    wait_until(within, || {
        found = controllers.iter().position(|c| c.log().contains(needle));
        found.is_some()
    });
    found
}

pub fn a_partition_isolating_the_active_side() -> Counted {
    let started = Instant::now();
    let mut rows = Vec::new();
    let cluster = start();
    rows.push(Row {
        what: "cluster: 3 servers on 3 machines, PostgreSQL on 2, n1 enrolled".into(),
        took: started.elapsed(),
    });
    let local = cluster.pg.url("postgres");
    let rt = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    };
    // The test's own clients (a reporter, an observer, the store's
    // counts) run inside machine 2: on the majority side throughout.
    let counted = cluster
        .kit
        .machine(2)
        .within(|| rt().block_on(partitioned(&cluster, &local, &mut rows)))
        .unwrap();
    Counted { rows, ..counted }
}

async fn partitioned(cluster: &Cluster, store: &str, rows: &mut Vec<Row>) -> Counted {
    let seed = std::fs::read_to_string(cluster.dirs[0].join("controller/nkey.seed")).unwrap();
    let observer = connect(cluster, cluster.bus("controller", &seed), false).await;
    let js = jetstream::new(observer.clone());
    lead_from_server_1(&observer, &js).await;

    // Reports as n1's host sends them, through server 1 first: cut off
    // with it, the reporter must notice and move to another server.
    let host_seed = std::fs::read_to_string(cluster.tmp.path().join("host-n1/nkey.seed")).unwrap();
    let reporter = connect(cluster, cluster.bus("host_n1", &host_seed), true).await;
    let sequence = {
        let s = mesh_store::Store::open(store).await.unwrap();
        let d = s
            .latest_declaration(&mesh_core::names::Name::new("n1").unwrap())
            .await
            .unwrap();
        s.close().await;
        d.map_or(0, |d| u64::try_from(d.version).unwrap())
    };
    let old = lease_epoch(store).await;
    let sent = Arc::new(AtomicUsize::new(0));
    let sending = tokio::spawn(send_reports_retrying(
        reporter,
        "n1",
        "p",
        sequence,
        REPORTS,
        sent.clone(),
    ));
    while sent.load(Ordering::SeqCst) < REPORTS / 5 {
        assert!(!sending.is_finished(), "the reports ended early");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let at_cut = sent.load(Ordering::SeqCst);
    cluster.kit.partition(&[0], &[1, 2]).unwrap();
    let cut = Instant::now();

    // The majority side takes over.
    let majority = &cluster.controllers[1..];
    let took_over = first_to_log(majority, "controller running", LONG).unwrap_or_else(|| {
        panic!(
            "no controller of machines 1 and 2 took over; machine 1's:\n{}",
            majority[0].log()
        )
    }) + 1;
    let takeover = cut.elapsed();
    let new = lease_epoch(store).await;
    assert!(new > old, "the epoch moved ({old} → {new})");
    let old_writes = |by: std::collections::BTreeMap<String, Option<i64>>| {
        by.values().filter(|e| **e == Some(old)).count()
    };
    let old_at_takeover = old_writes(epochs(store, "n1", "p").await);
    let retries = sending.await.unwrap();
    let (recorded, twice) = wait_count(store, "n1", "p", REPORTS).await;
    rows.push(Row {
        what: format!(
            "machine 0 (active, CONTROL's leader) cut off after {at_cut} reports: controller {took_over} active"
        ),
        took: takeover,
    });
    rows.push(Row {
        what: format!(
            "{REPORTS} sent ({retries} retried), {recorded} recorded, {twice} twice; epoch {old} → {new}"
        ),
        took: cut.elapsed(),
    });

    // Healed: the isolated controller finds the lease moved and stands
    // by, writing nothing; server 1 is current in CONTROL's group again.
    cluster.kit.heal().unwrap();
    let healed = Instant::now();
    cluster.controllers[0].wait_log("stepping down", LONG);
    let rejoined = eventually(|| async {
        leader_of(&js, "CONTROL")
            .await
            .is_some_and(|(_, peers)| peers.iter().any(|(n, current)| n == "mesh-1" && *current))
    })
    .await;
    assert!(rejoined, "mesh-1 never current in CONTROL's group again");
    let status = cluster.mesh(1, &["status"]);
    let active_pid = cluster.controllers[took_over].pid();
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("lease ") && l.contains(&format!("pid {active_pid}"))),
        "`mesh status` on machine 1 names controller {took_over}:\n{status}"
    );
    let (again, _) = count(store, "n1", "p").await;
    let old_at_end = old_writes(epochs(store, "n1", "p").await);
    assert_eq!(
        old_at_end, old_at_takeover,
        "the isolated controller's writes landed after the takeover"
    );
    rows.push(Row {
        what: format!(
            "healed: controller 0 stands by, mesh-1 current again; {} written under epoch {old} after the takeover",
            old_at_end - old_at_takeover
        ),
        took: healed.elapsed(),
    });
    assert_eq!((recorded, twice, again), (REPORTS, 0, REPORTS));
    Counted {
        rows: Vec::new(),
        faults: 1,
        sent: REPORTS,
        recorded,
        twice,
    }
}

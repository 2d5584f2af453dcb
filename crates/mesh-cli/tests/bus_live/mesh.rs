//! A mesh on this machine on either bus, for the live suites that run one
//! body on both (`bus_live`) or start on RabbitMQ (`rollout_live`): `mesh
//! init --bus nats|amqp`, the broker on the genesis's own configuration, a
//! real `mesh controller`, real `mesh host`s enrolled by token.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use super::harness::{self, Daemon, mesh_bin, out_text};
use mesh_controller::Genesis;

pub const LONG: Duration = Duration::from_secs(60);

/// The broker of one mesh, on its own bus.
pub enum Bus {
    Nats(mesh_testkit::Broker),
    Amqp(mesh_testkit::RabbitMq),
}

/// A mesh on this machine. Field order is drop order: processes first.
pub struct BusMesh {
    pub hosts: Vec<Daemon>,
    pub controller: Option<Daemon>,
    pub bus: Bus,
    pub dir: PathBuf,
    pub store_url: String,
    pub controller_args: Vec<String>,
    pub _db: Option<mesh_testkit::TestDatabase>,
    pub tmp: tempfile::TempDir,
}

impl BusMesh {
    pub fn new(kind: &str) -> BusMesh {
        BusMesh::with_store(kind, None, &[])
    }

    /// On `db` (SQLite in its directory when none), the controller given
    /// `controller_args` more.
    pub fn with_store(
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

    pub fn start_controller(&mut self) {
        let log = self.tmp.path().join(format!("controller-{}.log", nanos()));
        let mut args = vec![
            "controller",
            "--dir",
            self.dir.to_str().unwrap(),
            "--store",
            &self.store_url,
        ];
        // HTTP only when a case asks for it (`--http ADDR`).
        if !self.controller_args.iter().any(|a| a == "--http") {
            args.push("--no-http");
        }
        args.extend(self.controller_args.iter().map(String::as_str));
        let d = Daemon::spawn("controller", &args, log, self.tmp.path());
        d.wait_log("controller running", LONG);
        self.controller = Some(d);
    }

    pub fn controller(&self) -> &Daemon {
        self.controller.as_ref().unwrap()
    }

    pub fn mesh(&self, args: &[&str]) -> Output {
        harness::mesh_in(&self.dir, &self.store_url, self.tmp.path(), args)
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.mesh(args);
        assert!(o.status.success(), "mesh {args:?}: {}", out_text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// `mesh host` enrolled by a fresh token for `node`.
    pub fn join(&mut self, node: &str) {
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

    /// Registers `manifest` as module `name`'s.
    pub fn register_as(&self, name: &str, manifest: &str) {
        let dir = self.tmp.path().join(format!("catalogue-{}", nanos()));
        std::fs::create_dir_all(dir.join(name)).unwrap();
        std::fs::write(dir.join(name).join("mesh.toml"), manifest).unwrap();
        self.ok(&["catalogue", "register", dir.to_str().unwrap()]);
    }

    /// Each `(name, manifest)` registered together, as one catalogue.
    pub fn register_all(&self, modules: &[(&str, String)]) {
        let dir = self.tmp.path().join(format!("catalogue-{}", nanos()));
        for (name, manifest) in modules {
            std::fs::create_dir_all(dir.join(name)).unwrap();
            std::fs::write(dir.join(name).join("mesh.toml"), manifest).unwrap();
        }
        self.ok(&["catalogue", "register", dir.to_str().unwrap()]);
    }

    /// `module`'s state on `node` as the records say (the host's report).
    pub fn state(&self, node: &str, module: &str) -> Option<String> {
        let out = self.mesh(&["modules", "--output", "json"]);
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).ok()?;
        rows.iter()
            .find(|r| r["node"] == node && r["module"] == module)
            .and_then(|r| r["state"].as_str().map(String::from))
    }

    /// The environment the module's process runs with, as the host wrote
    /// its pid: the version it was declared.
    pub fn running_version(&self, node: &str) -> Option<String> {
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

    pub fn restart_broker(&mut self) {
        match &mut self.bus {
            Bus::Nats(b) => b.restart().expect("nats-server starts again"),
            Bus::Amqp(r) => {
                r.stop();
                r.boot().expect("RabbitMQ starts again");
            }
        }
    }

    pub fn host_log(&self) -> String {
        self.hosts[0].log()
    }

    /// A connection as `node`'s host, with its own key, to whichever bus.
    pub async fn as_host(&self, node: &str) -> mesh_bus::seam::Bus {
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

/// Reports `<tag>-<i>` of `node` answering declaration `sequence` (one
/// older than the node's newest is not recorded), each confirmed kept by
/// the bus (a JetStream ack, a publisher confirm), published together in
/// batches.
pub async fn send_reports_at(
    bus: &mesh_bus::seam::Bus,
    node: &str,
    tag: &str,
    sequence: u64,
    range: std::ops::Range<usize>,
) {
    let all: Vec<usize> = range.collect();
    for batch in all.chunks(256) {
        let sent = batch.iter().map(|i| {
            let (subject, r) = crate::report_stream::report(node, tag, *i, sequence);
            async move { bus.publish_stored(&subject, &r.to_json()).await }
        });
        for r in futures::future::join_all(sent).await {
            r.expect("the bus keeps the report");
        }
    }
}

pub fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Counted in the controller's log: how often `needle` was said.
pub fn said(d: &Daemon, needle: &str) -> usize {
    d.log().matches(needle).count()
}

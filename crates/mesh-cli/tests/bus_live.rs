//! One mesh life, the same body on both buses (DESIGN "the bus seam"):
//! `mesh init --bus nats|amqp`, the broker on the genesis's own
//! configuration (nats-server, or RabbitMQ from the environment the genesis
//! names), a real `mesh controller`, a real `mesh host` enrolled by token;
//! then a module declared, run and reported, a newer declaration
//! superseding it, the controller restarted and the broker restarted, the
//! host reporting through each. What differs between the buses is in
//! [`Bus`] alone.

#[path = "join_live/harness.rs"]
mod harness;

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
    tmp: tempfile::TempDir,
}

impl BusMesh {
    fn new(kind: &str) -> BusMesh {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ctl");
        let store_url = format!("sqlite://{}", dir.join("mesh.db").display());
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
            tmp,
        }
    }

    fn start_controller(&mut self) {
        let log = self.tmp.path().join(format!("controller-{}.log", nanos()));
        let args = [
            "controller",
            "--dir",
            self.dir.to_str().unwrap(),
            "--store",
            &self.store_url,
            "--no-http",
        ];
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

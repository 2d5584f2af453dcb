//! What the rollout's live tests share: the NATS server the mesh moves
//! onto, run as a module on n1 from the user list the controller declares
//! it; the check asked as an operator asks it; RabbitMQ watched by an
//! administrator of the test's own.

use std::path::PathBuf;
use std::process::Output;

use super::harness::{out_text, wait_until};
use super::mesh::{BusMesh, LONG};

/// A NATS server as a module: its configuration (the genesis certificate,
/// a port of its own) is the test's file; who may connect is the
/// `bus-users` file the controller declares into the module's directory.
pub fn nats_broker(conf: &std::path::Path) -> String {
    let server = mesh_testkit::nats_server_binary().unwrap();
    format!(
        r#"[module]
name = "nats-broker"
description = "the NATS server the mesh moves onto"

[run]
command = ["{}", "--config", "{}"]

[holds]
seats = ["mesh-broker"]

[[file]]
name = "bus-users"
path = "accounts.conf"
"#,
        server.display(),
        conf.display()
    )
}

pub fn check(mesh: &BusMesh) -> (i32, String) {
    let o: Output = mesh.mesh(&["rollout", "check"]);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
    )
}

/// The `what` of each missing thing, as `--output json` gives them.
pub fn missing(mesh: &BusMesh) -> Vec<String> {
    let o = mesh.mesh(&["rollout", "check", "--output", "json"]);
    let r: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", out_text(&o)));
    assert_eq!(r["from"], "amqp", "{r}");
    assert_eq!(
        r["ready"].as_bool(),
        Some(o.status.success()),
        "exit 0 exactly when ready: {r}"
    );
    r["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["what"].as_str().unwrap().to_string())
        .collect()
}

/// Waits until the check lists exactly `want`.
pub fn until_missing(mesh: &BusMesh, want: &[&str]) {
    let mut last = Vec::new();
    let ok = wait_until(LONG, || {
        last = missing(mesh);
        last == want
    });
    assert!(
        ok,
        "the check never listed exactly {want:#?}; last: {last:#?}\nmodules: {}\ncontroller log:\n{}\nhost log:\n{}",
        String::from_utf8_lossy(&mesh.mesh(&["modules"]).stdout),
        mesh.controller().log(),
        mesh.host_log()
    );
}

/// The example modules that speak, their programs built here: the ticker
/// (an event a second), the greeter (tools, and work into the `jobs`
/// seat), the worker holding `jobs`, the recorder hearing ticks and done
/// jobs.
pub fn speaking_modules() -> Vec<(&'static str, String)> {
    let bins = std::path::Path::new(super::harness::mesh_bin())
        .parent()
        .unwrap()
        .to_path_buf();
    super::harness::path_with_bins();
    let example = |name: &str, program: &str| {
        let path = super::harness::Mesh::examples()
            .join(name)
            .join("mesh.toml");
        std::fs::read_to_string(path).unwrap().replace(
            &format!("${{artifact:{program}}}"),
            bins.join(program).to_str().unwrap(),
        )
    };
    vec![
        ("worker", example("worker", "mesh-worker")),
        (
            "ticker",
            example("ticker", "mesh-ticker").replace(
                "\"--count\", \"3\"",
                "\"--count\", \"1\", \"--every\", \"1\"",
            ),
        ),
        (
            "greeter",
            example("greeter", "mesh-greeter")
                .replace("seats = [\"jobs\", \"node-jobs\"]", "seats = [\"jobs\"]"),
        ),
        ("recorder", example("recorder", "mesh-recorder")),
    ]
}

/// Lines of `file` in `module`'s working directory on `node`.
pub fn lines(mesh: &BusMesh, node: &str, module: &str, file: &str) -> Vec<serde_json::Value> {
    let path = mesh
        .tmp
        .path()
        .join(format!("host-{node}/modules/{module}/work/{file}"));
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The new bus as the test stands it: the module's port and the
/// directory its user list is declared into.
pub struct NewBus {
    pub port: u16,
    pub module_dir: PathBuf,
}

impl NewBus {
    pub fn url(&self) -> String {
        format!("tls://127.0.0.1:{}", self.port)
    }
}

/// The NATS server as a module holding `mesh-broker`, assigned to n1, on a
/// port of its own; its address not recorded yet.
pub fn broker_module(mesh: &BusMesh) -> NewBus {
    let port = mesh_testkit::broker::free_port().unwrap();
    // A process module works in its directory's `work`, where its files are.
    let module_dir = mesh.tmp.path().join("host-n1/modules/nats-broker/work");
    let conf = mesh.tmp.path().join("nats-broker.conf");
    let broker = mesh.dir.join("broker");
    std::fs::write(
        &conf,
        format!(
            "listen: \"127.0.0.1:{port}\"\ntls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n}}\njetstream {{\n  store_dir: \"{}\"\n}}\ninclude \"{}\"\n",
            broker.join("cert.pem").display(),
            broker.join("key.pem").display(),
            mesh.tmp.path().join("nats-broker-js").display(),
            // An include is read relative to the including file.
            module_dir
                .strip_prefix(mesh.tmp.path())
                .unwrap()
                .join("accounts.conf")
                .display(),
        ),
    )
    .unwrap();
    mesh.register_as("nats-broker", &nats_broker(&conf));
    mesh.ok(&["assign", "nats-broker", "n1"]);
    NewBus { port, module_dir }
}

/// n1's address and the port it gives `mesh-broker`: the new bus dialled.
pub fn address(mesh: &BusMesh, bus: &NewBus) {
    mesh.ok(&[
        "node",
        "set",
        "n1",
        "--address",
        "127.0.0.1",
        "--port",
        &format!("mesh-broker={}", bus.port),
    ]);
}

/// The test's own administrator on RabbitMQ: made through the management
/// API as the controller, before the move removes the controller's user.
pub const WATCHER: &str = "watcher";

pub fn watcher(mesh: &BusMesh) -> mesh_bus::amqp::Management {
    let genesis = mesh_controller::Genesis::open(&mesh.dir).unwrap();
    let seed = std::fs::read_to_string(mesh.dir.join(mesh_controller::genesis::NKEY_SEED)).unwrap();
    let ca = mesh.dir.join(mesh_controller::genesis::CA_CERT);
    let url = genesis.management_url().unwrap();
    let controller = mesh_bus::amqp::Management::new(
        &url,
        "controller",
        &mesh_bus::Secret::new(mesh_core::authority::amqp::password_of(seed.trim())),
        &ca,
    )
    .unwrap();
    let password = "the-test-watches";
    controller
        .put_user(
            WATCHER,
            &mesh_core::authority::amqp::password_hash([7, 7, 7, 7], password.as_bytes()),
            true,
        )
        .unwrap();
    mesh_bus::amqp::Management::new(&url, WATCHER, &mesh_bus::Secret::new(password), &ca).unwrap()
}

/// The module's NATS server as the controller, once it answers (it
/// restarts with the move: its environment changed).
pub async fn on_the_new_bus(mesh: &BusMesh, nats: &str) -> mesh_bus::seam::Bus {
    let genesis = mesh_controller::Genesis::open(&mesh.dir).unwrap();
    let seed = std::fs::read_to_string(mesh.dir.join(mesh_controller::genesis::NKEY_SEED)).unwrap();
    let config = mesh_bus::BusConfig {
        url: nats.to_string(),
        principal: "controller".into(),
        inbox_prefix: Some(mesh_core::subjects::inbox_prefix("controller")),
        credential: mesh_bus::ClientCredential::NKey(mesh_bus::Secret::new(seed.trim())),
        ca_file: None,
        pin: Some(mesh_bus::CertPin::from_hex(&genesis.cert_sha256).unwrap()),
    };
    for _ in 0..600 {
        if let Ok(b) = mesh_bus::seam::Bus::connect(&config).await {
            return b;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the module's NATS server never answered the controller after the move")
}

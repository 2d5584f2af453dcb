//! What the live tests of modules share: waiting for what a module wrote
//! or a node reported, how many messages a stream holds, a person and a
//! call, a raw connection with a module's own key.
// Each test binary uses part of this module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use mesh_bus::{BusConfig, CertPin, ClientCredential, Secret};
use mesh_core::names::Name;
use mesh_sdk::{Denied, ModuleEnv, ServerErrors};
use serde_json::Value;

use super::harness::{Mesh, mesh_bin, wait_until};

pub const LONG: Duration = Duration::from_secs(60);

/// The JSON lines a module appended to `file` in its working directory.
pub fn lines(mesh: &Mesh, host: &str, module: &str, file: &str) -> Vec<Value> {
    let path = mesh.module_dir(host, module).join("work").join(file);
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

pub fn module_log(mesh: &Mesh, host: &str, module: &str) -> String {
    std::fs::read_to_string(mesh.module_dir(host, module).join("log")).unwrap_or_default()
}

/// Waits until `module` on `host` has appended `n` lines to `file`.
pub fn wait_lines(mesh: &Mesh, host: &str, module: &str, file: &str, n: usize) -> Vec<Value> {
    assert!(
        wait_until(LONG, || lines(mesh, host, module, file).len() >= n),
        "{module} on {host} never wrote {n} lines to {file}: {:?}; its log:\n{}",
        lines(mesh, host, module, file),
        module_log(mesh, host, module)
    );
    lines(mesh, host, module, file)
}

/// Waits until `node`'s newest report satisfies `f`.
pub async fn wait_report(mesh: &Mesh, node: &str, mut f: impl FnMut(&mesh_store::Report) -> bool) {
    let store = mesh_store::Store::open(&mesh.store_url).await.unwrap();
    let name = Name::new(node).unwrap();
    for _ in 0..1200 {
        if let Some(r) = store.latest_report(&name).await.unwrap()
            && f(&r.report)
        {
            store.close().await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "no such report from {node}: {:?}",
        store.latest_report(&name).await.unwrap()
    );
}

/// Waits until `node`'s newest report has `module` running.
pub async fn wait_running(mesh: &Mesh, node: &str, module: &str) {
    wait_report(mesh, node, |r| {
        r.outcomes
            .iter()
            .any(|o| o.module.as_str() == module && o.state == mesh_store::ModuleState::Running)
    })
    .await;
}

/// Waits until `stream` holds `n` messages.
pub async fn wait_stored(mesh: &Mesh, stream: &str, n: u64) {
    for _ in 0..1200 {
        if stored(mesh, stream).await == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{stream} never held {n}: {}", stored(mesh, stream).await);
}

/// How many messages a stream holds.
pub async fn stored(mesh: &Mesh, stream: &str) -> u64 {
    mesh.stored(stream).await
}

/// `mesh person key` into the mesh's temp dir, then `mesh person add`.
pub fn person(mesh: &Mesh, name: &str, tools: &str) -> PathBuf {
    let (seed, key) = person_key(mesh, name);
    let out = mesh.mesh(&["person", "add", name, "--tools", tools, "--nkey", &key]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    seed
}

/// `mesh person key` into the mesh's temp dir: the seed file and the
/// public key.
pub fn person_key(mesh: &Mesh, name: &str) -> (PathBuf, String) {
    let seed = mesh.tmp.path().join(format!("{name}.seed"));
    let out = Command::new(mesh_bin())
        .args(["person", "key", "--out", seed.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let key = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(
        key.starts_with('U'),
        "the public key alone on stdout: {key}"
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&seed).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    (seed, key)
}

/// `mesh call TOOL PAYLOAD --as SEED`, waiting until the person's key is
/// live (the users file is recomposed after `mesh person add`).
pub fn call(mesh: &Mesh, seed: &Path, tool: &str, payload: &Value, extra: &[&str]) -> Output {
    let payload = payload.to_string();
    let mut args = vec!["call", tool, &payload, "--as", seed.to_str().unwrap()];
    args.extend(extra);
    let mut out = None;
    wait_until(LONG, || {
        let o = mesh.mesh(&args);
        let not_yet = String::from_utf8_lossy(&o.stderr).contains("authorization");
        out = Some(o);
        !not_yet
    });
    out.unwrap()
}

pub fn answer(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "mesh call: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// What the host gives `module` on `host`, for a test that connects with
/// the module's own key.
pub fn module_env(mesh: &Mesh, host: &str, module: &str) -> ModuleEnv {
    let pin = mesh_bus::fingerprint_of_pem_file(&mesh.dir.join("broker/cert.pem")).unwrap();
    ModuleEnv {
        bus_urls: vec![format!("tls://127.0.0.1:{}", mesh.port())],
        pin: CertPin::from_hex(&pin).unwrap(),
        nkey_file: mesh.module_dir(host, module).join("nkey.seed"),
        inbox_prefix: format!("_INBOX.module_{host}_{module}"),
        node: Name::new(host).unwrap(),
        module: Name::new(module).unwrap(),
        ack_timeout: Duration::from_secs(5),
        ready_file: None,
    }
}

/// A raw connection with `module`'s key on `host`, hearing the server's
/// refusals.
pub async fn raw_as(mesh: &Mesh, host: &str, module: &str) -> (async_nats::Client, ServerErrors) {
    let env = module_env(mesh, host, module);
    let seed = std::fs::read_to_string(&env.nkey_file).unwrap();
    let cfg = BusConfig {
        url: env.bus_urls[0].clone(),
        principal: env.principal(),
        credential: ClientCredential::NKey(Secret::new(seed.trim())),
        ca_file: None,
        inbox_prefix: Some(env.inbox_prefix.clone()),
        pin: Some(env.pin),
    };
    ServerErrors::connect(&cfg).await.unwrap()
}

/// Publishes to `subject` and waits, after a flush (so the server has
/// processed it), for its refusal: synchronous, never "no error yet".
pub async fn publish_refused(client: &async_nats::Client, errors: &ServerErrors, subject: &str) {
    let refused = errors.refusal(Denied::Publish, subject);
    client
        .publish(subject.to_string(), "x".into())
        .await
        .unwrap();
    client.flush().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), refused)
        .await
        .unwrap_or_else(|_| panic!("publishing to {subject} was not refused"));
}

pub async fn subscribe_refused(client: &async_nats::Client, errors: &ServerErrors, subject: &str) {
    let refused = errors.refusal(Denied::Subscription, subject);
    let _sub = client.subscribe(subject.to_string()).await.unwrap();
    client.flush().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), refused)
        .await
        .unwrap_or_else(|_| panic!("subscribing to {subject} was not refused"));
}

//! A secret in a container module's environment never reaches the
//! container engine, and nothing of any secret outlives its module: with a
//! real Podman, the engine's on-disk state (its database, each container's
//! bundle) is scanned for the plaintext while the container runs and after
//! the module is unassigned; the module's own process holds it; a process
//! module's secret file is gone once it is unassigned.

use std::path::{Path, PathBuf};

use super::harness::{self, Backend, wait_until};
use super::{LONG, Scan, files_under, mesh, ok, plaintext, set_secret};

const SEALED_BOX: &str = r#"[module]
name = "sealed-box"
description = "a container given a token in its environment"

[run]
driver = "container"
image = "${artifact:image}"
command = ["--count", "100000", "--every", "1"]
env = { BOX_TOKEN = "${secret:box-token}" }
secrets-in-environment = "the image reads its token only from BOX_TOKEN"

[events]
emits = ["tick"]
"#;

/// Where Podman keeps its state: what outlives every container.
const ENGINE_STATE: [&str; 4] = [
    "/var/lib/containers/storage",
    "/run/containers/storage",
    "/run/libpod",
    "/var/run/libpod",
];

/// Removes the test's container when dropped, whatever happened.
struct RemoveContainer(PathBuf, String);

impl Drop for RemoveContainer {
    fn drop(&mut self) {
        let _ = std::process::Command::new(&self.0)
            .args(["rm", "-f", "-t", "0", "--ignore", &self.1])
            .output();
    }
}

fn scan_engine_state(scan: &mut Scan, secrets: &[&str]) {
    let mut files = Vec::new();
    for dir in ENGINE_STATE {
        files_under(Path::new(dir), &mut files);
    }
    assert!(
        !files.is_empty(),
        "no engine state found under {ENGINE_STATE:?}"
    );
    for f in files {
        if let Ok(bytes) = std::fs::read(&f) {
            scan.check(&f.display().to_string(), &bytes, secrets);
        }
    }
}

/// The processes on this machine whose environment holds `needle`:
/// (pid, command name, whether it is the module `module`'s).
fn environments_holding(needle: &str, module: &str) -> Vec<(String, String, bool)> {
    let mine = format!("MESH_MODULE={module}");
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = e.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        let vars: Vec<String> = env
            .split(|b| *b == 0)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect();
        if vars.iter().any(|v| v.contains(needle)) {
            let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            out.push((pid, comm.trim().to_string(), vars.contains(&mine)));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_never_reaches_the_container_engine_nor_outlives_its_module() {
    let engine = mesh_host::driver::container::require_engine()
        .unwrap_or_else(|e| panic!("install podman (scripts/setup): {e}"));
    let (mesh, _hosts, _http) = mesh(Backend::Sqlite).await;
    let container = mesh_host::driver::container::container_name(
        &mesh_core::names::Name::new("n1").unwrap(),
        &mesh_core::names::Name::new("sealed-box").unwrap(),
        mesh_host::HostKeys::load(&mesh.host_dir("n1"))
            .unwrap()
            .host_key(),
    );
    let _cleanup = RemoveContainer(engine.clone(), container.clone());
    let dir = mesh.tmp.path().join("sealed-catalogue");
    std::fs::create_dir_all(dir.join("sealed-box")).unwrap();
    std::fs::write(dir.join("sealed-box/mesh.toml"), SEALED_BOX).unwrap();
    mesh.register(&dir);
    let archive = harness::ticker_archive(&engine, mesh.tmp.path());
    let put = [
        "artifact",
        "put",
        archive.to_str().unwrap(),
        "--module",
        "sealed-box",
        "--name",
        "image",
    ];
    ok(&mesh, &put);
    let (box_token, pw, token) = (plaintext("box"), plaintext("pw"), plaintext("token"));
    set_secret(&mesh, "box-token", &box_token);
    set_secret(&mesh, "db-password", &pw);
    set_secret(&mesh, "api-token", &token);
    for module in ["sealed-box", "vault-user"] {
        ok(
            &mesh,
            &["assign", module, "n1", "--wait", "--timeout", "90s"],
        );
    }
    let secrets = [box_token.as_str(), pw.as_str(), token.as_str()];

    // Running: the container's process holds the token, and is the only
    // process that does (not the engine's client, not conmon).
    let holding = || environments_holding(&format!("BOX_TOKEN={box_token}"), "sealed-box");
    assert!(
        wait_until(LONG, || !holding().is_empty()),
        "the container's environment never held the token"
    );
    let holders = holding();
    assert!(
        holders
            .iter()
            .all(|(_, comm, mine)| *mine && comm != "podman" && comm != "conmon"),
        "{holders:?}"
    );
    let file = super::work(&mesh, "n1", "vault-user", "secrets/token");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), token);
    let mut running = Scan::default();
    scan_engine_state(&mut running, &secrets);
    let inspected = std::process::Command::new(&engine)
        .args(["container", "inspect", &container])
        .output()
        .unwrap();
    assert!(inspected.status.success(), "{inspected:?}");
    running.check("podman container inspect", &inspected.stdout, &secrets);
    assert!(running.found.is_empty(), "{:?}", running.found);

    // Unassigned: nothing of any secret is left, here or in the engine.
    for module in ["sealed-box", "vault-user"] {
        ok(
            &mesh,
            &["unassign", module, "n1", "--wait", "--timeout", "90s"],
        );
    }
    assert!(wait_until(LONG, || holding().is_empty()), "{:?}", holding());
    assert!(!file.exists(), "{} outlived its module", file.display());
    let env_file = mesh.module_dir("n1", "sealed-box").join("secret-env");
    assert!(
        !env_file.exists(),
        "{} outlived its module",
        env_file.display()
    );
    let mut after = Scan::default();
    scan_engine_state(&mut after, &secrets);
    let mut left = Vec::new();
    files_under(&mesh.host_dir("n1"), &mut left);
    for f in left {
        if let Ok(bytes) = std::fs::read(&f) {
            after.check(&f.display().to_string(), &bytes, &secrets);
        }
    }
    assert!(after.found.is_empty(), "{:?}", after.found);
    assert!(after.places > 0);
}

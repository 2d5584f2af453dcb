//! Safe deploys, live (DESIGN "health and deploys"): five real hosts run
//! the example HTTP service `mesh-web` at v1, each checked by its host
//! over HTTP; a controller and a standby share one PostgreSQL store. A
//! version whose check fails is reverted on its canary alone; a healthy
//! one moves in batches, each after the one before stayed healthy for its
//! window (asserted from the reports' own times); the active controller
//! SIGKILLed mid-way, the standby finishes, moving no node twice; a
//! version that exits at once is caught and reverted. Persons on their
//! own machines deploy, pause and revert through the active controller,
//! as their roles allow, each change audited in their name.

#[path = "join_live/harness.rs"]
mod harness;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use harness::{Backend, Daemon, Mesh, at_home, module_pid, ok, stripped, wait_bound, wait_until};

const LONG: Duration = Duration::from_secs(90);
const NODES: [&str; 5] = ["n1", "n2", "n3", "n4", "n5"];
/// Short, so the standby takes over within the test's patience.
const LEASE: &[&str] = &["--lease", "3s"];

/// `web`: the example service, from a version's launcher, checked over
/// HTTP at the port each node gives its `web` seat.
const WEB: &str = r#"[module]
name = "web"
description = "The example HTTP service a deployment moves"

[run]
command = ["${artifact:web}", "--listen", "${seat:web:8080}"]

[[seat]]
name = "web"
scope = "node"
protocol = "http"

[holds]
seats = ["web"]

[health]
http = "http://${seat:web:8080}/healthz"
interval = "250ms"
timeout = "250ms"
healthy_after = "1s"
"#;

fn catalogue(dir: &Path) -> PathBuf {
    let root = dir.join("deploy-catalogue");
    std::fs::create_dir_all(root.join("web")).unwrap();
    std::fs::write(root.join("web/mesh.toml"), WEB).unwrap();
    root
}

/// A version: a launcher running `mesh-web` as `v` with `extra`.
fn put_version(mesh: &Mesh, v: &str, extra: &str) {
    let web = stripped("mesh-web");
    let file = mesh.tmp.path().join(format!("web-{v}"));
    std::fs::write(
        &file,
        format!(
            "#!/bin/sh\nexec {} --version {v} {extra} \"$@\"\n",
            web.display()
        ),
    )
    .unwrap();
    ok(
        mesh,
        &[
            "artifact",
            "put",
            file.to_str().unwrap(),
            "--module",
            "web",
            "--name",
            "web",
            "--version",
            v,
        ],
    );
}

/// `mesh modules --output json`, web's rows by node.
fn web_rows(mesh: &Mesh) -> BTreeMap<String, serde_json::Value> {
    let o = mesh.mesh(&["modules", "--output", "json"]);
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap_or_default();
    rows.into_iter()
        .filter(|r| r["module"] == "web")
        .map(|r| (r["node"].as_str().unwrap().to_string(), r))
        .collect()
}

/// Every node in `nodes` reports web running `v`, healthy.
fn all_healthy_on(mesh: &Mesh, nodes: &[&str], v: &str) -> bool {
    let rows = web_rows(mesh);
    nodes.iter().all(|n| {
        rows.get(*n).is_some_and(|r| {
            r["version"] == v && r["health"] == "healthy" && r["state"] == "running"
        })
    })
}

fn wait_healthy(mesh: &Mesh, nodes: &[&str], v: &str) {
    assert!(
        wait_until(LONG, || all_healthy_on(mesh, nodes, v)),
        "not every node healthy on {v}: {:#?}",
        web_rows(mesh)
    );
}

/// `mesh deploy web ARGS`: the deployment's id.
fn deploy(mesh: &Mesh, args: &[&str]) -> i64 {
    let mut all = vec!["deploy", "web", "--output", "json"];
    all.extend(args);
    let v: serde_json::Value = serde_json::from_str(&ok(mesh, &all)).unwrap();
    v["id"].as_i64().unwrap()
}

/// `mesh deployment ID --output json`.
fn deployment(mesh: &Mesh, id: i64) -> serde_json::Value {
    serde_json::from_str(&ok(
        mesh,
        &["deployment", &id.to_string(), "--output", "json"],
    ))
    .unwrap()
}

/// Waits until deployment `id` is in `state`; the deployment then.
fn wait_state(mesh: &Mesh, id: i64, state: &str) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    assert!(
        wait_until(LONG, || {
            last = deployment(mesh, id);
            last["deployment"]["state"]["state"] == state
        }),
        "deployment #{id} never {state}: {last:#}"
    );
    last
}

fn pids(mesh: &Mesh, nodes: &[&str]) -> Vec<Option<u32>> {
    nodes.iter().map(|n| module_pid(mesh, n, "web")).collect()
}

/// `mesh reports NODE --output json`, oldest first: (received_at, web's
/// outcome).
fn web_reports(mesh: &Mesh, node: &str) -> Vec<(i64, serde_json::Value)> {
    let o = ok(
        mesh,
        &["reports", node, "--limit", "500", "--output", "json"],
    );
    let rows: Vec<serde_json::Value> = serde_json::from_str(&o).unwrap();
    let mut out: Vec<(i64, serde_json::Value)> = rows
        .into_iter()
        .filter_map(|r| {
            let at = r["received_at"].as_i64()?;
            let m = r["modules"]
                .as_array()?
                .iter()
                .find(|m| m["module"] == "web")?
                .clone();
            Some((at, m))
        })
        .collect();
    out.reverse();
    out
}

/// Lines of `d`'s log saying it moved a node to `version`, by node.
/// A person's own machine: a home of their own where `mesh login` spent
/// the token the mesh's administrator issued for `role`.
fn person(mesh: &Mesh, name: &str, role: &str) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let out = mesh.mesh(&["person", "add", name, "--role", role]);
    assert!(out.status.success(), "{}", harness::out_text(&out));
    std::fs::write(home.path().join("login.token"), &out.stdout).unwrap();
    let mut cmd = std::process::Command::new("sh");
    let out = at_home(&mut cmd, home.path())
        .args([
            "-c",
            &format!("exec {} login < login.token", harness::mesh_bin()),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "login: {}", harness::out_text(&out));
    home
}

fn person_mesh(home: &tempfile::TempDir, args: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new(harness::mesh_bin());
    at_home(&mut cmd, home.path()).args(args).output().unwrap()
}

/// `mesh ARGS` on a person's machine, which must succeed: its stdout.
fn as_person(home: &tempfile::TempDir, args: &[&str]) -> String {
    let out = person_mesh(home, args);
    assert!(
        out.status.success(),
        "mesh {args:?}: {}",
        harness::out_text(&out)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn moved(d: &Daemon, version: &str) -> Vec<String> {
    d.log()
        .lines()
        .filter(|l| {
            l.contains("deployment moved a node") && l.contains(&format!("version={version}"))
        })
        .filter_map(|l| {
            Some(
                l.split("node=")
                    .nth(1)?
                    .split_whitespace()
                    .next()?
                    .to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn deployments_move_in_healthy_batches_and_revert_by_themselves() {
    let mut mesh = Mesh::new(Backend::Postgres);
    mesh.start_controller_with(LEASE);
    mesh.register(&catalogue(mesh.tmp.path()));
    let mut hosts = Vec::new();
    for (i, n) in NODES.iter().enumerate() {
        let t = mesh.node_add(n, "1h");
        let port = mesh_testkit::broker::free_port().unwrap();
        ok(
            &mesh,
            &[
                "node",
                "set",
                n,
                "--address",
                "127.0.0.1",
                "--port",
                &format!("web={port}"),
            ],
        );
        hosts.push(mesh.host(n, Some(&t)));
        let _ = i;
    }
    let js = async_nats::jetstream::new(mesh.observer().await);
    wait_bound(&js, &NODES, Duration::from_secs(60)).await;
    put_version(&mesh, "v1", "");
    put_version(&mesh, "v2", "--health fail");
    put_version(&mesh, "v3", "");
    put_version(&mesh, "v4", "");
    put_version(&mesh, "v5", "--exit 3");
    for n in NODES {
        ok(&mesh, &["assign", "web", n, "--version", "v1"]);
    }
    wait_healthy(&mesh, &NODES, "v1");
    let text = ok(&mesh, &["modules"]);
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()[..5]
                == ["web", "n1", "running", "healthy", "v1"]),
        "{text}"
    );

    // Bad input, refused before anything is recorded.
    for (args, says) in [
        (vec!["--version", "v9"], "module web has no version v9"),
        (
            vec!["--version", "v2", "--batch", "0"],
            "a batch of 0 nodes would never finish",
        ),
        (
            vec!["--version", "v2", "--nodes", "n1,n9"],
            "module web is not assigned to node n9",
        ),
        (
            vec!["--version", "v2", "--healthy-for", "2x"],
            "500ms, 2s, 1m or 1h",
        ),
    ] {
        let mut all = vec!["deploy", "web"];
        all.extend(&args);
        let o = mesh.mesh(&all);
        assert!(!o.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    assert!(ok(&mesh, &["deployments"]).contains("no deployment recorded"));

    // 1. v2 fails its check: the canary alone is moved, and moved back.
    let others = &NODES[1..];
    let before = pids(&mesh, others);
    assert!(before.iter().all(Option::is_some), "{before:?}");
    let id = deploy(
        &mesh,
        &[
            "--version",
            "v2",
            "--canary",
            "1",
            "--batch",
            "2",
            "--healthy-for",
            "2s",
            "--deadline",
            "60s",
        ],
    );
    // Overlapping: refused naming the running one.
    let o = mesh.mesh(&["deploy", "web", "--version", "v3"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("deployment #{id} of web is still running")),
        "{err}"
    );
    let d = wait_state(&mesh, id, "reverted");
    let state = &d["deployment"]["state"];
    assert_eq!(state["node"], "n1", "{d:#}");
    let reason = state["reason"].as_str().unwrap();
    assert!(
        reason.contains("unhealthy on v2")
            && reason.contains("answered 503: v2 is unhealthy (started with --health fail)"),
        "{reason}"
    );
    wait_healthy(&mesh, &NODES, "v1");
    assert_eq!(pids(&mesh, others), before, "the other four were touched");
    let listed = ok(&mesh, &["deployments"]);
    assert!(
        listed.contains(&format!("#{id}")) && listed.contains("reverted at n1"),
        "{listed}"
    );

    // The plan of v3: its batches, then each node's declaration and the
    // hosts' grants on the new version's artifact; nothing is written.
    let plan = ok(
        &mesh,
        &[
            "plan",
            "deploy",
            "web",
            "--version",
            "v3",
            "--canary",
            "0",
            "--batch",
            "2",
        ],
    );
    assert!(plan.starts_with("batches: [n1 n2], [n3 n4], [n5]\nplan: deploy web at version v3 to every node it is assigned to\n"), "{plan}");
    for n in NODES {
        assert!(plan.contains(&format!("node {n}:")), "{n}: {plan}");
        assert!(
            plan.contains(&format!("principal host_{n}:")),
            "{n}: {plan}"
        );
    }
    assert!(plan.contains("update web"), "{plan}");
    let o = mesh.mesh(&["plan", "deploy", "web", "--version", "v9"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("module web has no version v9"));
    wait_healthy(&mesh, &NODES, "v1");

    // 2. v3 in batches of 2 with a 3 s window: each batch starts after the
    // one before stayed healthy 3 s, on the controller's clock.
    let id = deploy(
        &mesh,
        &[
            "--version",
            "v3",
            "--canary",
            "0",
            "--batch",
            "2",
            "--healthy-for",
            "3s",
            "--deadline",
            "60s",
        ],
    );
    wait_state(&mesh, id, "succeeded");
    wait_healthy(&mesh, &NODES, "v3");
    let batches: [&[&str]; 3] = [&["n1", "n2"], &["n3", "n4"], &["n5"]];
    let first_on = |n: &str| {
        web_reports(&mesh, n)
            .into_iter()
            .find(|(_, m)| m["version"] == "v3")
            .map(|(at, _)| at)
            .unwrap()
    };
    let healthy_since = |n: &str| {
        web_reports(&mesh, n)
            .into_iter()
            .find(|(_, m)| m["version"] == "v3" && m["health"] == "healthy")
            .map(|(at, m)| at - m["healthy_for_ms"].as_i64().unwrap())
            .unwrap()
    };
    for pair in batches.windows(2) {
        let ready = pair[0].iter().map(|n| healthy_since(n)).max().unwrap() + 3000;
        for n in pair[1] {
            let started = first_on(n);
            assert!(
                started >= ready,
                "{n} on v3 at {started}, before its batch could start at {ready}"
            );
        }
    }
    let shown = ok(&mesh, &["deployment", &id.to_string()]);
    assert!(
        shown.contains("succeeded") && shown.contains("[n1 n2], [n3 n4], [n5]"),
        "{shown}"
    );

    // 3. v4, and the active controller SIGKILLed after the first batch:
    // the standby finishes it, moving no node twice.
    let mut standby = mesh.spawn_controller("standby", LEASE, "info,async_nats=off");
    standby.wait_log("standing by", LONG);
    let id = deploy(
        &mesh,
        &[
            "--version",
            "v4",
            "--canary",
            "0",
            "--batch",
            "2",
            "--healthy-for",
            "2s",
            "--deadline",
            "60s",
        ],
    );
    let mut d = serde_json::Value::Null;
    assert!(
        wait_until(LONG, || {
            d = deployment(&mesh, id);
            d["deployment"]["state"]["batch"].as_u64() == Some(1)
        }),
        "the first batch never passed: {d:#}"
    );
    let first = mesh.controller.take().unwrap();
    let moved_by_first = moved(&first, "v4");
    let mut first = first;
    first.kill();
    wait_state(&mesh, id, "succeeded");
    wait_healthy(&mesh, &NODES, "v4");
    let mut all = moved_by_first.clone();
    all.extend(moved(&standby, "v4"));
    all.sort();
    assert_eq!(
        all,
        NODES,
        "each node moved once: first {moved_by_first:?}, standby {:?}",
        moved(&standby, "v4")
    );
    assert!(
        !moved(&standby, "v4").is_empty(),
        "the standby moved nothing"
    );

    // 4. v5 exits at once: caught on its canary and reverted.
    let id = deploy(
        &mesh,
        &[
            "--version",
            "v5",
            "--healthy-for",
            "2s",
            "--deadline",
            "60s",
        ],
    );
    let d = wait_state(&mesh, id, "reverted");
    let reason = d["deployment"]["state"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("the process keeps exiting") && reason.contains("exited with status 3"),
        "{reason}"
    );
    assert_eq!(d["deployment"]["state"]["node"], "n1");
    wait_healthy(&mesh, &NODES, "v4");

    // 5. From persons' own machines, through the (now active) standby: an
    // operator deploys, pauses and reverts; a viewer reads and is refused
    // a change, by the server; each change is in the trail in the
    // person's name.
    let ops = person(&mesh, "ops", "operator");
    let eve = person(&mesh, "eve", "viewer");
    let out = as_person(
        &ops,
        &[
            "deploy",
            "web",
            "--version",
            "v3",
            "--canary",
            "1",
            "--healthy-for",
            "1m",
            "--deadline",
            "5m",
            "--output",
            "json",
        ],
    );
    let made: serde_json::Value = serde_json::from_str(&out).unwrap();
    let id = made["id"].as_i64().unwrap().to_string();
    assert_eq!(
        made["deployment"]["spec"]["nodes"]
            .as_array()
            .unwrap()
            .len(),
        5,
        "{made}"
    );
    let listed = as_person(&eve, &["deployments", "--module", "web"]);
    assert!(
        listed.contains(&format!("#{id}")) && listed.contains("running batch 1"),
        "{listed}"
    );
    let o = person_mesh(&eve, &["deployment", &id, "--pause"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains(
                "person eve may not ask for `deployment-change` (it takes the operator role"
            ),
        "{err}"
    );
    let paused = as_person(&ops, &["deployment", &id, "--pause"]);
    assert!(
        paused.starts_with(&format!("deployment #{id} of web to v3: paused at batch 1")),
        "{paused}"
    );
    let reverted = as_person(&ops, &["deployment", &id, "--revert"]);
    assert!(
        reverted.contains("reverted: asked by person ops"),
        "{reverted}"
    );
    wait_healthy(&mesh, &NODES, "v4");
    let trail = mesh.mesh(&["audit", "--output", "json"]);
    let trail: Vec<serde_json::Value> = serde_json::from_slice(&trail.stdout).unwrap();
    for (op, args) in [
        ("deploy", "\"version\":\"v3\""),
        ("deployment-change", "\"change\":\"pause\""),
        ("deployment-change", "\"change\":\"revert\""),
    ] {
        assert!(
            trail.iter().any(|r| r["who"] == "person ops"
                && r["operation"] == op
                && r["arguments"].to_string().contains(args)
                && r["outcome"] == "done"),
            "no {op} {args} by ops in the trail: {trail:#?}"
        );
    }

    standby.stop();
    for mut h in hosts {
        h.stop();
    }
}

//! A broker that moves strands no host: `mesh broker set-address` records
//! the new address, every node is declared it, each host records it and
//! follows the broker there once it starts again — with the key it enrolled
//! with, no token, no enrolment.

#[path = "join_live/harness.rs"]
mod harness;

use std::time::Duration;

use harness::{Backend, Mesh, wait_bound, wait_until};

const LONG: Duration = Duration::from_secs(90);
const NODES: [&str; 3] = ["n1", "n2", "n3"];

fn host_record(mesh: &Mesh, node: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(mesh.host_dir(node).join("host.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// `mesh modules --output json`: (module, node, state).
fn states(mesh: &Mesh) -> Vec<(String, String, String)> {
    let out = mesh.mesh(&["modules", "--output", "json"]);
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
    rows.iter()
        .map(|r| {
            (
                r["module"].as_str().unwrap_or_default().to_string(),
                r["node"].as_str().unwrap_or_default().to_string(),
                r["state"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn running_everywhere(mesh: &Mesh, module: &str) -> bool {
    let s = states(mesh);
    NODES.iter().all(|n| {
        s.iter()
            .any(|(m, node, st)| m == module && node == n && st == "running")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_moved_to_another_port_keeps_every_host_without_enrolling_again() {
    let (mut mesh, mut hosts) = Mesh::with_hosts(Backend::Sqlite, &NODES).await;
    for n in NODES {
        mesh.assign("echo", n, true);
    }
    assert!(
        wait_until(LONG, || running_everywhere(&mesh, "echo")),
        "{:?}",
        states(&mesh)
    );
    let before: Vec<serde_json::Value> = NODES.iter().map(|n| host_record(&mesh, n)).collect();
    let keys_before: Vec<serde_json::Value> =
        mesh.nodes().iter().map(|n| n["host_key"].clone()).collect();
    let old_port = mesh.port();
    let new_port = mesh_testkit::broker::free_port().unwrap();
    assert_ne!(old_port, new_port);

    // n3's host is down while the broker moves: it cannot be told. The
    // move names it (exit 1) and so does `mesh status`, with the command
    // that points it at the new address.
    assert!(hosts[2].stop().success());
    let out = mesh.mesh(&[
        "broker",
        "set-address",
        "--port",
        &new_port.to_string(),
        "--timeout",
        "15s",
    ]);
    let said = String::from_utf8_lossy(&out.stderr);
    let new_url = format!("tls://127.0.0.1:{new_port}");
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("node n3 has not applied them")
            && said.contains(&format!("`mesh host --state DIR --broker {new_url}`"))
            && !said.contains("node n1")
            && !said.contains("node n2"),
        "{said}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&new_url),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(mesh.port(), new_port, "the genesis names the new port");
    // Every host is declared the new address (through the old broker) and
    // records it, keeping the rest of its record.
    let status = mesh.mesh(&["status", "--output", "json"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let behind = format!("node n3 has not followed the broker to {new_url}");
    assert!(
        status["needs_action"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["what"].as_str().unwrap().starts_with(&behind)),
        "{status:#}"
    );
    assert!(
        wait_until(LONG, || NODES[..2].iter().all(
            |n| host_record(&mesh, n)["bus_urls"] == serde_json::json!([new_url])
        )),
        "{:?}",
        NODES
            .iter()
            .map(|n| host_record(&mesh, n))
            .collect::<Vec<_>>()
    );

    // The broker moves: stopped, started on its rewritten configuration.
    mesh.broker
        .restart()
        .expect("the broker starts on the new port");
    let js = async_nats::jetstream::new(mesh.observer().await);
    wait_bound(&js, &NODES[..2], LONG).await;
    // Pointed at the new address by hand: checked against its pin and key,
    // recorded, and it follows; status no longer names it.
    hosts[2] = mesh.host_with("n3", None, &["--broker", &new_url]);
    wait_bound(&js, &["n3"], LONG).await;
    assert_eq!(
        host_record(&mesh, "n3")["bus_urls"],
        serde_json::json!([new_url])
    );
    // Declarations reach each node on the new broker, and each reports.
    for n in NODES {
        let out = mesh.mesh(&["assign", "greeter", n, "--wait", "--timeout", "90s"]);
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("running"),
            "{n}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The modules that ran before the move run again, on the new broker.
    assert!(
        wait_until(LONG, || running_everywhere(&mesh, "echo")),
        "{:?}",
        states(&mesh)
    );
    // No enrolment: the same records and keys, every host still running.
    for (n, was) in NODES.iter().zip(&before) {
        let now = host_record(&mesh, n);
        assert_eq!(now["enrolled_at"], was["enrolled_at"], "{n}");
        assert_eq!(now["cert_sha256"], was["cert_sha256"], "{n}");
    }
    let keys_after: Vec<serde_json::Value> =
        mesh.nodes().iter().map(|n| n["host_key"].clone()).collect();
    assert_eq!(keys_after, keys_before);
    assert_eq!(
        mesh.controller().log().matches("node enrolled").count(),
        NODES.len(),
        "one enrolment per node, all before the move"
    );
    for h in &mut hosts[..2] {
        assert!(h.running(), "{}", h.log());
        assert!(
            h.log()
                .contains("the broker's addresses changed; following them"),
            "{}",
            h.log()
        );
    }
    assert!(hosts[2].running(), "{}", hosts[2].log());
    let status = mesh.mesh(&["status", "--output", "json"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert!(
        !status["needs_action"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["what"].as_str().unwrap().starts_with(&behind)),
        "{status:#}"
    );
}

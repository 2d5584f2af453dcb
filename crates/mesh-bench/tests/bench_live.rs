//! `mesh-bench` at CI size: 200 simulated hosts on the bench's own broker,
//! controller and store, and a 4 MiB artifact fetched by 10 hosts. Asserts
//! correctness only — every node's report recorded, none twice, the users
//! file identical when composed twice, every artifact fetch complete with
//! the bytes put and every read outside a host's declaration refused —
//! never a time: the figures are printed, for a person to read.

use std::path::Path;
use std::process::Command;

/// The `mesh` binary the bench runs, built beside `mesh-bench`: `cargo test
/// -p mesh-bench` alone builds no other package's binary.
fn mesh_beside_the_bench() {
    let bench = Path::new(env!("CARGO_BIN_EXE_mesh-bench"));
    if bench.with_file_name("mesh").is_file() {
        return;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-q", "-p", "mesh-cli", "--bin", "mesh"])
        .status()
        .unwrap();
    assert!(status.success(), "building mesh");
}

#[test]
fn a_ci_sized_bench_records_every_report_once() {
    mesh_beside_the_bench();
    let nats = mesh_testkit::nats_server_binary().expect("nats-server (scripts/setup)");
    let out = Command::new(env!("CARGO_BIN_EXE_mesh-bench"))
        .args([
            "--hosts",
            "200",
            "--users-nodes",
            "200",
            "--ingest-for",
            "1s",
            "--artifact-hosts",
            "10",
            "--artifact-mib",
            "4",
            "--output",
            "json",
            "--nats-server",
        ])
        .arg(&nats)
        .env_remove("MESH_STORE")
        .env_remove("MESH_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    let r: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}); stdout:\n{stdout}\nstderr:\n{stderr}"));
    eprintln!("{}", serde_json::to_string_pretty(&r).unwrap());

    let f = &r["fan_out"];
    assert_eq!(f["nodes"], 200, "{f}");
    assert_eq!(f["recorded"], 200, "every node's report recorded: {f}");
    assert_eq!(f["missing"], 0, "{f}");
    assert_eq!(f["twice"], 0, "no report recorded twice: {f}");
    let u = &r["update"];
    assert_eq!(u["recorded"], 200, "every node's report of the update: {u}");
    assert_eq!(u["twice"], 0, "{u}");
    assert_eq!(
        r["setup"]["not_bound"], 0,
        "every host bound: {}",
        r["setup"]
    );
    assert_eq!(r["users_file"]["identical"], true, "{}", r["users_file"]);
    let a = &r["artifact"];
    assert_eq!(a["hosts"], 10, "the artifact phase ran: {a}");
    assert_eq!(a["bytes"], 4 << 20, "{a}");
    assert_eq!(
        a["not_declared"], 0,
        "every host declared the artifact: {a}"
    );
    let second = &a["second"];
    for (what, t) in [
        ("through the reader", &a["reader"]),
        ("by the object store's own gets", &a["object_store"]),
        ("of the second version", &second["fetch"]),
    ] {
        assert_eq!(t["fetches"], 10, "{what}: {t}");
        assert_eq!(
            t["checked"], 10,
            "every fetch {what} complete, with the size and SHA-256 put: {t}"
        );
        assert_eq!(t["failed"], 0, "{what}: {t}");
    }
    assert_eq!(second["not_declared"], 0, "{second}");
    assert_eq!(
        second["refused_before"], 10,
        "no host reads a version its declaration does not name: {second}"
    );
    assert_eq!(
        second["first_refused_after"], 10,
        "nor the one it named before: {second}"
    );
    assert_eq!(second["cached_before"], 0, "{second}");
    // The cache is per whole file: a version differing in one chunk is
    // received whole (bytes, not a time).
    assert!(
        second["fetch"]["received_min"].as_u64().unwrap() >= 4 << 20,
        "{second}"
    );
    for i in r["ingestion"].as_array().expect("ingestion runs") {
        assert_eq!(i["not_recorded"], 0, "{i}");
    }
    assert!(
        out.status.success(),
        "the bench found a problem: {}",
        r["problems"]
    );
}

/// `--deploy` at CI size: every node moved to the new version, in ten
/// batches, the deployment recorded succeeded (times printed, not asserted).
#[test]
fn a_ci_sized_deploy_moves_every_node_in_ten_batches() {
    mesh_beside_the_bench();
    let nats = mesh_testkit::nats_server_binary().expect("nats-server (scripts/setup)");
    let out = Command::new(env!("CARGO_BIN_EXE_mesh-bench"))
        .args([
            "--deploy",
            "--hosts",
            "50",
            "--output",
            "json",
            "--nats-server",
        ])
        .arg(&nats)
        .env_remove("MESH_STORE")
        .env_remove("MESH_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    let r: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}); stdout:\n{stdout}\nstderr:\n{stderr}"));
    eprintln!("{}", serde_json::to_string_pretty(&r).unwrap());
    assert_eq!(r["fan_out"]["recorded"], 50, "{}", r["fan_out"]);
    assert_eq!(r["state"], "succeeded", "{r}");
    assert_eq!(r["on_new_version"], 50, "{r}");
    assert_eq!(r["batches_ms"].as_array().unwrap().len(), 10, "{r}");
    // No batch ends before its 1 s window could pass.
    for b in r["batches_ms"].as_array().unwrap() {
        assert!(b.as_f64().unwrap() >= 1000.0, "{r}");
    }
    assert!(
        out.status.success(),
        "the bench found a problem: {}",
        r["problems"]
    );
}

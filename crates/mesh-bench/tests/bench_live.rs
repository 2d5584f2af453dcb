//! `mesh-bench` at CI size: 200 simulated hosts on the bench's own broker,
//! controller and store. Asserts correctness only — every node's report
//! recorded, none twice, the users file identical when composed twice —
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
    for i in r["ingestion"].as_array().expect("ingestion runs") {
        assert_eq!(i["not_recorded"], 0, "{i}");
    }
    assert!(
        out.status.success(),
        "the bench found a problem: {}",
        r["problems"]
    );
}

//! Code reaches the nodes, live: a binary put with `mesh artifact put` runs
//! from each host's cache on exactly the nodes it is assigned to; a version
//! moves a module to other bytes and back; a host reads only what its
//! declaration names, enforced by the server; a tampered cache file is
//! fetched again; an artifact missing from the bus is reported `failed`
//! naming it, and runs once it is put again; 64 MiB arrive intact.
//! One mesh (controller, broker with the composed users file, three real
//! hosts) for every case.

#[path = "join_live/harness.rs"]
mod harness;

use std::path::{Path, PathBuf};
use std::time::Duration;

use harness::{Backend, Mesh, module_pid as pid, ok, out_text, sha256_hex, wait_until};

const LONG: Duration = Duration::from_secs(90);

/// A catalogue of four modules: `runner` runs an artifact, `steady` a
/// command the node has, `blob` carries a large artifact as an argument,
/// `boxed` runs the ticker's image archive in a container.
fn catalogue(dir: &Path) -> PathBuf {
    let root = dir.join("art-catalogue");
    for (name, run) in [
        ("runner", r#"command = ["${artifact:bin}", "3600"]"#),
        ("steady", r#"command = ["sleep", "3600"]"#),
        (
            "blob",
            r#"command = ["sh", "-c", "exec sleep 3600", "blob", "${artifact:data}"]"#,
        ),
        (
            "boxed",
            // Its check runs inside the container, through the engine: the
            // ticker refuses the argument, so it is unhealthy, saying so.
            "driver = \"container\"\nimage = \"${artifact:image}\"\ncommand = [\"--count\", \"2\"]\n\n[events]\nemits = [\"tick\"]\n\n[health]\nexec = [\"/bin/mesh-ticker\", \"--probe\"]\ninterval = \"2s\"\ntimeout = \"2s\"",
        ),
    ] {
        std::fs::create_dir_all(root.join(name)).unwrap();
        std::fs::write(
            root.join(name).join("mesh.toml"),
            format!(
                "[module]\nname = \"{name}\"\ndescription = \"runs from the artifact store\"\n\n[run]\n{run}\n"
            ),
        )
        .unwrap();
    }
    root
}

/// What `module`'s process on `host` executes.
fn exe(mesh: &Mesh, host: &str, module: &str) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{}/exe", pid(mesh, host, module)?)).ok()
}

/// `module` on `host` as the newest report has it: (state, reason).
fn reported(mesh: &Mesh, host: &str, module: &str) -> Option<(String, String)> {
    let o = mesh.mesh(&["modules", "--output", "json"]);
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).ok()?;
    rows.iter()
        .find(|r| r["node"] == host && r["module"] == module)
        .map(|r| {
            (
                r["state"].as_str().unwrap_or_default().to_string(),
                r["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
}

/// The containers labelled with `node`: "name module state", sorted.
fn containers(engine: &Path, node: &str) -> Vec<String> {
    let o = std::process::Command::new(engine)
        .args([
            "ps",
            "-a",
            "--filter",
            &format!("label=mesh.node={node}"),
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", out_text(&o));
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap_or_default();
    let mut rows: Vec<String> = listed
        .iter()
        .map(|c| {
            format!(
                "{} {} {}",
                c["Names"][0].as_str().unwrap_or_default(),
                c["Labels"]["mesh.module"].as_str().unwrap_or_default(),
                c["State"].as_str().unwrap_or_default()
            )
        })
        .collect();
    rows.sort();
    rows
}

/// Removes the node's containers when dropped, so a failed case leaves
/// none running.
struct RemoveContainers(PathBuf, &'static str);

impl Drop for RemoveContainers {
    fn drop(&mut self) {
        let listed = std::process::Command::new(&self.0)
            .args(["ps", "-a", "-q", "--filter"])
            .arg(format!("label=mesh.node={}", self.1))
            .output();
        if let Ok(o) = listed {
            for id in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                let _ = std::process::Command::new(&self.0)
                    .args(["rm", "-f", "-t", "0", "--ignore", id])
                    .output();
            }
        }
    }
}

fn cache_file(mesh: &Mesh, host: &str, sha: &str) -> PathBuf {
    mesh.host_dir(host)
        .join("artifacts")
        .join(format!("sha256-{sha}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_reaches_the_nodes_through_the_artifact_store() {
    let (mut mesh, mut hosts) = Mesh::with_hosts(Backend::Sqlite, &["n1", "n2", "n3"]).await;
    mesh.register(&catalogue(mesh.tmp.path()));
    let mut cases = 0;

    // Two builds of one program: the system's sleep, and the same with
    // bytes after its end (which it never reads).
    let v1 = std::fs::read("/bin/sleep").unwrap();
    let mut v2 = v1.clone();
    v2.extend_from_slice(b"\0mesh artifact v2");
    let (v1_file, v2_file) = (mesh.tmp.path().join("v1"), mesh.tmp.path().join("v2"));
    std::fs::write(&v1_file, &v1).unwrap();
    std::fs::write(&v2_file, &v2).unwrap();
    let (sha1, sha2) = (sha256_hex(&v1), sha256_hex(&v2));

    // Put: the reference, size and digest; the same bytes again are the
    // same reference, not an error.
    let put = ok(
        &mesh,
        &[
            "artifact",
            "put",
            v1_file.to_str().unwrap(),
            "--module",
            "runner",
            "--name",
            "bin",
            "--version",
            "v1",
        ],
    );
    let reference = format!("artifact-store://runner/bin@sha256:{sha1}");
    assert!(
        put.contains(&reference) && put.contains(&v1.len().to_string()),
        "{put}"
    );
    let again = ok(
        &mesh,
        &[
            "artifact",
            "put",
            v1_file.to_str().unwrap(),
            "--module",
            "runner",
            "--name",
            "bin",
            "--version",
            "v1",
        ],
    );
    assert!(
        again.contains(&reference) && again.contains("already stored"),
        "{again}"
    );
    ok(
        &mesh,
        &[
            "artifact",
            "put",
            v2_file.to_str().unwrap(),
            "--module",
            "runner",
            "--name",
            "bin",
            "--version",
            "v2",
        ],
    );
    let listed: Vec<serde_json::Value> = serde_json::from_str(&ok(
        &mesh,
        &["artifact", "list", "--module", "runner", "--output", "json"],
    ))
    .unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    // An operator's copy: checked as a host checks it.
    let copy = mesh.tmp.path().join("copy");
    ok(
        &mesh,
        &["artifact", "get", &reference, "-o", copy.to_str().unwrap()],
    );
    assert_eq!(std::fs::read(&copy).unwrap(), v1);
    cases += 1;

    // Assigned to 2 of 3 hosts at v1: each runs the file in its own cache.
    for node in ["n1", "n2"] {
        ok(
            &mesh,
            &[
                "assign",
                "runner",
                node,
                "--version",
                "v1",
                "--wait",
                "--timeout",
                "90s",
            ],
        );
        ok(&mesh, &["assign", "steady", node]);
    }
    for node in ["n1", "n2"] {
        assert!(
            wait_until(LONG, || exe(&mesh, node, "runner")
                == Some(cache_file(&mesh, node, &sha1))),
            "{node}: runner runs {:?}",
            exe(&mesh, node, "runner")
        );
    }
    assert!(
        !mesh.host_dir("n3").join("artifacts").exists(),
        "n3 fetched what it does not run"
    );
    let authority = ok(&mesh, &["authority", "explain", "host_n1"]);
    assert!(
        authority.contains("module runner on node n1 runs artifact bin"),
        "{authority}"
    );
    cases += 1;

    // A version move: runner restarts on the new bytes; steady does not.
    assert!(wait_until(LONG, || pid(&mesh, "n1", "steady").is_some()));
    let steady = pid(&mesh, "n1", "steady");
    let plan = ok(
        &mesh,
        &["plan", "assign", "runner", "n1", "--version", "v2"],
    );
    assert!(plan.contains(&format!("@sha256:{sha2}")), "{plan}");
    // `--wait` returns once the declaration carrying this version is
    // reported: the new bytes already run (the one before it, which had
    // the module at v1, is no answer).
    let moved = ok(
        &mesh,
        &[
            "assign",
            "runner",
            "n1",
            "--version",
            "v2",
            "--wait",
            "--timeout",
            "90s",
        ],
    );
    assert!(moved.contains("runner on n1: running"), "{moved}");
    assert_eq!(
        exe(&mesh, "n1", "runner"),
        Some(cache_file(&mesh, "n1", &sha2)),
        "`assign --version v2 --wait` returned with the old version running: {moved}"
    );
    ok(
        &mesh,
        &[
            "assign",
            "runner",
            "n1",
            "--version",
            "v1",
            "--wait",
            "--timeout",
            "90s",
        ],
    );
    assert_eq!(
        exe(&mesh, "n1", "runner"),
        Some(cache_file(&mesh, "n1", &sha1)),
        "`assign --version v1 --wait` returned with v2 running"
    );
    assert_eq!(pid(&mesh, "n1", "steady"), steady, "steady was restarted");
    cases += 1;

    // Tampered: one byte of n2's cached file changed is found at the next
    // start (the host started again) and fetched again.
    let cached = cache_file(&mesh, "n2", &sha1);
    let mut bytes = std::fs::read(&cached).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    let mut hosts_n2 = hosts.remove(1);
    hosts_n2.stop();
    std::fs::write(&cached, &bytes).unwrap();
    let host_n2 = mesh.host("n2", None);
    assert!(
        wait_until(LONG, || std::fs::read(&cached).is_ok_and(|b| b == v1)
            && exe(&mesh, "n2", "runner") == Some(cached.clone())),
        "{}",
        host_n2.log()
    );
    assert!(
        host_n2.log().contains("not what the declaration says"),
        "{}",
        host_n2.log()
    );
    cases += 1;

    // Missing from the bus (removed by whoever holds the whole API: no
    // object store client can delete a name written once): a node that must
    // fetch it reports `failed` naming it, and runs it once it is put again.
    let js = async_nats::jetstream::new(mesh.observer().await);
    let object = format!("runner/bin/sha256-{sha1}");
    let meta = mesh_core::subjects::artifact::meta(&object);
    let stored = mesh_bus::artifacts::stat(&js.client(), &object)
        .await
        .unwrap()
        .expect("v1 is stored");
    for (stream, subject) in [
        ("ARTIFACT_METAS", meta.clone()),
        ("OBJ_ARTIFACTS", meta),
        ("OBJ_ARTIFACTS", format!("$O.ARTIFACTS.C.{}", stored.nuid)),
    ] {
        js.get_stream(stream)
            .await
            .unwrap()
            .purge()
            .filter(subject)
            .await
            .unwrap();
    }
    ok(&mesh, &["assign", "runner", "n3", "--version", "v1"]);
    assert!(
        wait_until(LONG, || reported(&mesh, "n3", "runner").is_some_and(
            |(s, r)| s == "failed"
                && r.contains("artifact bin")
                && r.contains("not in the artifact store")
        )),
        "{:?}",
        reported(&mesh, "n3", "runner")
    );
    // Never started: its log is no empty success but said, exit 1.
    let logs = mesh.mesh(&["logs", "runner", "--node", "n3"]);
    let said = String::from_utf8_lossy(&logs.stderr);
    assert_eq!(logs.status.code(), Some(1), "{said}");
    assert!(
        said.contains(
            "runner on n3 has no log: it has never started there (`mesh reports n3` says why)"
        ),
        "{said}"
    );
    ok(
        &mesh,
        &[
            "artifact",
            "put",
            v1_file.to_str().unwrap(),
            "--module",
            "runner",
            "--name",
            "bin",
            "--version",
            "v1",
        ],
    );
    assert!(
        wait_until(LONG, || exe(&mesh, "n3", "runner")
            == Some(cache_file(&mesh, "n3", &sha1))),
        "{:?}",
        reported(&mesh, "n3", "runner")
    );
    cases += 1;

    // 64 MiB, random: fetched intact (flow control answered).
    let big: Vec<u8> = {
        use rand::RngCore as _;
        let mut b = vec![0u8; 64 << 20];
        rand::rng().fill_bytes(&mut b);
        b
    };
    let big_file = mesh.tmp.path().join("big");
    std::fs::write(&big_file, &big).unwrap();
    ok(
        &mesh,
        &[
            "artifact",
            "put",
            big_file.to_str().unwrap(),
            "--module",
            "blob",
            "--name",
            "data",
        ],
    );
    ok(
        &mesh,
        &["assign", "blob", "n1", "--wait", "--timeout", "90s"],
    );
    let sha_big = sha256_hex(&big);
    assert_eq!(
        std::fs::read(cache_file(&mesh, "n1", &sha_big)).unwrap(),
        big
    );
    cases += 1;

    // The server's own refusals, asked on the exact subjects: n3's host
    // (which runs v1 of runner and nothing of blob) and a module's key.
    let refused = |who: &str, seed: String| {
        let who = who.to_string();
        let big_name = format!("blob/data/sha256-{sha_big}");
        let mesh = &mesh;
        async move {
            let (client, refusals) = mesh.connect_hearing(&who, &seed).await;
            let want = mesh_bus::artifacts::Wanted {
                name: &big_name,
                nuid: "ANYNUID",
                size: 1,
                sha256: &"0".repeat(64),
            };
            let dest = std::env::temp_dir().join(format!("mesh-refused-{}", std::process::id()));
            let started = std::time::Instant::now();
            let got = mesh_bus::artifacts::fetch(
                &client,
                &refusals,
                &want,
                &dest,
                Duration::from_secs(20),
            )
            .await;
            (got, started.elapsed(), dest.exists())
        }
    };
    let host_seed = std::fs::read_to_string(mesh.host_dir("n3").join("nkey.seed")).unwrap();
    let (got, took, written) = refused("host_n3", host_seed).await;
    match got {
        Err(mesh_bus::artifacts::FetchError::Refused { refusal, .. }) => {
            assert!(
                refusal.subject.contains("$JS.API.DIRECT.GET.OBJ_ARTIFACTS"),
                "{refusal:?}"
            )
        }
        other => panic!("host_n3 reading blob's artifact: {other:?}"),
    }
    assert!(took < Duration::from_secs(10), "the refusal took {took:?}");
    assert!(!written);
    let module_seed =
        std::fs::read_to_string(mesh.module_dir("n3", "runner").join("nkey.seed")).unwrap();
    let (got, _, _) = refused("module_n3_runner", module_seed).await;
    assert!(
        matches!(got, Err(mesh_bus::artifacts::FetchError::Refused { .. })),
        "a module's key reading an artifact: {got:?}"
    );
    cases += 1;

    // A container module: the ticker's image, built here, put as an
    // artifact and run in a container on n2 whose ticks reach the stream.
    let engine = mesh_host::driver::container::require_engine()
        .unwrap_or_else(|e| panic!("install podman (scripts/setup): {e}"));
    let _cleanup = RemoveContainers(engine.clone(), "n2");
    let archive = harness::ticker_archive(&engine, mesh.tmp.path());
    ok(
        &mesh,
        &[
            "artifact",
            "put",
            archive.to_str().unwrap(),
            "--module",
            "boxed",
            "--name",
            "image",
        ],
    );
    let boxed = mesh_host::driver::container::container_name(
        &mesh_core::names::Name::new("n2").unwrap(),
        &mesh_core::names::Name::new("boxed").unwrap(),
        mesh_host::HostKeys::load(&mesh.host_dir("n2"))
            .unwrap()
            .host_key(),
    );
    ok(
        &mesh,
        &["assign", "boxed", "n2", "--wait", "--timeout", "90s"],
    );
    let js = async_nats::jetstream::new(mesh.observer().await);
    let last_tick = || async {
        let stream = js.get_stream("EVENTS").await.ok()?;
        let m = stream
            .get_last_raw_message_by_subject("mesh.mod.boxed.event.tick")
            .await
            .ok()?;
        serde_json::from_slice::<serde_json::Value>(&m.payload).ok()
    };
    let mut tick = None;
    for _ in 0..450 {
        tick = last_tick().await;
        if tick.as_ref().is_some_and(|t| t["payload"]["n"] == 2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let tick = tick.unwrap_or_else(|| {
        panic!(
            "no tick from the container; boxed: {:?}, host: {}",
            reported(&mesh, "n2", "boxed"),
            host_n2.log()
        )
    });
    assert_eq!(tick["module"], "boxed", "{tick}");
    assert_eq!(tick["node"], "n2", "{tick}");
    assert_eq!(tick["payload"]["n"], 2, "{tick}");
    assert_eq!(
        reported(&mesh, "n2", "boxed").map(|(s, _)| s).as_deref(),
        Some("running")
    );
    assert_eq!(
        containers(&engine, "n2"),
        [format!("{boxed} boxed running")]
    );
    // The exec check ran in the container (no /bin/mesh-ticker on the
    // host): its exit status and the ticker's own words are the reason.
    let health = || {
        let o = mesh.mesh(&["modules", "--output", "json"]);
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).ok()?;
        rows.into_iter()
            .find(|r| r["node"] == "n2" && r["module"] == "boxed")
    };
    let mut row = None;
    assert!(
        wait_until(LONG, || {
            row = health();
            row.as_ref().is_some_and(|r| r["health"] == "unhealthy")
        }),
        "boxed never unhealthy: {row:?}"
    );
    let reason = row.unwrap()["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        reason.contains(&format!(
            " exec {boxed} /bin/mesh-ticker --probe` exited with status 1"
        )) && reason.contains("mesh-ticker: unknown argument \"--probe\""),
        "{reason}"
    );
    cases += 1;

    // A host killed outright and started again: still exactly one
    // container for the module, running.
    let mut host_n2 = host_n2;
    host_n2.kill();
    let host_n2 = mesh.host("n2", None);
    assert!(
        wait_until(LONG, || reported(&mesh, "n2", "boxed")
            .is_some_and(|(s, _)| s == "running")
            && containers(&engine, "n2") == [format!("{boxed} boxed running")]),
        "{:?} {:?}\n{}",
        reported(&mesh, "n2", "boxed"),
        containers(&engine, "n2"),
        host_n2.log()
    );
    cases += 1;

    // Killed outright, unassigned meanwhile, and a container of the node
    // a declaration never named (an earlier run's, left running): both go
    // when the host starts again. A container of node n2 of another mesh
    // on this machine (another host key) stays.
    let mut host_n2 = host_n2;
    host_n2.kill();
    ok(&mesh, &["unassign", "boxed", "n2"]);
    let sleeper = "localhost/mesh-test-sleeper:latest";
    mesh_cli::image::build_archive(
        &engine,
        Path::new("/bin/sleep"),
        sleeper,
        &mesh.tmp.path().join("image-build"),
        &mesh.tmp.path().join("sleeper.oci.tar"),
    )
    .unwrap();
    let n2_key = mesh_host::HostKeys::load(&mesh.host_dir("n2"))
        .unwrap()
        .host_key()
        .to_string();
    for (module, host) in [("ghost", n2_key.as_str()), ("neighbour", "UANOTHERMESH")] {
        let run = std::process::Command::new(&engine)
            .args([
                "run",
                "-d",
                "--rm",
                "--runtime=runc",
                "--ulimit=nofile=1024:1024",
                "--ulimit=nproc=1024:1024",
                &format!("--name=mesh-n2-{module}"),
                "--label=mesh.node=n2",
                &format!("--label=mesh.module={module}"),
                &format!("--label=mesh.host={host}"),
                sleeper,
                "3600",
            ])
            .output()
            .unwrap();
        assert!(run.status.success(), "{}", out_text(&run));
    }
    let neighbour = ["mesh-n2-neighbour neighbour running".to_string()];
    assert!(
        containers(&engine, "n2").contains(&"mesh-n2-ghost ghost running".to_string()),
        "{:?}",
        containers(&engine, "n2")
    );
    let host_n2 = mesh.host("n2", None);
    assert!(
        wait_until(LONG, || containers(&engine, "n2") == neighbour),
        "{:?}\n{}",
        containers(&engine, "n2"),
        host_n2.log()
    );
    cases += 1;

    drop(host_n2);
    drop(hosts);
    mesh.controller.take();
    println!("artifacts: {cases} cases, 0 failures");
}

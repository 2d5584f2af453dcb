//! Builds, live: real git repositories the test makes, the example
//! `build-machine` module run by real hosts (`mesh build-machine`, from the
//! artifact store like any module), real `sh` builds. `mesh build` waits for
//! a build machine, is answered with the commit as the version, and the
//! build runs where it is assigned; work outlives a build machine killed
//! mid-build; a failure names no module; inputs are read from the files; the
//! build machine's key can do nothing but its role; an announcement heard
//! twice is recorded once. One mesh for every case.

#[path = "join_live/harness.rs"]
mod harness;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use harness::{Backend, Mesh, module_pid as pid, ok, out_text, sha256_hex, wait_until};

const LONG: Duration = Duration::from_secs(120);

fn git(repo: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .env("GIT_AUTHOR_NAME", "mesh test")
        .env("GIT_AUTHOR_EMAIL", "test@mesh.invalid")
        .env("GIT_COMMITTER_NAME", "mesh test")
        .env("GIT_COMMITTER_EMAIL", "test@mesh.invalid")
        .output()
        .expect("git (scripts/setup installs it)");
    assert!(o.status.success(), "git {args:?}: {}", out_text(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// Commits everything in `repo` and returns the commit.
fn commit(repo: &Path, message: &str) -> String {
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", message]);
    git(repo, &["rev-parse", "HEAD"])
}

/// The example module `name` (its directory in the example catalogue) as
/// a git repository of its own at `repo`, its manifest naming it: what an
/// operator's module repository is. Returns the first commit.
fn repository(name: &str, repo: &Path) -> String {
    std::fs::create_dir_all(repo).unwrap();
    let example = Mesh::examples().join(name);
    for entry in std::fs::read_dir(&example).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), repo.join(entry.file_name())).unwrap();
    }
    rewrite_repository(repo);
    git(repo, &["init", "-q", "-b", "main"]);
    commit(repo, "first")
}

fn rewrite_repository(repo: &Path) {
    let manifest = repo.join("mesh.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let url = format!("file://{}", repo.display());
    let text: String = text
        .lines()
        .map(|l| {
            if l.starts_with("repository = ") {
                format!("repository = \"{url}\"\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    std::fs::write(manifest, text).unwrap();
}

/// `mesh builds --output json`.
fn builds(mesh: &Mesh) -> Vec<serde_json::Value> {
    serde_json::from_str(&ok(mesh, &["builds", "--output", "json"])).unwrap()
}

fn with_id<'a>(all: &'a [serde_json::Value], id: &str) -> Vec<&'a serde_json::Value> {
    all.iter().filter(|b| b["id"] == id).collect()
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// The build directories a build machine on `host` has open now.
fn building_on(mesh: &Mesh, host: &str) -> usize {
    let dir = mesh
        .module_dir(host, "build-machine")
        .join("work/build-cache/builds");
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

/// Publishes on `subject` and waits for the server's refusal of exactly
/// it, after a flush (the round trip that makes the answer arrive).
async fn refused(client: &async_nats::Client, refusals: &mesh_bus::Refusals, subject: &str) {
    let mut watch = refusals.watch();
    client
        .publish(subject.to_string(), "forbidden".into())
        .await
        .unwrap();
    client.flush().await.unwrap();
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        watch.refused(|r| r.subject == subject),
    )
    .await
    .unwrap_or_else(|_| panic!("no refusal of {subject}"));
    assert_eq!(r.denied, mesh_bus::Denied::Publish);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builds_are_done_by_build_machines_and_recorded_once() {
    let (mesh, _hosts) = Mesh::with_hosts(Backend::Sqlite, &["n1", "n2", "n3"]).await;
    let tmp = mesh.tmp.path().to_path_buf();
    let mut cases = 0;

    // Two module repositories, and a catalogue of what to register: the
    // example build machine and the two modules as their repositories say.
    let hello = tmp.join("git/hello");
    let bundle = tmp.join("git/hello-bundle");
    let first = repository("hello", &hello);
    repository("hello-bundle", &bundle);
    let cat = tmp.join("build-catalogue");
    for (name, from) in [
        ("build-machine", Mesh::examples().join("build-machine")),
        ("hello", hello.clone()),
        ("hello-bundle", bundle.clone()),
    ] {
        std::fs::create_dir_all(cat.join(name)).unwrap();
        std::fs::copy(from.join("mesh.toml"), cat.join(name).join("mesh.toml")).unwrap();
    }
    ok(&mesh, &["catalogue", "register", cat.to_str().unwrap()]);
    // The build machine runs `mesh build-machine`: this mesh binary, put as
    // the module's artifact (stripped, as `mesh up` puts it).
    let mesh_program = harness::stripped("mesh");
    ok(
        &mesh,
        &[
            "artifact",
            "put",
            mesh_program.to_str().unwrap(),
            "--module",
            "build-machine",
            "--name",
            "mesh",
        ],
    );

    // Three builds submitted with no build machine assigned wait; `mesh
    // build` says why instead of hanging silently; once one is assigned,
    // all three are built.
    std::fs::write(
        hello.join("hello.in"),
        std::fs::read_to_string(hello.join("hello.in")).unwrap() + "# two\n",
    )
    .unwrap();
    let second = commit(&hello, "second");
    std::fs::write(
        hello.join("hello.in"),
        std::fs::read_to_string(hello.join("hello.in")).unwrap() + "# three\n",
    )
    .unwrap();
    let third = commit(&hello, "third");
    let waiting_err = tmp.join("waiting.err");
    let waiting = Command::new(harness::mesh_bin())
        .args(["build", &format!("hello@{first}"), "--dir"])
        .arg(&mesh.dir)
        .args(["--store", &mesh.store_url])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&waiting_err).unwrap())
        .spawn()
        .unwrap();
    let mut queued = Vec::new();
    for rev in [&second, &third] {
        let id = ok(&mesh, &["build", &format!("hello@{rev}"), "--no-wait"]);
        queued.push(id.trim().to_string());
    }
    assert!(
        wait_until(Duration::from_secs(30), || std::fs::read_to_string(
            &waiting_err
        )
        .unwrap_or_default()
        .contains("no module holding mesh-build-machine is assigned")),
        "mesh build said nothing of the missing build machine: {}",
        std::fs::read_to_string(&waiting_err).unwrap_or_default()
    );
    assert!(
        builds(&mesh).is_empty(),
        "nothing built before a build machine is assigned"
    );
    ok(&mesh, &["assign", "build-machine", "n3"]);
    let waited = waiting.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&waited.stdout).to_string();
    assert!(
        waited.status.success(),
        "{said}{}",
        std::fs::read_to_string(&waiting_err).unwrap_or_default()
    );
    assert!(said.contains(&format!("built hello at {first}")), "{said}");
    assert!(
        wait_until(LONG, || {
            let all = builds(&mesh);
            queued.iter().all(|id| {
                with_id(&all, id).len() == 1 && with_id(&all, id)[0]["state"] == "succeeded"
            })
        }),
        "the queued builds: {:?}",
        builds(&mesh)
    );
    let versions: std::collections::BTreeSet<String> = builds(&mesh)
        .iter()
        .map(|b| b["version"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        versions,
        [first.clone(), second.clone(), third.clone()]
            .into_iter()
            .collect()
    );
    cases += 1;

    // `mesh build` with a build machine: the version is the commit; the
    // artifact is in ARTIFACTS with the digest announced (the bytes the
    // build made: hello.in with the commit written in); `mesh assign` pins
    // it and the node runs it; `mesh builds` lists it.
    std::fs::write(
        hello.join("hello.in"),
        std::fs::read_to_string(hello.join("hello.in")).unwrap() + "# four\n",
    )
    .unwrap();
    let fourth = commit(&hello, "fourth");
    let said = ok(&mesh, &["build", "hello"]);
    assert!(said.contains(&format!("built hello at {fourth}")), "{said}");
    let expected = std::fs::read_to_string(hello.join("hello.in"))
        .unwrap()
        .replace("@VERSION@", &fourth);
    let sha = sha256_hex(expected.as_bytes());
    let reference = format!("artifact-store://hello/hello@sha256:{sha}");
    assert!(said.contains(&reference), "{said}\nexpected {reference}");
    let copy = tmp.join("hello.copy");
    ok(
        &mesh,
        &["artifact", "get", &reference, "-o", copy.to_str().unwrap()],
    );
    assert_eq!(std::fs::read_to_string(&copy).unwrap(), expected);
    // `mesh plan` shows the version the node would run: the newest build.
    let plan = ok(&mesh, &["plan", "assign", "hello", "n1"]);
    assert!(
        plan.contains(&format!("runs version {fourth} of hello)")),
        "{plan}"
    );
    ok(
        &mesh,
        &["assign", "hello", "n1", "--wait", "--timeout", "90s"],
    );
    let cached = mesh
        .host_dir("n1")
        .join("artifacts")
        .join(format!("sha256-{sha}"));
    assert!(
        wait_until(LONG, || pid(&mesh, "n1", "hello")
            .is_some_and(|p| cmdline(p).contains(cached.to_str().unwrap()))),
        "hello on n1 runs {:?}",
        pid(&mesh, "n1", "hello").map(cmdline)
    );
    let log = mesh.module_dir("n1", "hello").join("log");
    assert!(
        wait_until(LONG, || std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains(&format!("version {fourth}"))),
        "hello's log: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let all = builds(&mesh);
    let listed: Vec<_> = all
        .iter()
        .filter(|b| b["version"] == fourth.as_str())
        .collect();
    assert_eq!(listed.len(), 1, "{all:?}");
    assert_eq!(listed[0]["artifacts"][0], reference.as_str());
    cases += 1;

    // A build machine SIGKILLed mid-build: the work comes round to the
    // other (or to it, started again by its host), is built and recorded
    // once.
    ok(
        &mesh,
        &[
            "assign",
            "build-machine",
            "n2",
            "--wait",
            "--timeout",
            "90s",
        ],
    );
    let release = tmp.join("release-the-build");
    let build_sh = std::fs::read_to_string(hello.join("build.sh")).unwrap();
    std::fs::write(
        hello.join("build.sh"),
        build_sh.replacen(
            "set -eu\n",
            &format!(
                "set -eu\nwhile [ ! -e {} ]; do sleep 0.2; done\n",
                release.display()
            ),
            1,
        ),
    )
    .unwrap();
    let slow = commit(&hello, "slow");
    let id = ok(&mesh, &["build", &format!("hello@{slow}"), "--no-wait"])
        .trim()
        .to_string();
    let mut on = None;
    assert!(
        wait_until(LONG, || {
            on = ["n2", "n3"].into_iter().find(|h| building_on(&mesh, h) > 0);
            on.is_some()
        }),
        "no build machine took the slow build"
    );
    let victim = on.unwrap();
    let victim_pid = pid(&mesh, victim, "build-machine").expect("the build machine runs");
    unsafe {
        libc::kill(victim_pid as i32, libc::SIGKILL);
    }
    std::fs::write(&release, "").unwrap();
    assert!(
        wait_until(Duration::from_secs(150), || {
            let all = builds(&mesh);
            with_id(&all, &id)
                .first()
                .is_some_and(|b| b["state"] == "succeeded")
        }),
        "the build killed on {victim} was not built again: {:?}",
        builds(&mesh)
    );
    assert_eq!(with_id(&builds(&mesh), &id).len(), 1);
    std::fs::write(hello.join("build.sh"), &build_sh).unwrap();
    commit(&hello, "fast again");
    cases += 1;

    // A failing build: `mesh build` exits 1 with the reason and the log's
    // tail; the record names no module version.
    std::fs::write(
        hello.join("build.sh"),
        "#!/bin/sh\necho 'compiler says: no such thing'\nexit 3\n",
    )
    .unwrap();
    let broken = commit(&hello, "broken");
    let o = mesh.mesh(&["build", &format!("hello@{broken}")]);
    let text = out_text(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(text.contains("exit status: 3"), "{text}");
    assert!(text.contains("compiler says: no such thing"), "{text}");
    // `mesh build` answers from the announcement; the record follows it.
    let failed = || -> Vec<serde_json::Value> {
        builds(&mesh)
            .into_iter()
            .filter(|b| b["state"] == "failed")
            .collect()
    };
    assert!(wait_until(LONG, || failed().len() == 1), "{:?}", failed());
    let failed = failed();
    assert!(
        failed[0]["module"].is_null() && failed[0]["version"].is_null(),
        "{failed:?}"
    );
    std::fs::write(hello.join("build.sh"), &build_sh).unwrap();
    commit(&hello, "mended");
    cases += 1;

    // Announcing never fails a build (L100): EVENTS refuses every message
    // for a while (its size limit lowered to one byte), the build machine
    // keeps its finished build and retries, and once EVENTS takes it again
    // the build is recorded as it went: succeeded.
    let observer = async_nats::jetstream::new(mesh.observer().await);
    let mut events = observer
        .get_stream("EVENTS")
        .await
        .unwrap()
        .cached_info()
        .config
        .clone();
    let open = events.max_message_size;
    events.max_message_size = 1;
    observer.update_stream(events.clone()).await.unwrap();
    std::fs::write(
        hello.join("hello.in"),
        std::fs::read_to_string(hello.join("hello.in")).unwrap() + "# announced late\n",
    )
    .unwrap();
    let late = commit(&hello, "announced late");
    let id = ok(&mesh, &["build", &format!("hello@{late}"), "--no-wait"])
        .trim()
        .to_string();
    let refused_announcement = |host: &str| {
        std::fs::read_to_string(mesh.module_dir(host, "build-machine").join("log"))
            .unwrap_or_default()
            .lines()
            .any(|l| l.contains("could not announce a build yet") && l.contains(&id))
    };
    assert!(
        wait_until(LONG, || ["n2", "n3"].into_iter().any(refused_announcement)),
        "no build machine was refused announcing {id}"
    );
    assert!(with_id(&builds(&mesh), &id).is_empty());
    events.max_message_size = open;
    observer.update_stream(events).await.unwrap();
    assert!(
        wait_until(LONG, || with_id(&builds(&mesh), &id).first().is_some_and(
            |b| b["state"] == "succeeded" && b["version"] == late.as_str()
        )),
        "the build announced late: {:?}",
        with_id(&builds(&mesh), &id)
    );
    cases += 1;

    // Inputs read from the files: hello-bundle's inputs.txt names hello's
    // artifact; the build's inputs hold it, and the version graph points
    // from hello-bundle's version to hello's.
    std::fs::write(bundle.join("inputs.txt"), format!("{reference}\n")).unwrap();
    let bundle_version = commit(&bundle, "built on hello");
    let said = ok(&mesh, &["build", "hello-bundle"]);
    assert!(said.contains(&format!("built on {reference}")), "{said}");
    let all = builds(&mesh);
    let b: Vec<_> = all
        .iter()
        .filter(|b| b["version"] == bundle_version.as_str())
        .collect();
    assert_eq!(b[0]["inputs"], serde_json::json!([reference]));
    let dot = ok(&mesh, &["catalogue", "graph", "--versions"]);
    let edge = format!(
        "\"version:hello-bundle@{bundle_version}\" -> \"version:hello@{fourth}\" [label=\"built on hello\"]"
    );
    assert!(dot.contains(&edge), "{dot}\nexpected {edge}");
    // An input the store does not hold fails the build before it runs.
    std::fs::write(
        bundle.join("inputs.txt"),
        format!("artifact-store://hello/hello@sha256:{}\n", "0".repeat(64)),
    )
    .unwrap();
    commit(&bundle, "built on nothing");
    let o = mesh.mesh(&["build", "hello-bundle"]);
    assert_eq!(o.status.code(), Some(1), "{}", out_text(&o));
    assert!(
        out_text(&o).contains("is not in the artifact store"),
        "{}",
        out_text(&o)
    );
    cases += 1;

    // The build machine's key, refused by the server for another module's
    // events, for NODES, and for work of another seat — and allowed its
    // role's own: reading a meta, announcing.
    let seed =
        std::fs::read_to_string(mesh.module_dir("n3", "build-machine").join("nkey.seed")).unwrap();
    let (client, refusals) = mesh.connect_hearing("module_n3_build-machine", &seed).await;
    for subject in [
        "mesh.mod.hello.event.said",
        "mesh.node.n1.declaration",
        "$JS.API.STREAM.INFO.NODES",
        "$JS.API.CONSUMER.CREATE.NODES",
        "mesh.seat.jobs.work.job",
        "mesh.control.report.n3",
        "$JS.API.STREAM.PURGE.OBJ_ARTIFACTS",
    ] {
        refused(&client, &refusals, subject).await;
    }
    let meta = format!(
        "$JS.API.DIRECT.GET.OBJ_ARTIFACTS.{}",
        mesh_core::subjects::artifact::meta(&format!("hello/hello/sha256-{sha}"))
    );
    let answer = tokio::time::timeout(Duration::from_secs(10), client.request(meta, "".into()))
        .await
        .expect("a meta read is answered")
        .expect("a meta read is allowed");
    // The meta itself (an ObjectInfo naming the object), not an error.
    let info = String::from_utf8_lossy(&answer.payload).to_string();
    assert!(
        info.contains(&format!("\"name\":\"hello/hello/sha256-{sha}\"")),
        "{info}"
    );
    cases += 1;

    // Write-once by the server, not the writer's courtesy: the build
    // machine may publish on every meta subject (its names are new each
    // build), yet a second meta for the stored name — with a roll-up or
    // without — is refused in its publish's own ack, and the name still
    // resolves to its first meta.
    let name = format!("hello/hello/sha256-{sha}");
    let first = mesh_bus::artifacts::stat(&client, &name)
        .await
        .unwrap()
        .expect("hello's artifact is stored");
    let bm = async_nats::jetstream::new(client.clone());
    let repointed = serde_json::json!({
        "name": name, "bucket": "ARTIFACTS", "nuid": "Other0chunks", "size": 3,
        "chunks": 1, "deleted": false, "digest": format!("SHA-256={}=", "A".repeat(43)),
    });
    for (rollup, why) in [
        (None, "maximum messages per subject exceeded"),
        (Some("sub"), "rollup not permitted"),
    ] {
        let mut headers = async_nats::HeaderMap::new();
        if let Some(r) = rollup {
            headers.insert(async_nats::header::NATS_ROLLUP, r);
        }
        let acked = tokio::time::timeout(Duration::from_secs(5), async {
            bm.publish_with_headers(
                mesh_core::subjects::artifact::meta(&name),
                headers,
                repointed.to_string().into(),
            )
            .await
            .unwrap()
            .await
        })
        .await
        .expect("the publish is answered");
        let err = acked.expect_err("a second meta is stored");
        let said = std::error::Error::source(&err).map(|s| s.to_string());
        assert!(
            said.as_deref().is_some_and(|s| s.contains(why)),
            "roll-up {rollup:?}: {err}: {said:?}"
        );
    }
    let now = mesh_bus::artifacts::stat(&client, &name)
        .await
        .unwrap()
        .expect("still stored");
    assert_eq!((now.nuid, now.size), (first.nuid, first.size));
    cases += 1;

    // A `built` event delivered twice is recorded once.
    let js = async_nats::jetstream::new(client.clone());
    let envelope = serde_json::json!({
        "id": "twice-1", "module": "build-machine", "node": "n3", "at": 1,
        "payload": {"id": "twice-1", "module": null, "failure": "said twice", "log_tail": ""}
    });
    for _ in 0..2 {
        js.publish(
            "mesh.seat.mesh-build-machine.event.built",
            envelope.to_string().into(),
        )
        .await
        .unwrap()
        .await
        .expect("EVENTS stores the announcement");
    }
    assert!(
        wait_until(LONG, || mesh
            .controller()
            .log()
            .matches("build recorded before; acknowledged again")
            .count()
            >= 1),
        "the controller did not hear the second announcement: {}",
        mesh.controller().log()
    );
    let all = builds(&mesh);
    assert_eq!(with_id(&all, "twice-1").len(), 1, "{all:?}");
    assert_eq!(with_id(&all, "twice-1")[0]["failure"], "said twice");
    // A success announcing an artifact ARTIFACTS does not hold is no
    // version a host could ever fetch: recorded failed, naming it.
    let absent = "1".repeat(64);
    let claimed = serde_json::json!({
        "id": "claimed-1", "module": "build-machine", "node": "n3", "at": 2,
        "payload": {
            "id": "claimed-1", "module": "hello", "version": "feedface",
            "artifacts": [{"name": "hello", "reference": format!("artifact-store://hello/hello@sha256:{absent}"), "size": 5, "sha256": absent}],
            "inputs": [], "log_tail": ""
        }
    });
    js.publish(
        "mesh.seat.mesh-build-machine.event.built",
        claimed.to_string().into(),
    )
    .await
    .unwrap()
    .await
    .expect("EVENTS stores the announcement");
    assert!(
        wait_until(LONG, || !with_id(&builds(&mesh), "claimed-1").is_empty()),
        "the claimed build was never recorded: {}",
        mesh.controller().log()
    );
    let all = builds(&mesh);
    let claimed = with_id(&all, "claimed-1")[0];
    assert_eq!(claimed["state"], "failed", "{claimed}");
    assert!(claimed["version"].is_null(), "{claimed}");
    assert!(
        claimed["failure"]
            .as_str()
            .unwrap_or_default()
            .contains("which ARTIFACTS does not hold as announced"),
        "{claimed}"
    );
    assert!(!all.iter().any(|b| b["version"] == "feedface"), "{all:?}");
    cases += 1;

    // A third party hears the same outcomes: the stored `built` events,
    // read as an operator reads them, answer the recorded builds by id.
    let tail = ok(
        &mesh,
        &[
            "events",
            "tail",
            "seat:mesh-build-machine.built",
            "--all",
            "--count",
            "3",
            "--output",
            "json",
        ],
    );
    let recorded = builds(&mesh);
    let heard: Vec<serde_json::Value> = tail
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(heard.len(), 3, "{tail}");
    for e in &heard {
        let id = e["envelope"]["payload"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert_eq!(e["envelope"]["payload"]["module"], "hello", "{e}");
        assert_eq!(
            with_id(&recorded, &id).len(),
            1,
            "{id} heard, not recorded: {recorded:?}"
        );
    }
    cases += 1;

    drop(_hosts);
    println!("builds: {cases} cases, 0 failures");
}

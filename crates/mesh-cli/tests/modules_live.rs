//! Modules talking, live, through the full loop: a real controller
//! declares, real `mesh host` processes run the example modules through
//! the process driver, and the modules emit, consume, serve, call and work
//! on a permissioned TLS bus, each with the authority its manifest implies.

#[path = "join_live/harness.rs"]
mod harness;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use harness::{Backend, Mesh, mesh_bin, wait_until};
use mesh_bus::{BusConfig, CertPin, ClientCredential, Secret};
use mesh_core::names::Name;
use mesh_sdk::{Denied, Module, ModuleEnv, SdkError, ServerErrors};
use serde_json::{Value, json};

const LONG: Duration = Duration::from_secs(60);

/// The JSON lines a module appended to `file` in its working directory.
fn lines(mesh: &Mesh, host: &str, module: &str, file: &str) -> Vec<Value> {
    let path = mesh.module_dir(host, module).join("work").join(file);
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn module_log(mesh: &Mesh, host: &str, module: &str) -> String {
    std::fs::read_to_string(mesh.module_dir(host, module).join("log")).unwrap_or_default()
}

/// Waits until `module` on `host` has appended `n` lines to `file`.
fn wait_lines(mesh: &Mesh, host: &str, module: &str, file: &str, n: usize) -> Vec<Value> {
    assert!(
        wait_until(LONG, || lines(mesh, host, module, file).len() >= n),
        "{module} on {host} never wrote {n} lines to {file}: {:?}; its log:\n{}",
        lines(mesh, host, module, file),
        module_log(mesh, host, module)
    );
    lines(mesh, host, module, file)
}

/// Waits until `node`'s newest report satisfies `f`.
async fn wait_report(mesh: &Mesh, node: &str, mut f: impl FnMut(&mesh_store::Report) -> bool) {
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
async fn wait_running(mesh: &Mesh, node: &str, module: &str) {
    wait_report(mesh, node, |r| {
        r.outcomes
            .iter()
            .any(|o| o.module.as_str() == module && o.state == mesh_store::ModuleState::Running)
    })
    .await;
}

/// Waits until `stream` holds `n` messages.
async fn wait_stored(mesh: &Mesh, stream: &str, n: u64) {
    for _ in 0..1200 {
        if stored(mesh, stream).await == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{stream} never held {n}: {}", stored(mesh, stream).await);
}

/// How many messages a stream holds.
async fn stored(mesh: &Mesh, stream: &str) -> u64 {
    let js = async_nats::jetstream::new(mesh.observer().await);
    js.get_stream(stream)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .state
        .messages
}

/// `mesh person key` into the mesh's temp dir, then `mesh person add`.
fn person(mesh: &Mesh, name: &str, tools: &str) -> PathBuf {
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
fn person_key(mesh: &Mesh, name: &str) -> (PathBuf, String) {
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
fn call(mesh: &Mesh, seed: &Path, tool: &str, payload: &Value, extra: &[&str]) -> Output {
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

fn answer(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "mesh call: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// What the host gives `module` on `host`, for a test that connects with
/// the module's own key.
fn module_env(mesh: &Mesh, host: &str, module: &str) -> ModuleEnv {
    let pin = mesh_bus::fingerprint_of_pem_file(&mesh.dir.join("broker/cert.pem")).unwrap();
    ModuleEnv {
        bus_urls: vec![format!("tls://127.0.0.1:{}", mesh.port())],
        pin: CertPin::from_hex(&pin).unwrap(),
        nkey_file: mesh.module_dir(host, module).join("nkey.seed"),
        inbox_prefix: format!("_INBOX.module_{host}_{module}"),
        node: Name::new(host).unwrap(),
        module: Name::new(module).unwrap(),
        ack_timeout: Duration::from_secs(5),
    }
}

/// A raw connection with `module`'s key on `host`, hearing the server's
/// refusals.
async fn raw_as(mesh: &Mesh, host: &str, module: &str) -> (async_nats::Client, ServerErrors) {
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
async fn publish_refused(client: &async_nats::Client, errors: &ServerErrors, subject: &str) {
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

async fn subscribe_refused(client: &async_nats::Client, errors: &ServerErrors, subject: &str) {
    let refused = errors.refusal(Denied::Subscription, subject);
    let _sub = client.subscribe(subject.to_string()).await.unwrap();
    client.flush().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), refused)
        .await
        .unwrap_or_else(|_| panic!("subscribing to {subject} was not refused"));
}

/// Assigns the ticker to `node` and waits for its three ticks, stored.
async fn ticks_three(mesh: &Mesh, node: &str) {
    mesh.assign("ticker", node, true);
    let ticked = mesh.module_dir(node, "ticker").join("work/ticked");
    assert!(
        wait_until(LONG, || std::fs::read_to_string(&ticked)
            .is_ok_and(|t| t == "3")),
        "the ticker never emitted 3; its log:\n{}",
        module_log(mesh, node, "ticker")
    );
    wait_stored(mesh, "EVENTS", 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_assigned_after_three_events_receives_all_three() {
    let (mesh, _hosts) = Mesh::with_hosts(Backend::Sqlite, &["n1"]).await;
    ticks_three(&mesh, "n1").await;

    // Only now does a consumer exist: the stream is a log.
    mesh.assign("recorder", "n1", true);
    let heard = wait_lines(&mesh, "n1", "recorder", "heard.jsonl", 3);
    assert_eq!(heard.len(), 3, "{heard:?}");
    let ns: Vec<&Value> = heard
        .iter()
        .map(|h| &h["envelope"]["payload"]["n"])
        .collect();
    assert_eq!(ns, [&json!(1), &json!(2), &json!(3)]);
    for h in &heard {
        assert_eq!(h["subject"], "mesh.mod.ticker.event.tick");
        assert_eq!(h["name"], "tick");
        assert_eq!(h["envelope"]["module"], "ticker");
        assert_eq!(h["envelope"]["node"], "n1");
    }
    let ids: std::collections::BTreeSet<&str> = heard
        .iter()
        .map(|h| h["envelope"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 3, "three distinct events");

    // An administrator sees the same three, from the start.
    let out = mesh.mesh(&[
        "events",
        "tail",
        "ticker.tick",
        "--all",
        "--count",
        "3",
        "--output",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tailed: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        tailed
            .iter()
            .map(|v| v["envelope"]["id"].as_str().unwrap())
            .collect::<std::collections::BTreeSet<_>>(),
        ids,
        "events tail shows the stored events"
    );
    for v in &tailed {
        let at = v["envelope"]["at"].as_u64().unwrap();
        assert_eq!(v["time"], utc(at / 1000), "{v}");
    }

    // As text, each line starts with when it was emitted. Asked for more
    // than are stored, it stops once none comes within --timeout, saying
    // how many came, exit 1.
    let out = mesh.mesh(&[
        "events",
        "tail",
        "ticker.tick",
        "--all",
        "--count",
        "5",
        "--timeout",
        "1s",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "3 of 5 events; no more within 1s"
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    for (line, v) in lines.iter().zip(&tailed) {
        let time = v["time"].as_str().unwrap();
        assert!(
            line.starts_with(&format!("{time}  mesh.mod.ticker.event.tick  ticker@n1  ")),
            "{line}"
        );
    }
}

/// A module's own events carry no node in their subject, so the node an
/// envelope names is its emitter's word: `mesh events tail` shows it only
/// where the records bear it out. ticker runs on n3; an envelope it
/// publishes claiming n1 is shown as a claim, never as n1's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_claiming_another_node_is_shown_as_a_claim_not_as_that_nodes() {
    let (mesh, _hosts) = Mesh::with_hosts(Backend::Sqlite, &["n1", "n3"]).await;
    ticks_three(&mesh, "n3").await;
    let (client, _errors) = raw_as(&mesh, "n3", "ticker").await;
    let forged = mesh_core::event::EventEnvelope {
        id: "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0".into(),
        module: Name::new("ticker").unwrap(),
        node: Name::new("n1").unwrap(),
        at: 1_796_163_654_000,
        payload: json!({"n": 99}),
    };
    async_nats::jetstream::new(client)
        .publish(
            "mesh.mod.ticker.event.tick",
            forged.to_json().unwrap().into(),
        )
        .await
        .unwrap()
        .await
        .expect("stored: ticker may publish on its own subject");
    let tail = |format: &str| {
        let out = mesh.mesh(&[
            "events",
            "tail",
            "ticker.tick",
            "--all",
            "--count",
            "4",
            "--output",
            format,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let claim = "the envelope claims ticker@n1, but ticker is not assigned to n1: it runs on n3";
    let json: Vec<Value> = tail("json")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(json.len(), 4);
    for v in &json {
        let doubt = if v["envelope"]["id"] == forged.id.as_str() {
            json!(claim)
        } else {
            Value::Null
        };
        assert_eq!(v["doubt"], doubt, "{v}");
    }
    let text = tail("text");
    for line in text.lines() {
        if line.contains(&forged.id) {
            assert!(line.contains(&format!("  ticker@? ({claim})  ")), "{line}");
        } else {
            assert!(line.contains("  ticker@n3  "), "{line}");
        }
        assert!(
            !line.contains("  ticker@n1  "),
            "never shown as n1's: {line}"
        );
    }
}

/// RFC 3339 UTC to the second, as the system's `date` writes it: a second
/// opinion on the CLI's own conversion.
fn utc(secs: u64) -> String {
    let out = Command::new("date")
        .args(["-u", "-d", &format!("@{secs}"), "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seat_work_waits_comes_round_when_handed_back_and_follows_its_holder() {
    let (mesh, _hosts) = Mesh::with_hosts(Backend::Sqlite, &["n1", "n2"]).await;
    let alice = person(&mesh, "alice", "*");
    mesh.assign("greeter", "n1", true);
    wait_running(&mesh, "n1", "greeter").await;

    // Nobody holds jobs yet: the work waits in its stream.
    let submit = |payload: Value| {
        let out = call(
            &mesh,
            &alice,
            "greeter.submit",
            &json!({"seat": "jobs", "payload": payload}),
            &[],
        );
        answer(&out)["id"].as_str().unwrap().to_string()
    };
    let plain = submit(json!({"job": 1}));
    let handed = submit(json!({"job": 2, "hand_back": true}));
    assert_eq!(stored(&mesh, "SEAT_jobs").await, 2);

    mesh.assign("worker", "n1", true);
    let done = wait_lines(&mesh, "n1", "worker", "done.jsonl", 2);
    let delivered = |id: &str| {
        done.iter()
            .find(|d| d["id"] == id)
            .map(|d| d["delivered"].as_i64().unwrap())
    };
    assert_eq!(delivered(&plain), Some(1));
    assert_eq!(
        delivered(&handed),
        Some(2),
        "handed back once, done when it came round: {done:?}"
    );
    assert!(
        done.iter()
            .all(|d| d["from"] == "greeter" && d["node"] == "n1")
    );
    wait_stored(&mesh, "SEAT_jobs", 0).await;

    // The holder moves: work queued meanwhile is done on the new node.
    mesh.assign("worker", "n1", false);
    wait_report(&mesh, "n1", |r| {
        !r.outcomes.iter().any(|o| o.module.as_str() == "worker")
    })
    .await;
    let moved = submit(json!({"job": 3}));
    assert_eq!(stored(&mesh, "SEAT_jobs").await, 1);
    mesh.assign("worker", "n2", true);
    let on_n2 = wait_lines(&mesh, "n2", "worker", "done.jsonl", 1);
    assert_eq!(on_n2.len(), 1);
    assert_eq!(on_n2[0]["id"], moved.as_str());
    assert_eq!(on_n2[0]["node"], "n2");
    assert_eq!(
        lines(&mesh, "n1", "worker", "done.jsonl").len(),
        2,
        "nothing more was done on n1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_scoped_work_for_n1_is_taken_by_n1s_holder_and_never_by_n2s() {
    let (mesh, _hosts) = Mesh::with_hosts(Backend::Sqlite, &["n1", "n2"]).await;
    let alice = person(&mesh, "alice", "*");
    mesh.assign("greeter", "n1", true);
    mesh.assign("node-worker", "n1", true);
    mesh.assign("node-worker", "n2", true);
    wait_running(&mesh, "n1", "greeter").await;
    for i in 0..3 {
        let out = call(
            &mesh,
            &alice,
            "greeter.submit",
            &json!({"seat": "node-jobs", "node": "n1", "payload": {"i": i}}),
            &[],
        );
        answer(&out);
    }
    let out = call(
        &mesh,
        &alice,
        "greeter.submit",
        &json!({"seat": "node-jobs", "node": "n2", "payload": {"i": "for n2"}}),
        &[],
    );
    let for_n2 = answer(&out)["id"].as_str().unwrap().to_string();

    let n1 = wait_lines(&mesh, "n1", "node-worker", "done.jsonl", 3);
    let n2 = wait_lines(&mesh, "n2", "node-worker", "done.jsonl", 1);
    assert_eq!(n1.len(), 3, "{n1:?}");
    assert!(n1.iter().all(|d| d["node"] == "n1"), "{n1:?}");
    assert_eq!(n2.len(), 1, "n2's holder took only its own: {n2:?}");
    assert_eq!(n2[0]["id"], for_n2.as_str());

    // And the server is what keeps it so: n2's holder can neither bind nor
    // hear n1's worker consumer.
    let (client, errors) = raw_as(&mesh, "n2", "node-worker").await;
    publish_refused(
        &client,
        &errors,
        "$JS.API.CONSUMER.INFO.SEAT_node-jobs.seat_node-jobs_n1",
    )
    .await;
    subscribe_refused(&client, &errors, "mesh.deliver.seat_node-jobs_n1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modules_and_persons_get_exactly_what_they_declare() {
    let (mesh, _hosts) = Mesh::with_hosts(Backend::Sqlite, &["n1"]).await;
    mesh.assign("ticker", "n1", true);
    mesh.assign("greeter", "n1", true);
    wait_running(&mesh, "n1", "ticker").await;
    wait_running(&mesh, "n1", "greeter").await;

    // A module cannot emit as another, nor serve another's tool.
    let (client, errors) = raw_as(&mesh, "n1", "ticker").await;
    publish_refused(&client, &errors, "mesh.mod.greeter.event.tick").await;
    subscribe_refused(&client, &errors, "mesh.mod.greeter.tool.greet").await;
    // Nor call a tool it did not declare: refused by the server, said at
    // once (not a timeout), naming the tool and the caller.
    let ticker = Module::connect_with(&module_env(&mesh, "n1", "ticker"))
        .await
        .unwrap();
    match ticker.call("greeter.greet", json!({"name": "x"})).await {
        Err(SdkError::CallRefused {
            principal,
            tool,
            subject,
            ..
        }) => {
            assert_eq!(principal, "module_n1_ticker");
            assert_eq!(tool, "greeter.greet");
            assert_eq!(subject, "mesh.mod.greeter.tool.greet");
        }
        other => panic!("calling an undeclared tool: {other:?}"),
    }
    // What it does declare, it may.
    ticker.emit("tick", json!({"from": "test"})).await.unwrap();
    // Serving its own undeclared tool is refused as well.
    match ticker.serve("greet", |_| async { Ok(json!(null)) }).await {
        Err(SdkError::ServeRefused { subject, .. }) => {
            assert_eq!(subject, "mesh.mod.ticker.tool.greet")
        }
        other => panic!("serving an undeclared tool: {other:?}"),
    }

    // Persons: every tool, or a list.
    let alice = person(&mesh, "alice", "*");
    let bob = person(&mesh, "bob", "greeter.greet,greeter.count");
    let greeting = answer(&call(
        &mesh,
        &alice,
        "greeter.greet",
        &json!({"name": "ada"}),
        &[],
    ));
    assert_eq!(greeting, json!({"greeting": "hello, ada", "node": "n1"}));
    let greeting = answer(&call(
        &mesh,
        &bob,
        "greeter.greet",
        &json!({"name": "bob"}),
        &[],
    ));
    assert_eq!(greeting["greeting"], "hello, bob");
    let count = answer(&call(&mesh, &bob, "greeter.count", &json!(null), &[]));
    assert_eq!(count, json!({"greeted": 2}));
    let out = call(
        &mesh,
        &bob,
        "greeter.submit",
        &json!({"seat": "jobs", "payload": 1}),
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("person bob may not call tool greeter.submit"),
        "{err}"
    );
    // Alice may: the seat exists once registered, so the work is stored.
    let id = answer(&call(
        &mesh,
        &alice,
        "greeter.submit",
        &json!({"seat": "jobs", "payload": 1}),
        &[],
    ));
    assert!(id["id"].is_string(), "{id}");
    // A declared tool nobody serves right now says so.
    let out = call(&mesh, &alice, "audit-log.search", &json!(null), &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nothing serves tool audit-log.search"),
        "{err}"
    );
    // A tool the catalogue says no module has is named as such, with what
    // the module does serve (and the tool meant, when close).
    for (tool, said) in [
        (
            "greeter.nosuch",
            "module greeter serves no tool \"nosuch\"; it serves greet, count, submit",
        ),
        (
            "greeter.gret",
            "module greeter serves no tool \"gret\"; did you mean greet? (it serves greet, count, submit)",
        ),
        (
            "echo.say",
            "module echo serves no tool \"say\"; it serves none",
        ),
        (
            "gretter.greet",
            "no module \"gretter\" registered; did you mean greeter?",
        ),
    ] {
        let out = call(&mesh, &alice, tool, &json!(null), &[]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(said) && !err.contains("nothing serves"),
            "{err}"
        );
    }
}

/// `mesh person add` returns once the broker admits the person, and `mesh
/// person remove` once it refuses them: a call made at once after either
/// is answered as the records now say, every time (no retry here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_calls_at_once_after_being_added_and_is_refused_at_once_after_removal() {
    let (mesh, _hosts) = Mesh::with_hosts(Backend::Sqlite, &["n1"]).await;
    mesh.assign("greeter", "n1", true);
    wait_running(&mesh, "n1", "greeter").await;
    for i in 0..10 {
        let name = format!("p{i}");
        let (seed, key) = person_key(&mesh, &name);
        let out = mesh.mesh(&[
            "person",
            "add",
            &name,
            "--tools",
            "greeter.greet",
            "--nkey",
            &key,
        ]);
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && said.contains("the broker admits them now"),
            "{said}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let seed = seed.to_str().unwrap();
        let call = [
            "call",
            "greeter.greet",
            r#"{"name": "p"}"#,
            "--as",
            seed,
            "--person",
            &name,
        ];
        let greeting = answer(&mesh.mesh(&call));
        assert_eq!(greeting["greeting"], "hello, p", "call {i}");

        let out = mesh.mesh(&["person", "remove", &name]);
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && said.contains("the broker refuses their key now"),
            "{said}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = mesh.mesh(&call);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "removed, call {i}: {err}");
        assert!(
            err.contains("authorization violation"),
            "removed, call {i}: {err}"
        );
    }
}

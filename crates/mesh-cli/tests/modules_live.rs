//! Modules talking, live, through the full loop: a real controller
//! declares, real `mesh host` processes run the example modules through
//! the process driver, and the modules emit, consume, serve, call and work
//! on a permissioned TLS bus, each with the authority its manifest implies.

#[path = "join_live/harness.rs"]
mod harness;
#[path = "modules_live/helpers.rs"]
mod helpers;

use helpers::*;

use std::process::Command;

use harness::{Backend, Mesh, wait_until};
use mesh_core::names::Name;
use mesh_sdk::{Module, SdkError};
use serde_json::{Value, json};

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

    // A typo waits for nothing: refused at once, naming the closest name
    // (without the check it would wait out --timeout, or for ever).
    for (filter, said) in [
        (
            "tickr.tick",
            "no module `tickr` is registered, so nothing emits `tickr.tick`; did you mean `ticker.tick`?",
        ),
        (
            "ticker.tik",
            "`ticker` never emits `tik` (it emits `tick`); did you mean `ticker.tick`?",
        ),
    ] {
        let out = mesh.mesh(&["events", "tail", filter, "--count", "1", "--timeout", "5s"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{filter}: {err}");
        assert!(err.contains(said), "{filter}: {err}");
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
    // Its check is `sdk = true`: healthy once it said ready, its tools bound.
    wait_report(&mesh, "n1", |r| {
        r.outcomes.iter().any(|o| {
            o.module.as_str() == "greeter"
                && matches!(
                    o.health,
                    Some(mesh_core::report::ModuleHealth::Healthy { .. })
                )
        })
    })
    .await;

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

/// A seat renamed while work waits under its old name: the holder binds the
/// new seat's worker and nothing would take what `SEAT_<old>` holds. The
/// controller moves it onto the new seat's subjects, and the holder does it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_queued_under_a_seats_old_name_is_done_after_the_rename() {
    let (mesh, _hosts) = Mesh::with_hosts(Backend::Sqlite, &["n1"]).await;
    let alice = person(&mesh, "alice", "*");
    mesh.assign("greeter", "n1", true);
    wait_running(&mesh, "n1", "greeter").await;
    let mut queued = Vec::new();
    for job in 1..=2 {
        let out = call(
            &mesh,
            &alice,
            "greeter.submit",
            &json!({"seat": "jobs", "payload": {"job": job}}),
            &[],
        );
        queued.push(answer(&out)["id"].as_str().unwrap().to_string());
    }
    assert_eq!(stored(&mesh, "SEAT_jobs").await, 2);

    // jobs renamed to tasks: its holder's manifest says so; the greeter,
    // still naming jobs, is resolved to tasks.
    let worker = std::fs::read_to_string(Mesh::examples().join("worker/mesh.toml"))
        .unwrap()
        .replace("\"jobs\"", "\"tasks\"");
    let renamed = mesh.tmp.path().join("renamed");
    std::fs::create_dir_all(renamed.join("worker")).unwrap();
    std::fs::write(renamed.join("worker/mesh.toml"), worker).unwrap();
    std::fs::write(renamed.join("aliases.toml"), "[seats]\njobs = \"tasks\"\n").unwrap();
    mesh.register(&renamed);
    mesh.assign("worker", "n1", true);
    let done = wait_lines(&mesh, "n1", "worker", "done.jsonl", 2);
    let ids: Vec<&str> = done.iter().map(|d| d["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 2);
    for id in &queued {
        assert!(ids.contains(&id.as_str()), "{id} not done: {done:?}");
    }
    wait_stored(&mesh, "SEAT_tasks", 0).await;
    // Nothing waits under the old name any more: its stream is gone.
    let js = async_nats::jetstream::new(mesh.observer().await);
    let mut gone = false;
    for _ in 0..100 {
        if js.get_stream("SEAT_jobs").await.is_err() {
            gone = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        gone,
        "SEAT_jobs kept; the controller's log:\n{}",
        mesh.controller().log()
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

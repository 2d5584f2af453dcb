//! The SDK against a real, permissioned, TLS-on nats-server (the test
//! kit's): principals derived from a small catalogue, NKey seed files,
//! the broker pinned, the JetStream objects asserted as the controller
//! does. What only a server can say — a queue group shares tool calls,
//! progress keeps a claim, a termination ends redelivery, a consumer's
//! group shares events — is asserted here.

mod support;

use std::time::Duration;

use mesh_core::authority::{self, PrincipalKind};
use mesh_core::records::{Assignment, ControllerSpec, Records};
use mesh_core::{jetstream, subjects};
use mesh_sdk::{Module, ModuleEnv, SeatAddress};
use mesh_testkit::PermissionedBus;
use mesh_testkit::bus::nkey_seed_for;
use serde_json::json;
use support::{MODULES, catalogue, n, write_seed};

struct World {
    bus: PermissionedBus,
    js: async_nats::jetstream::Context,
    dir: tempfile::TempDir,
}

/// The bus for the catalogue above, every module on n1 and n2, with the
/// seat worker's ack wait shortened to `ack_wait` so a lost claim shows
/// within a test.
async fn world(ack_wait: u64) -> World {
    let catalogue = catalogue();
    let mut records = Records {
        nodes: vec![n("n1"), n("n2")],
        ..Records::default()
    };
    for node in ["n1", "n2"] {
        for m in MODULES {
            records.assignments.push(Assignment::new(n(node), n(m)));
        }
    }
    let controller = ControllerSpec::default();
    let principals = authority::derive(&catalogue, &records, &controller).unwrap();
    let bus = PermissionedBus::start(principals);
    let ctl = bus.connect(authority::CONTROLLER).await;
    let js = async_nats::jetstream::new(ctl.client.clone());
    let mut objects = jetstream::derive(&catalogue, &records, &controller).unwrap();
    for c in &mut objects.consumers {
        if c.name == "seat_jobs" {
            c.ack_wait_secs = ack_wait;
        }
    }
    mesh_bus::assert_objects(&js, &objects).await.unwrap();
    World {
        bus,
        js,
        dir: tempfile::tempdir().unwrap(),
    }
}

impl World {
    async fn module(&self, node: &str, module: &str) -> Module {
        let principal = PrincipalKind::Module {
            node: n(node),
            module: n(module),
        }
        .principal_name();
        let seed = self.dir.path().join(format!("{principal}.nk"));
        write_seed(&seed, &nkey_seed_for(&principal));
        let certs = self.bus.server.certificates().unwrap();
        let pin = mesh_bus::fingerprint_of_pem_file(&certs.cert_pem).unwrap();
        let env = ModuleEnv {
            bus_urls: vec![self.bus.server.url()],
            pin: mesh_bus::CertPin::from_hex(&pin).unwrap(),
            nkey_file: seed,
            inbox_prefix: subjects::inbox_prefix(&principal),
            node: n(node),
            module: n(module),
            ack_timeout: Duration::from_secs(5),
            ready_file: None,
        };
        Module::connect_with(&env).await.unwrap()
    }

    async fn queued(&self) -> u64 {
        let mut s = self.js.get_stream("SEAT_jobs").await.unwrap();
        s.info().await.unwrap().state.messages
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_served_by_two_instances_answers_each_call_once() {
    let w = world(30).await;
    let counts: Vec<std::sync::Arc<std::sync::atomic::AtomicU64>> =
        (0..2).map(|_| Default::default()).collect();
    let mut serving = Vec::new();
    let mut instances = Vec::new();
    for (i, node) in ["n1", "n2"].iter().enumerate() {
        let m = w.module(node, "greeter").await;
        let count = counts[i].clone();
        serving.push(
            m.serve("greet", move |req| {
                let count = count.clone();
                async move {
                    count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    Ok(json!({ "hello": req["name"] }))
                }
            })
            .await
            .unwrap(),
        );
        instances.push(m);
    }
    let caller = w.module("n1", "greeter").await;
    // A greeter does not declare it uses its own tool: as a module it may
    // not call it. The listener may not either: both refused, not timed out.
    let listener = w.module("n1", "listener").await;
    let err = listener.call("greeter.greet", json!({})).await.unwrap_err();
    assert!(
        matches!(err, mesh_sdk::SdkError::CallRefused { .. }),
        "{err}"
    );
    let err = caller.call("greeter.greet", json!({})).await.unwrap_err();
    assert!(
        matches!(err, mesh_sdk::SdkError::CallRefused { .. }),
        "{err}"
    );
    // The observer may call anything: 20 calls, each answered by exactly one
    // instance (without the queue group both would answer every call).
    let obs = w.bus.connect(mesh_testkit::bus::OBSERVER).await;
    for i in 0..20 {
        let r = obs
            .client
            .request(
                "mesh.mod.greeter.tool.greet",
                json!({"name": i}).to_string().into(),
            )
            .await
            .unwrap();
        let reply: serde_json::Value = serde_json::from_slice(&r.payload).unwrap();
        assert_eq!(reply, json!({"ok": {"hello": i}}));
    }
    obs.client.flush().await.unwrap();
    let total: u64 = counts
        .iter()
        .map(|c| c.load(std::sync::atomic::Ordering::SeqCst))
        .sum();
    assert_eq!(total, 20, "each call answered once");
    // A handler's error travels as the tool's error.
    let failing = w.module("n2", "greeter").await;
    drop(serving);
    let _s = failing
        .serve("greet", |_| async { Err("no greetings today".to_string()) })
        .await
        .unwrap();
    let r = obs
        .client
        .request("mesh.mod.greeter.tool.greet", "{}".into())
        .await
        .unwrap();
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&r.payload).unwrap(),
        json!({"error": "no greetings today"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_keeps_a_claim_past_the_ack_wait_and_a_lapsed_claim_comes_round() {
    // A 2 s ack wait: work of 4 s without progress is delivered again.
    let w = world(2).await;
    let submitter = w.module("n1", "greeter").await;
    let holder = w.module("n1", "worker").await;
    let jobs = SeatAddress::mesh("jobs").unwrap();
    let mut queue = holder.work("jobs").await.unwrap();

    let kept = submitter
        .submit(&jobs, "job", json!({"kept": true}))
        .await
        .unwrap();
    let work = queue.next().await.unwrap().unwrap();
    assert_eq!(work.envelope.id, kept);
    assert_eq!(work.envelope.module, n("greeter"));
    assert_eq!(work.kind, "job");
    assert_eq!(work.delivered, 1);
    work.keep_alive_every(
        Duration::from_millis(500),
        tokio::time::sleep(Duration::from_secs(4)),
    )
    .await;
    work.ack().await.unwrap();
    assert_eq!(w.queued().await, 0, "acknowledged work leaves the queue");

    let lapsed = submitter
        .submit(&jobs, "job", json!({"kept": false}))
        .await
        .unwrap();
    let first = queue.next().await.unwrap().unwrap();
    assert_eq!(first.envelope.id, lapsed);
    // No progress: the claim lapses and the same work comes again.
    let again = tokio::time::timeout(Duration::from_secs(10), queue.next())
        .await
        .expect("a lapsed claim is delivered again")
        .unwrap()
        .unwrap();
    assert_eq!(again.envelope.id, lapsed);
    assert_eq!(again.delivered, 2);
    // Terminated, it never comes again.
    again.term().await.unwrap();
    drop(first);
    assert!(
        tokio::time::timeout(Duration::from_secs(5), queue.next())
            .await
            .is_err(),
        "terminated work was delivered again"
    );
    assert_eq!(w.queued().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handed_back_work_comes_round_and_instances_share_events_through_the_group() {
    let w = world(30).await;
    let greeter = w.module("n1", "greeter").await;
    let holder = w.module("n2", "worker").await;
    let mut queue = holder.work("jobs").await.unwrap();
    let jobs = SeatAddress::mesh("jobs").unwrap();
    let id = greeter.submit(&jobs, "job", json!(1)).await.unwrap();
    let work = queue.next().await.unwrap().unwrap();
    work.hand_back(Duration::from_millis(200)).await.unwrap();
    let again = queue.next().await.unwrap().unwrap();
    assert_eq!(
        (again.envelope.id.as_str(), again.delivered),
        (id.as_str(), 2)
    );
    again.ack().await.unwrap();
    // Work of a kind the seat does not accept is refused by the server.
    let err = greeter.submit(&jobs, "other", json!(1)).await.unwrap_err();
    assert!(
        matches!(err, mesh_sdk::SdkError::SubmitRefused { .. }),
        "{err}"
    );

    // Two listener instances bound to one consumer: each event reaches one.
    let a = w.module("n1", "listener").await;
    let b = w.module("n2", "listener").await;
    let mut ea = a.events().await.unwrap();
    let mut eb = b.events().await.unwrap();
    for i in 0..10 {
        greeter.emit("greeted", json!({"i": i})).await.unwrap();
    }
    let mut seen = Vec::new();
    while seen.len() < 10 {
        let e = tokio::select! {
            e = ea.next() => e,
            e = eb.next() => e,
        }
        .unwrap()
        .unwrap();
        assert_eq!(e.subject, "mesh.mod.greeter.event.greeted");
        e.ack().await.unwrap();
        seen.push(e.envelope.payload["i"].as_i64().unwrap());
    }
    seen.sort();
    assert_eq!(seen, (0..10).collect::<Vec<_>>(), "each event once");
    // Nothing more comes to either.
    let more = tokio::time::timeout(Duration::from_secs(2), async {
        tokio::select! { e = ea.next() => e, e = eb.next() => e }
    })
    .await;
    assert!(more.is_err(), "an event was delivered twice");

    // A stored message that is no envelope, or an envelope naming another
    // module than its subject proves, is terminated, not redelivered for
    // ever, and the stream goes on after it.
    let obs = w.bus.connect(mesh_testkit::bus::OBSERVER).await;
    let js = async_nats::jetstream::new(obs.client.clone());
    let forged = mesh_core::event::EventEnvelope {
        id: "f0f0".into(),
        module: n("listener"),
        node: n("n1"),
        at: 1,
        payload: json!({"i": -1}),
    };
    for payload in [b"not json".to_vec(), forged.to_json().unwrap()] {
        js.publish("mesh.mod.greeter.event.greeted", payload.into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    greeter.emit("greeted", json!({"i": 10})).await.unwrap();
    let mut results = Vec::new();
    while results.len() < 3 {
        let r = tokio::select! { e = ea.next() => e, e = eb.next() => e }.unwrap();
        if let Ok(e) = &r {
            e.ack().await.unwrap();
        }
        results.push(r);
    }
    let refused: Vec<String> = results
        .iter()
        .filter_map(|r| match r {
            Err(mesh_sdk::SdkError::Malformed { reason, .. }) => Some(reason.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(refused.len(), 2, "{results:?}");
    assert!(
        refused.contains(
            &"the envelope claims listener@n1; the subject proves module greeter".to_string()
        ),
        "{refused:?}"
    );
    assert!(
        results
            .iter()
            .any(|r| r.as_ref().is_ok_and(|e| e.envelope.payload["i"] == 10)),
        "{results:?}"
    );
    let more = tokio::time::timeout(Duration::from_secs(35), async {
        tokio::select! { e = ea.next() => e, e = eb.next() => e }
    })
    .await;
    assert!(more.is_err(), "a terminated message came again: {more:?}");

    // A module that consumes nothing has no consumer to bind, and says so.
    let err = greeter.events().await.unwrap_err();
    assert!(
        err.to_string().contains("mod_greeter") && err.to_string().contains("EVENTS"),
        "{err}"
    );
}

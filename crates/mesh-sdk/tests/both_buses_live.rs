//! One SDK body on both buses: a permissioned nats-server and a RabbitMQ
//! whose users carry the rendered permissions, each module connected from
//! its `ModuleEnv` as the host would start it (its addresses, the broker's
//! pin, its seed file; on RabbitMQ the password its seed makes). An event
//! emitted is taken, a tool served is called, work submitted is taken,
//! handed back and acknowledged; what a module may not do is refused, on
//! each bus in its own way.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use mesh_bus::Secret;
use mesh_core::authority::{self, Principal, PrincipalKind};
use mesh_core::jetstream::{self, Objects};
use mesh_core::records::{Assignment, ControllerSpec, Records};
use mesh_core::subjects;
use mesh_sdk::{Module, ModuleEnv, SdkError, SeatAddress};
use mesh_testkit::bus::nkey_seed_for;
use mesh_testkit::{AmqpMesh, PermissionedBus};
use serde_json::json;
use support::{MODULES, catalogue, n, write_seed};

const WAIT: Duration = Duration::from_secs(10);

fn principal(module: &str) -> String {
    PrincipalKind::Module {
        node: n("n1"),
        module: n(module),
    }
    .principal_name()
}

/// Every module of the shared catalogue on n1: their principals and the
/// bus objects the controller would assert.
fn derived() -> (Vec<Principal>, Objects) {
    let catalogue = catalogue();
    let records = Records {
        nodes: vec![n("n1")],
        assignments: MODULES
            .iter()
            .map(|m| Assignment::new(n("n1"), n(m)))
            .collect(),
        ..Records::default()
    };
    let spec = ControllerSpec::default();
    (
        authority::derive(&catalogue, &records, &spec).unwrap(),
        jetstream::derive(&catalogue, &records, &spec).unwrap(),
    )
}

/// How a module is started on one bus: its addresses, the broker's pin,
/// and each module's seed.
struct Start {
    urls: Vec<String>,
    pin: mesh_bus::CertPin,
    seeds: BTreeMap<String, String>,
    dir: tempfile::TempDir,
}

impl Start {
    async fn module(&self, module: &str) -> Module {
        let principal = principal(module);
        let seed_file = self.dir.path().join(format!("{principal}.nk"));
        write_seed(&seed_file, &self.seeds[&principal]);
        let env = ModuleEnv {
            bus_urls: self.urls.clone(),
            pin: self.pin,
            nkey_file: seed_file,
            inbox_prefix: subjects::inbox_prefix(&principal),
            node: n("n1"),
            module: n(module),
            ack_timeout: Duration::from_secs(5),
            ready_file: None,
        };
        Module::connect_with(&env)
            .await
            .unwrap_or_else(|e| panic!("{module} connects: {}", mesh_sdk::chain(&e)))
    }
}

fn pin_of(cert_pem: &Path) -> mesh_bus::CertPin {
    mesh_bus::CertPin::from_hex(&mesh_bus::fingerprint_of_pem_file(cert_pem).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_body_on_nats() {
    let (principals, objects) = derived();
    let bus = PermissionedBus::start(principals);
    let ctl = bus.connect(authority::CONTROLLER).await;
    mesh_bus::assert_objects(&async_nats::jetstream::new(ctl.client.clone()), &objects)
        .await
        .unwrap();
    let start = Start {
        urls: vec![bus.server.url()],
        pin: pin_of(&bus.server.certificates().unwrap().cert_pem),
        seeds: MODULES
            .iter()
            .map(|m| (principal(m), nkey_seed_for(&principal(m))))
            .collect(),
        dir: tempfile::tempdir().unwrap(),
    };
    body(&start).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_body_on_amqp() {
    let (principals, objects) = derived();
    // Each module's seed made here, as its host would, and only the hash
    // of the password it makes announced to the broker.
    let seeds: BTreeMap<String, String> = MODULES
        .iter()
        .map(|m| (principal(m), nkeys::KeyPair::new_user().seed().unwrap()))
        .collect();
    let announced = seeds
        .iter()
        .map(|(p, s)| (p.clone(), mesh_bus::seam::announce(&Secret::new(s.clone()))))
        .collect();
    let mesh = AmqpMesh::start_announced(principals, objects, announced).await;
    let start = Start {
        urls: vec![format!("amqps://127.0.0.1:{}", mesh.rmq.amqp_port())],
        pin: pin_of(mesh.rmq.cert_pem()),
        seeds,
        dir: tempfile::tempdir().unwrap(),
    };
    body(&start).await;
}

async fn body(start: &Start) {
    let greeter = start.module("greeter").await;
    let listener = start.module("listener").await;
    let worker = start.module("worker").await;

    // An event emitted is taken from the listener's consumer.
    let mut events = listener.events().await.unwrap();
    greeter.emit("greeted", json!({"i": 1})).await.unwrap();
    let e = arrives("the event", events.next()).await;
    assert_eq!(
        (e.subject.as_str(), e.name.as_str()),
        ("mesh.mod.greeter.event.greeted", "greeted")
    );
    assert_eq!(e.envelope.module, n("greeter"));
    assert_eq!(e.envelope.payload, json!({"i": 1}));
    e.ack().await.unwrap();
    let err = greeter.emit("sneezed", json!({})).await.unwrap_err();
    assert!(matches!(err, SdkError::Refused { .. }), "{err}");
    // A module that consumes nothing has no consumer to bind, and is told
    // so: NATS refuses it asking after one (no grant), AMQP finds no queue.
    let err = greeter.events().await.unwrap_err();
    assert!(
        matches!(
            &err,
            SdkError::NoConsumer { consumer, .. } | SdkError::BindRefused { consumer, .. }
                if consumer == "mod_greeter"
        ),
        "{err}"
    );

    // A tool served is called; one the caller may not use is refused.
    let _serving = greeter
        .serve(
            "greet",
            |req| async move { Ok(json!({"hello": req["name"]})) },
        )
        .await
        .unwrap();
    let answer = call_once_served(&worker, json!({"name": "ada"})).await;
    assert_eq!(answer, json!({"hello": "ada"}));
    let err = greeter
        .call("greeter.greet", json!({"name": "me"}))
        .await
        .unwrap_err();
    assert!(matches!(err, SdkError::CallRefused { .. }), "{err}");

    // Work submitted is taken, handed back, taken again and acknowledged.
    let mut queue = worker.work("jobs").await.unwrap();
    let jobs = SeatAddress::mesh("jobs").unwrap();
    let id = greeter.submit(&jobs, "job", json!({"n": 7})).await.unwrap();
    let work = arrives("the work", queue.next()).await;
    assert_eq!(
        (
            work.envelope.id.as_str(),
            work.kind.as_str(),
            work.delivered
        ),
        (id.as_str(), "job", 1)
    );
    work.progress().await.unwrap();
    work.hand_back(Duration::from_millis(200)).await.unwrap();
    let again = arrives("handed-back work", queue.next()).await;
    assert_eq!(
        (again.envelope.id.as_str(), again.delivered),
        (id.as_str(), 2)
    );
    again.ack().await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(1), queue.next())
            .await
            .is_err(),
        "acknowledged work came again"
    );
    let err = greeter.submit(&jobs, "other", json!(1)).await.unwrap_err();
    assert!(matches!(err, SdkError::SubmitRefused { .. }), "{err}");
}

/// The next delivery, within [`WAIT`].
async fn arrives<T>(
    what: &str,
    next: impl std::future::Future<Output = Option<Result<T, SdkError>>>,
) -> T {
    tokio::time::timeout(WAIT, next)
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing within {WAIT:?}"))
        .unwrap_or_else(|| panic!("{what}: the deliveries ended"))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Calls `greeter.greet` until its server is live: a NATS subscription is
/// live at the server some time after its flush.
async fn call_once_served(caller: &Module, payload: serde_json::Value) -> serde_json::Value {
    let deadline = Instant::now() + WAIT;
    loop {
        match caller.call("greeter.greet", payload.clone()).await {
            Err(SdkError::NoServer { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other.unwrap(),
        }
    }
}

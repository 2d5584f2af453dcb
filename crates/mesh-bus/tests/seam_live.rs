//! The bus seam on both buses from one body: the same expectations run
//! against a permissioned nats-server and a RabbitMQ whose users carry the
//! rendered permissions, each principal connected as itself (the
//! controller, node n1's host), so the seam is proven within the authority
//! the mesh derives and nothing wider.

use std::path::Path;
use std::time::{Duration, Instant};

use mesh_bus::seam::{AmqpSide, Bus, Deliveries, NatsSide, Reply, SeamError, Settle};
use mesh_core::authority::{self, CONTROLLER};
use mesh_core::bus::BusKind;
use mesh_core::jetstream::{self, ConsumerSpec, Objects};
use mesh_core::names::Name;
use mesh_core::records::{Assignment, ControllerSpec, PersonRecord, Records, ToolAccess};
use mesh_core::subjects;
use mesh_testkit::{AmqpMesh, PermissionedBus};

const WAIT: Duration = Duration::from_secs(10);
/// How long "nothing more arrives" is watched for.
const QUIET: Duration = Duration::from_millis(800);

fn n(s: &str) -> Name {
    Name::new(s).unwrap()
}

enum Server {
    Nats(PermissionedBus),
    Amqp(AmqpMesh),
}

struct Mesh {
    server: Server,
    objects: Objects,
}

impl Mesh {
    async fn start(kind: BusKind) -> Mesh {
        let catalogue = mesh_state::load(&[
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/catalogue")
        ])
        .unwrap()
        .catalogue;
        let records = Records {
            nodes: vec![n("n1"), n("n2")],
            assignments: vec![Assignment::new(n("n2"), n("code-search"))],
            persons: vec![PersonRecord {
                name: n("alice"),
                tools: ToolAccess::All,
                role: None,
            }],
            ..Records::default()
        };
        let spec = ControllerSpec::default();
        let principals = authority::derive(&catalogue, &records, &spec).unwrap();
        let objects = jetstream::derive(&catalogue, &records, &spec).unwrap();
        let server = match kind {
            BusKind::Nats => {
                let bus = PermissionedBus::start(principals);
                let c = bus.connect(CONTROLLER).await;
                mesh_bus::assert_objects(&async_nats::jetstream::new(c.client), &objects)
                    .await
                    .unwrap();
                Server::Nats(bus)
            }
            BusKind::Amqp => Server::Amqp(AmqpMesh::start(principals, objects.clone()).await),
        };
        Mesh { server, objects }
    }

    async fn bus(&self, principal: &str) -> Bus {
        match &self.server {
            Server::Nats(b) => Bus::Nats(NatsSide::new(b.connect(principal).await.client)),
            Server::Amqp(m) => Bus::Amqp(AmqpSide::new(m.connect(principal).await, principal)),
        }
    }

    fn consumer(&self, name: &str) -> ConsumerSpec {
        self.objects
            .consumers
            .iter()
            .find(|c| c.name == name)
            .unwrap()
            .clone()
    }
}

async fn next(d: &mut Deliveries, who: &str) -> mesh_bus::seam::Delivery {
    tokio::time::timeout(WAIT, d.next())
        .await
        .unwrap_or_else(|_| panic!("{who}: no delivery within {WAIT:?}"))
        .unwrap_or_else(|| panic!("{who}: the deliveries ended"))
        .unwrap()
}

async fn nothing_more(d: &mut Deliveries, who: &str) {
    if let Ok(Some(x)) = tokio::time::timeout(QUIET, d.next()).await {
        let x = x.unwrap();
        panic!(
            "{who}: nothing more was expected, got {} {:?}",
            x.subject,
            String::from_utf8_lossy(&x.payload)
        );
    }
}

/// Publishes `payload` on `subject` every 100 ms until `heard` has a
/// message: a NATS subscription is live at the server only some time after
/// its flush (async-nats's flush writes, it does not wait for the server),
/// so a single publish right after it may find no one.
async fn until_heard(
    bus: &Bus,
    subject: &str,
    payload: &[u8],
    heard: &mut mesh_bus::seam::Messages,
) -> mesh_bus::seam::Message {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut every = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            m = heard.next() => return m.expect("the subscription ended").unwrap(),
            _ = every.tick() => {
                assert!(tokio::time::Instant::now() < deadline, "nothing heard on {subject} within {WAIT:?}");
                bus.publish(subject, payload).await.unwrap();
            }
        }
    }
}

/// Asks until someone serves `subject` (see [`until_heard`]).
async fn request_once_served(bus: &Bus, subject: &str, payload: &[u8]) -> Vec<u8> {
    let deadline = Instant::now() + WAIT;
    loop {
        match bus.request(subject, payload, WAIT).await {
            Err(SeamError::NoResponders { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other.unwrap(),
        }
    }
}

/// A node's declarations keep only the newest: published while the host is
/// away, only the last arrives; published while one is being applied, the
/// newest is the last to arrive and nothing older follows it.
async fn declarations_keep_the_newest(mesh: &Mesh) {
    let controller = mesh.bus(CONTROLLER).await;
    let host = mesh.bus("host_n1").await;
    let subject = subjects::node_declaration(&n("n1"));
    for d in ["d1", "d2", "d3"] {
        controller
            .publish_stored(&subject, d.as_bytes())
            .await
            .unwrap();
    }
    let node = mesh.consumer("n1");
    let mut deliveries = host.consume(&node, 1).await.unwrap();
    let first = next(&mut deliveries, "host_n1").await;
    assert_eq!(first.payload, b"d3");
    assert_eq!(first.subject, subject);
    first.settle(Settle::Ack).await.unwrap();
    nothing_more(&mut deliveries, "host_n1").await;

    // d4 being applied when d5 and d6 come.
    controller.publish_stored(&subject, b"d4").await.unwrap();
    let applying = next(&mut deliveries, "host_n1").await;
    assert_eq!(applying.payload, b"d4");
    controller.publish_stored(&subject, b"d5").await.unwrap();
    controller.publish_stored(&subject, b"d6").await.unwrap();
    applying.in_progress().await.unwrap();
    applying.settle(Settle::Ack).await.unwrap();
    let mut seen = Vec::new();
    loop {
        let d = next(&mut deliveries, "host_n1").await;
        let payload = String::from_utf8_lossy(&d.payload).into_owned();
        d.settle(Settle::Ack).await.unwrap();
        let newest = payload == "d6";
        seen.push(payload);
        if newest {
            break;
        }
    }
    nothing_more(&mut deliveries, "host_n1").await;
    assert!(seen.iter().all(|s| s == "d5" || s == "d6"), "{seen:?}");
}

/// A report waits until the controller takes it; handed back with a delay
/// it comes again (marked redelivered) no sooner; acknowledged, never again.
async fn a_report_is_held_retried_and_acknowledged(mesh: &Mesh) {
    let controller = mesh.bus(CONTROLLER).await;
    let host = mesh.bus("host_n1").await;
    let report = subjects::report(&n("n1"));
    host.publish_stored(&report, b"r1").await.unwrap();
    let control = mesh.consumer(subjects::consumer::CONTROLLER_CONTROL);
    let mut deliveries = controller.consume(&control, 10).await.unwrap();
    let d = next(&mut deliveries, "controller").await;
    assert_eq!(
        (d.subject.as_str(), d.payload.as_slice()),
        (report.as_str(), &b"r1"[..])
    );
    assert!(!d.redelivered);
    let d_deliveries = d.deliveries;
    let after = Duration::from_millis(600);
    let handed_back = Instant::now();
    d.settle(Settle::Retry { after }).await.unwrap();
    let again = next(&mut deliveries, "controller").await;
    assert!(
        handed_back.elapsed() >= after,
        "{:?}",
        handed_back.elapsed()
    );
    assert_eq!(again.payload, b"r1");
    assert!(again.redelivered);
    assert_eq!((d_deliveries, again.deliveries), (1, 2));
    again.settle(Settle::Ack).await.unwrap();
    nothing_more(&mut deliveries, "controller").await;

    // Terminated (malformed): not delivered again.
    host.publish_stored(&report, b"not json").await.unwrap();
    let bad = next(&mut deliveries, "controller").await;
    assert_eq!(bad.payload, b"not json");
    bad.settle(Settle::Terminate).await.unwrap();
    nothing_more(&mut deliveries, "controller").await;
}

/// A heartbeat reaches whoever hears heartbeats, and nothing keeps it.
async fn heartbeats_reach_the_controller(mesh: &Mesh) {
    let controller = mesh.bus(CONTROLLER).await;
    let host = mesh.bus("host_n1").await;
    let mut heard = controller
        .subscribe(subjects::ALL_HEARTBEATS)
        .await
        .unwrap();
    let beat = subjects::heartbeat(&n("n1"));
    let m = until_heard(&host, &beat, b"alive", &mut heard).await;
    assert_eq!(
        (m.subject.as_str(), m.payload.as_slice()),
        (beat.as_str(), &b"alive"[..])
    );
    // Kept nowhere once no one hears: a stored publish finds nothing to keep it.
    drop(heard);
    controller.close().await;
    let err = host.publish_stored(&beat, b"kept?").await.unwrap_err();
    match (host.kind(), &err) {
        (BusKind::Amqp, SeamError::Unroutable { subject }) => assert_eq!(subject, &beat),
        (BusKind::Nats, SeamError::Nats { action, .. }) => {
            assert!(action.contains(&beat), "{action}")
        }
        (kind, other) => panic!("{kind}: {other:?}"),
    }
}

/// A tool's server answers the asker, once; asking what no one serves is
/// said at once, not waited out.
async fn a_tool_answers_its_asker(mesh: &Mesh) {
    let server = mesh.bus("module_n2_code-search").await;
    let alice = mesh.bus("person_alice").await;
    let tool = "mesh.mod.code-search.tool.query";
    let mut calls = server.subscribe(tool).await.unwrap();
    let serving = tokio::spawn(async move {
        for _ in 0..2 {
            let call = calls.next().await.unwrap().unwrap();
            // On AMQP an answerer may write into any inbox: a forged answer
            // (another id) first, which the asker must not take.
            if let Some(Reply::Amqp { to, .. }) = &call.reply {
                let mut forged = call.clone();
                forged.reply = Some(Reply::Amqp {
                    to: to.clone(),
                    correlation: "0".repeat(32),
                });
                server.respond(&forged, b"forged").await.unwrap();
            }
            let mut answer = b"found: ".to_vec();
            answer.extend_from_slice(&call.payload);
            server.respond(&call, &answer).await.unwrap();
        }
        server
    });
    for q in ["fn main", "struct Mesh"] {
        let answer = request_once_served(&alice, tool, q.as_bytes()).await;
        assert_eq!(answer, format!("found: {q}").into_bytes());
    }
    let server = serving.await.unwrap();
    // A heard message that is no request cannot be answered.
    let mut plain = server.subscribe(tool).await.unwrap();
    let m = until_heard(&alice, tool, b"no reply wanted", &mut plain).await;
    assert!(matches!(
        server.respond(&m, b"?").await,
        Err(SeamError::NotARequest { .. })
    ));
    drop(plain);
    server.close().await;

    let started = Instant::now();
    let nobody = alice
        .request("mesh.mod.code-search.tool.nobody-serves", b"?", WAIT)
        .await
        .unwrap_err();
    assert!(
        matches!(&nobody, SeamError::NoResponders { subject } if subject.ends_with("nobody-serves")),
        "{nobody:?}"
    );
    assert!(started.elapsed() < WAIT / 2, "{:?}", started.elapsed());
}

async fn run_all(kind: BusKind) {
    let mesh = Mesh::start(kind).await;
    declarations_keep_the_newest(&mesh).await;
    a_report_is_held_retried_and_acknowledged(&mesh).await;
    heartbeats_reach_the_controller(&mesh).await;
    a_tool_answers_its_asker(&mesh).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seam_on_nats() {
    run_all(BusKind::Nats).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seam_on_amqp() {
    run_all(BusKind::Amqp).await;
}

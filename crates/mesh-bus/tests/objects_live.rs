//! The JetStream objects asserted on a real, permissioned nats-server (TLS
//! on, the users file composed from the example catalogue): the plan is
//! carried out streams first, asserting twice plans nothing, a deleted stream
//! is restored with its consumers, a consumer on a stream that is gone is
//! refused naming it — and a host binds, receives and acks through exactly
//! the grants derived for it.

use std::path::Path;

use async_nats::jetstream::{self, consumer};
use futures::StreamExt;
use mesh_bus::assert_objects;
use mesh_core::authority;
use mesh_core::catalogue::Catalogue;
use mesh_core::names::Name;
use mesh_core::records::{Assignment, ControllerSpec, Records};
use mesh_core::{jetstream as objects, subjects};
use mesh_testkit::PermissionedBus;
use mesh_testkit::bus::{Conn, WAIT, expect_no_violation, expect_violation};

fn n(s: &str) -> Name {
    Name::new(s).unwrap()
}

struct Mesh {
    bus: PermissionedBus,
    catalogue: Catalogue,
    records: Records,
}

impl Mesh {
    async fn connect(&self, name: &str) -> Conn {
        self.bus.connect(name).await
    }
}

/// Three nodes; a consuming module and a seat worker assigned.
fn start_mesh() -> Mesh {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/catalogue");
    let check = mesh_state::load(&[dir]).unwrap();
    assert_eq!(check.errors(), 0, "{:?}", check.diagnostics);
    let records = Records {
        nodes: vec![n("n1"), n("n2"), n("n3")],
        assignments: vec![
            Assignment::new(n("n1"), n("git-server")),
            Assignment::new(n("n2"), n("notifier")),
            Assignment::new(n("n2"), n("artifact-store")),
        ],
        live_tokens: vec![],
        persons: vec![],
        ..Records::default()
    };
    let principals =
        authority::derive(&check.catalogue, &records, &ControllerSpec::default()).unwrap();
    Mesh {
        bus: PermissionedBus::start(principals),
        catalogue: check.catalogue,
        records,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_are_asserted_idempotently_and_restored() {
    let mesh = start_mesh();
    let controller = mesh.connect("controller").await;
    let js = jetstream::new(controller.client.clone());
    let objs = objects::derive(&mesh.catalogue, &mesh.records, &ControllerSpec::default()).unwrap();

    let first = assert_objects(&js, &objs).await.unwrap();
    let created = |steps: &[objects::ObjectStep]| -> Vec<String> {
        steps
            .iter()
            .filter(|s| s.is_create())
            .map(objects::ObjectStep::object)
            .collect()
    };
    assert_eq!(
        created(&first).len(),
        objs.streams.len() + objs.consumers.len()
    );
    // Streams come first: every stream is created before any consumer.
    let last_stream = created(&first)
        .iter()
        .rposition(|c| c.starts_with("stream "))
        .unwrap();
    let first_consumer = created(&first)
        .iter()
        .position(|c| c.starts_with("consumer "))
        .unwrap();
    assert!(last_stream < first_consumer);

    let node_before = js
        .get_stream("NODES")
        .await
        .unwrap()
        .consumer_info("n1")
        .await
        .unwrap();
    let second = assert_objects(&js, &objs).await.unwrap();
    assert!(second.is_empty(), "{second:?}");
    let node_after = js
        .get_stream("NODES")
        .await
        .unwrap()
        .consumer_info("n1")
        .await
        .unwrap();
    assert_eq!(
        node_before.created, node_after.created,
        "the consumer was not recreated"
    );

    // A consumer on a missing stream is refused naming the stream.
    js.delete_stream("NODES").await.unwrap();
    let consumers_only = objects::Objects {
        streams: vec![],
        consumers: objs.consumers.clone(),
    };
    match assert_objects(&js, &consumers_only).await.unwrap_err() {
        mesh_bus::AssertError::Refused(objects::PlanError::MissingStream { stream, .. }) => {
            assert_eq!(stream, "NODES")
        }
        other => panic!("{other}"),
    }
    // The next full assert restores the stream and its consumers.
    let restored = created(&assert_objects(&js, &objs).await.unwrap());
    assert!(
        restored.contains(&"stream NODES".to_string()),
        "{restored:?}"
    );
    for node in ["n1", "n2", "n3"] {
        assert!(restored.contains(&format!("consumer {node} on NODES")));
    }
    expect_no_violation(&mut { controller });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_binds_receives_and_acks_its_own_declaration_only() {
    let mesh = start_mesh();
    let controller = mesh.connect("controller").await;
    let cjs = jetstream::new(controller.client.clone());
    let objs = objects::derive(&mesh.catalogue, &mesh.records, &ControllerSpec::default()).unwrap();
    assert_objects(&cjs, &objs).await.unwrap();
    cjs.publish(
        subjects::node_declaration(&n("n1")),
        "declaration v1".into(),
    )
    .await
    .unwrap()
    .await
    .unwrap();

    let mut host = mesh.connect("host_n1").await;
    let js = jetstream::new(host.client.clone());
    // Binding asks CONSUMER.INFO with the host's own credential and inbox.
    let stream = js.get_stream_no_info(subjects::STREAM_NODES).await.unwrap();
    let bound: consumer::PushConsumer = stream.get_consumer("n1").await.unwrap();
    let mut messages = bound.messages().await.unwrap();
    let msg = tokio::time::timeout(WAIT, messages.next())
        .await
        .expect("a declaration within the wait")
        .unwrap()
        .unwrap();
    assert_eq!(msg.payload.as_ref(), b"declaration v1");
    // The ack goes to $JS.ACK.NODES.n1.… — exactly the derived grant — and the
    // server confirms it (double ack answers on the host's inbox).
    msg.double_ack().await.expect("the ack is accepted");
    let info = cjs
        .get_stream("NODES")
        .await
        .unwrap()
        .consumer_info("n1")
        .await
        .unwrap();
    assert_eq!(info.num_ack_pending, 0);
    assert_eq!(info.ack_floor.stream_sequence, 1);
    expect_no_violation(&mut host);

    // Binding another node's consumer is refused by the server.
    let other = stream.get_consumer::<consumer::push::Config>("n2").await;
    assert!(other.is_err(), "host_n1 bound n2's consumer");
    expect_violation(&mut host, "publish to", "$JS.API.CONSUMER.INFO.NODES.n2").await;
}

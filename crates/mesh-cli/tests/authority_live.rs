//! Authority proven against a real, permissioned nats-server (TLS on): the
//! users file composed from `examples/catalogue` and a fleet's records is
//! accepted by `nats-server -t`, served, and every derived grant works while a
//! table of forbidden operations is refused — each refusal observed as the
//! server's permissions violation, after a round trip, never inferred from
//! silence.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use async_nats::{Client, ConnectOptions, Event, ServerError};
use futures::StreamExt;
use mesh_bus::{BusConfig, Secret, assert_objects};
use mesh_core::authority::{self, Permissions, Principal, PrincipalKind};
use mesh_core::catalogue::Catalogue;
use mesh_core::manifest::{Target, ToolRef};
use mesh_core::names::Name;
use mesh_core::records::{Assignment, ControllerSpec, PersonRecord, Records, ToolAccess};
use mesh_core::{jetstream as objects, subjects, users_file};
use mesh_testkit::NatsServer;
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(5);
const OBSERVER: &str = "observer";

fn n(s: &str) -> Name {
    Name::new(s).unwrap()
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/catalogue")
}

fn load_catalogue(dir: &Path) -> Catalogue {
    let report = mesh_state::load(&[dir.to_path_buf()]).unwrap();
    assert_eq!(
        report.errors(),
        0,
        "examples/catalogue checks clean: {:?}",
        report.diagnostics
    );
    report.catalogue
}

/// Three nodes, every example module assigned, two persons (one `*`), one
/// live token.
fn fleet() -> Records {
    let a = |node: &str, module: &str| Assignment::new(n(node), n(module));
    Records {
        nodes: vec![n("n1"), n("n2"), n("n3")],
        assignments: vec![
            a("n1", "nats-broker"),
            a("n1", "git-server"),
            a("n1", "audit-log"),
            a("n2", "notifier"),
            a("n2", "code-search"),
            a("n2", "artifact-store"),
            a("n3", "firewall-admin"),
            a("n1", "nftables"),
            a("n2", "nftables"),
            a("n3", "nftables"),
        ],
        live_tokens: vec![n("n4")],
        persons: vec![
            PersonRecord {
                name: n("alice"),
                tools: ToolAccess::All,
            },
            PersonRecord {
                name: n("bob"),
                tools: ToolAccess::Only(vec![ToolRef {
                    provider: Target::Seat(n("git")),
                    tool: n("clone"),
                }]),
            },
        ],
    }
}

/// A test-only user in the mesh's account that sees and may send everything:
/// proof that an allowed publish arrived, and the sender for allowed
/// subscriptions. Not a mesh principal; added to the test's file only.
fn observer() -> Principal {
    let all = |subject: &str| authority::Grant {
        subject: subject.into(),
        cause: authority::Cause::Rule {
            what: "test observer",
        },
    };
    Principal {
        name: OBSERVER.into(),
        kind: PrincipalKind::Person {
            person: n(OBSERVER),
        },
        source: "the test".into(),
        permissions: Permissions {
            publish: vec![all(">")],
            subscribe: vec![all(">")],
            allow_responses: None,
        },
    }
}

struct Mesh {
    server: NatsServer,
    principals: Vec<Principal>,
    passwords: BTreeMap<String, String>,
    catalogue: Catalogue,
    records: Records,
}

fn password_for(name: &str) -> String {
    // Fixed per name so a rewritten file keeps existing users valid.
    format!("pw-{name}-0123456789abcdef")
}

fn compose(principals: &[Principal]) -> (String, BTreeMap<String, String>) {
    let mut passwords = BTreeMap::new();
    let mut hashes = BTreeMap::new();
    for p in principals {
        let pw = password_for(&p.name);
        // Cost 4: the test connects dozens of principals; the cost under test
        // is the store's, not this one.
        hashes.insert(p.name.clone(), bcrypt::hash(&pw, 4).unwrap());
        passwords.insert(p.name.clone(), pw);
    }
    let file = users_file::compose(principals, &hashes).unwrap();
    assert!(file.omitted.is_empty());
    (file.text, passwords)
}

fn start_mesh() -> Mesh {
    let catalogue = load_catalogue(&examples());
    let records = fleet();
    let mut principals =
        authority::derive(&catalogue, &records, &ControllerSpec::default()).unwrap();
    principals.push(observer());
    let (text, passwords) = compose(&principals);
    let server = NatsServer::builder()
        .tls(true)
        // Bare file name: nats-server resolves includes against the including
        // file's directory, even absolute ones.
        .config("include users.conf")
        .file("users.conf", text)
        .start()
        .unwrap();
    mesh_testkit::nats::test_config(&server.config_path())
        .expect("nats-server -t accepts the composed configuration");
    Mesh {
        server,
        principals,
        passwords,
        catalogue,
        records,
    }
}

struct Conn {
    client: Client,
    errors: mpsc::UnboundedReceiver<String>,
}

impl Mesh {
    fn config(&self, name: &str) -> BusConfig {
        BusConfig {
            url: self.server.url(),
            user: name.into(),
            password: Secret::new(self.passwords[name].clone()),
            ca_file: Some(self.server.certificates().unwrap().ca_pem.clone()),
            inbox_prefix: Some(subjects::inbox_prefix(name)),
        }
    }

    async fn connect(&self, name: &str) -> Conn {
        let cfg = self.config(name);
        let (tx, errors) = mpsc::unbounded_channel();
        let opts =
            ConnectOptions::with_user_and_password(cfg.user.clone(), cfg.password.expose().into())
                .add_root_certificates(cfg.ca_file.clone().unwrap())
                .require_tls(true)
                .custom_inbox_prefix(cfg.inbox_prefix.clone().unwrap())
                .event_callback(move |event| {
                    let tx = tx.clone();
                    async move {
                        if let Event::ServerError(ServerError::Other(e)) = event {
                            let _ = tx.send(e);
                        }
                    }
                });
        let client = opts
            .connect(cfg.url.as_str())
            .await
            .unwrap_or_else(|e| panic!("{name} connects: {e}"));
        Conn { client, errors }
    }
}

/// A concrete subject matched by a grant pattern.
fn concrete(pattern: &str) -> String {
    pattern
        .split('.')
        .map(|t| match t {
            "*" => "x1",
            ">" => "x2",
            t => t,
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// Waits for the server's permissions violation for `op` ("Publish to" or
/// "Subscription to") on `subject`. A timeout fails: silence is not a
/// refusal. Any other server error fails too, so a refusal of something that
/// should have been allowed cannot hide in the queue.
async fn expect_violation(conn: &mut Conn, op: &str, subject: &str) {
    let wanted = format!("permissions violation for {op} \"{subject}\"").to_lowercase();
    match tokio::time::timeout(WAIT, conn.errors.recv()).await {
        Ok(Some(e)) if e.to_lowercase().contains(&wanted) => {}
        Ok(Some(other)) => panic!("expected {wanted:?}, the server said {other:?}"),
        Ok(None) | Err(_) => panic!("expected {wanted:?}, got no refusal within {WAIT:?}"),
    }
}

/// No server error has been reported for this connection so far.
fn expect_no_violation(conn: &mut Conn) {
    if let Ok(e) = conn.errors.try_recv() {
        panic!("unexpected server error: {e}");
    }
}

/// Publishes `payload` from `sender` until `sub` receives it. Client flush
/// only writes the socket; the server processes two connections in no
/// particular order, so a single publish could pass a subscription the server
/// has not registered yet.
async fn deliver(
    sender: &Client,
    subject: &str,
    sub: &mut async_nats::Subscriber,
    payload: &str,
) -> bool {
    let deadline = tokio::time::Instant::now() + WAIT;
    while tokio::time::Instant::now() < deadline {
        sender
            .publish(subject.to_string(), payload.to_string().into())
            .await
            .unwrap();
        sender.flush().await.unwrap();
        let step = tokio::time::Instant::now() + Duration::from_millis(200);
        while let Ok(Some(m)) = tokio::time::timeout_at(step, sub.next()).await {
            if m.payload.as_ref() == payload.as_bytes() {
                return true;
            }
        }
    }
    false
}

async fn allowed_publish(conn: &mut Conn, observer: &Conn, subject: &str, who: &str) {
    let mut watch = observer
        .client
        .subscribe(subject.to_string())
        .await
        .unwrap();
    // The observer's own probe coming back proves its subscription is live.
    assert!(deliver(&observer.client, subject, &mut watch, "probe").await);
    let payload = format!("pub-{subject}");
    assert!(
        deliver(&conn.client, subject, &mut watch, &payload).await,
        "{who}: publish to {subject} did not arrive"
    );
    expect_no_violation(conn);
}

async fn allowed_subscribe(conn: &mut Conn, observer: &Conn, subject: &str, who: &str) {
    let mut sub = conn.client.subscribe(subject.to_string()).await.unwrap();
    let payload = format!("sub-{subject}");
    assert!(
        deliver(&observer.client, subject, &mut sub, &payload).await,
        "{who}: subscription to {subject} received nothing"
    );
    expect_no_violation(conn);
}

async fn refused_publish(conn: &mut Conn, subject: &str) {
    conn.client
        .publish(subject.to_string(), "forbidden".into())
        .await
        .unwrap();
    conn.client.flush().await.unwrap();
    expect_violation(conn, "publish to", subject).await;
}

async fn refused_subscribe(conn: &mut Conn, subject: &str) {
    let _sub = conn.client.subscribe(subject.to_string()).await.unwrap();
    conn.client.flush().await.unwrap();
    expect_violation(conn, "subscription to", subject).await;
}

/// (principal, operation, subject): things the derivation must not allow.
const FORBIDDEN: &[(&str, Op, &str)] = &[
    // A host reaches only its own node.
    ("host_n1", Op::Sub, "mesh.node.n2.declaration"),
    ("host_n1", Op::Sub, "mesh.deliver.n2"),
    ("host_n1", Op::Sub, "mesh.node.n1.declaration"),
    ("host_n1", Op::Pub, "mesh.control.report.n2"),
    ("host_n1", Op::Pub, "mesh.control.heartbeat.n2"),
    ("host_n1", Op::Pub, "$JS.ACK.NODES.n2.1.1.1.1.1"),
    ("host_n1", Op::Pub, "$JS.API.STREAM.INFO.NODES"),
    ("host_n1", Op::Pub, "$JS.API.CONSUMER.INFO.NODES.n2"),
    ("host_n1", Op::Pub, "$JS.API.CONSUMER.CREATE.NODES.n1"),
    ("host_n1", Op::Sub, "_INBOX.host_n2.x"),
    ("host_n1", Op::Sub, "_INBOX.>"),
    ("host_n1", Op::Pub, "mesh.node.n1.declaration"),
    ("host_n1", Op::Pub, "mesh.mod.audit-log.event.entry-written"),
    ("host_n1", Op::Sub, "mesh.mod.*.event.>"),
    // A module emits only its own declared events, and acks only its own.
    (
        "module_n1_audit-log",
        Op::Pub,
        "mesh.mod.git-server.event.repo-created",
    ),
    (
        "module_n1_audit-log",
        Op::Pub,
        "mesh.mod.audit-log.event.not-declared",
    ),
    ("module_n1_audit-log", Op::Pub, "mesh.seat.git.event.pushed"),
    ("module_n1_audit-log", Op::Pub, "$JS.API.STREAM.LIST"),
    (
        "module_n1_audit-log",
        Op::Pub,
        "$JS.ACK.EVENTS.mod_notifier.1.1.1.1.1",
    ),
    ("module_n1_audit-log", Op::Sub, "mesh.deliver.mod_notifier"),
    (
        "module_n1_audit-log",
        Op::Sub,
        "_INBOX.module_n2_notifier.x",
    ),
    ("module_n1_audit-log", Op::Sub, "mesh.seat.git.tool.clone"),
    (
        "module_n1_audit-log",
        Op::Pub,
        "mesh.seat.packet-filter.work.rule-change",
    ),
    ("module_n1_audit-log", Op::Pub, "mesh.control.report.n1"),
    (
        "module_n2_notifier",
        Op::Pub,
        "mesh.seat.mesh-build-machine.event.built",
    ),
    (
        "module_n2_notifier",
        Op::Pub,
        "mesh.mod.audit-log.tool.tail",
    ),
    (
        "module_n3_firewall-admin",
        Op::Pub,
        "mesh.seat.mesh-build-machine.work.build",
    ),
    (
        "module_n3_nftables",
        Op::Pub,
        "$JS.ACK.SEAT_packet-filter.seat_other.1.1.1.1.1",
    ),
    // A person asks and nothing else.
    ("person_bob", Op::Pub, "mesh.seat.git.tool.create-repo"),
    ("person_bob", Op::Sub, "mesh.seat.git.tool.clone"),
    ("person_bob", Op::Pub, "_INBOX.module_n2_code-search.x"),
    (
        "person_bob",
        Op::Sub,
        "mesh.mod.git-server.event.repo-created",
    ),
    ("person_bob", Op::Sub, "mesh.deliver.mod_audit-log"),
    (
        "person_bob",
        Op::Pub,
        "$JS.ACK.EVENTS.mod_audit-log.1.1.1.1.1",
    ),
    ("person_bob", Op::Sub, "_INBOX.person_alice.x"),
    ("person_alice", Op::Sub, "mesh.seat.*.event.>"),
    (
        "person_alice",
        Op::Pub,
        "mesh.mod.audit-log.event.entry-written",
    ),
    ("person_alice", Op::Pub, "$JS.API.INFO"),
    ("person_alice", Op::Pub, "_INBOX.module_n1_audit-log.x"),
    // An enrolling node reaches its enrolment subject and inbox only.
    ("enrol_n4", Op::Sub, "_INBOX.enrol.n1.x"),
    ("enrol_n4", Op::Sub, "mesh.node.n4.declaration"),
    ("enrol_n4", Op::Sub, "mesh.deliver.n4"),
    ("enrol_n4", Op::Pub, "mesh.control.enrol.n1"),
    ("enrol_n4", Op::Pub, "mesh.control.report.n4"),
    ("enrol_n4", Op::Sub, "_INBOX.>"),
    // The controller answers enrolments, and no other principal's inbox.
    ("controller", Op::Pub, "_INBOX.host_n1.x"),
    ("controller", Op::Sub, "_INBOX.host_n1.x"),
    ("controller", Op::Sub, "mesh.mod.*.event.>"),
    (
        "controller",
        Op::Pub,
        "mesh.mod.audit-log.event.entry-written",
    ),
];

#[derive(Debug, Clone, Copy)]
enum Op {
    Pub,
    Sub,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_matrix() {
    let mesh = start_mesh();
    let observer = mesh.connect(OBSERVER).await;
    let (mut allowed, mut refused) = (0usize, 0usize);
    for p in mesh.principals.iter().filter(|p| p.name != OBSERVER) {
        let mut conn = mesh.connect(&p.name).await;
        for g in p.permissions.publish_subjects() {
            allowed_publish(&mut conn, &observer, &concrete(g), &p.name).await;
            allowed += 1;
        }
        for g in p.permissions.subscribe_subjects() {
            allowed_subscribe(&mut conn, &observer, &concrete(g), &p.name).await;
            allowed += 1;
        }
        for (who, op, subject) in FORBIDDEN.iter().filter(|(w, _, _)| *w == p.name) {
            assert!(mesh.principals.iter().any(|p| p.name == *who));
            match op {
                Op::Pub => refused_publish(&mut conn, subject).await,
                Op::Sub => refused_subscribe(&mut conn, subject).await,
            }
            refused += 1;
        }
    }
    // Every row of the table named a principal that exists and was run.
    assert_eq!(refused, FORBIDDEN.len());
    assert!(refused >= 40 && allowed >= 40);
    println!("authority matrix: {allowed} allowed ok, {refused} refused ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_requests_are_answered_and_persons_cannot_answer() {
    let mesh = start_mesh();
    let server = mesh.connect("module_n2_code-search").await;
    let mut calls = server
        .client
        .subscribe("mesh.mod.code-search.tool.query")
        .await
        .unwrap();
    server.client.flush().await.unwrap();
    let responder = tokio::spawn(async move {
        let req = calls.next().await.unwrap();
        // allow_responses: one reply to the requester's own inbox.
        server
            .client
            .publish(req.reply.unwrap(), "found".into())
            .await
            .unwrap();
        server.client.flush().await.unwrap();
        server
    });
    let alice = mesh.connect("person_alice").await;
    let answer = tokio::time::timeout(
        WAIT,
        alice
            .client
            .request("mesh.mod.code-search.tool.query", "fn main".into()),
    )
    .await
    .expect("answered in time")
    .expect("a reply, not a refusal");
    assert_eq!(answer.payload.as_ref(), b"found");
    let mut server = responder.await.unwrap();
    expect_no_violation(&mut server);

    // The module cannot use allow_responses to publish anywhere else.
    refused_publish(&mut server, "_INBOX.person_alice.unasked").await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_admits_a_new_principal_without_dropping_anyone() {
    let mut mesh = start_mesh();
    let host = mesh.connect("host_n1").await;
    let id_before = host.client.server_info().client_id;
    let pid = mesh.server.pid();

    let mut records = mesh.records.clone();
    records.nodes.push(n("n5"));
    let mut principals =
        authority::derive(&mesh.catalogue, &records, &ControllerSpec::default()).unwrap();
    principals.push(observer());
    let (text, passwords) = compose(&principals);
    mesh.server.write_file("users.conf", &text).unwrap();
    mesh.passwords = passwords;
    mesh.server.reload().unwrap();

    // A failed reload is only logged: confirm it took by connecting.
    let mut newcomer = None;
    for _ in 0..100 {
        let cfg = mesh.config("host_n5");
        if let Ok(c) = mesh_bus::connect(&cfg).await {
            newcomer = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let newcomer = newcomer.expect("host_n5 connects after the reload");
    newcomer.flush().await.unwrap();
    assert_eq!(mesh.server.pid(), pid, "reloaded, not restarted");

    // The existing connection stayed up: same server-side id, still working.
    host.client.flush().await.unwrap();
    assert_eq!(host.client.server_info().client_id, id_before);
    assert_eq!(
        host.client.connection_state(),
        async_nats::connection::State::Connected
    );
    assert!(
        mesh.server
            .wait_for_log("Reloaded server configuration", Duration::from_secs(5))
    );
}

//! Authority proven against a real, permissioned nats-server (TLS on): the
//! users file composed from `examples/catalogue` and a fleet's records is
//! accepted by `nats-server -t`, served, and every derived grant works while a
//! table of forbidden operations is refused — each refusal observed as the
//! server's permissions violation, after a round trip, never inferred from
//! silence.

use std::time::Duration;

use futures::StreamExt;
use mesh_bus::{BusConfig, ClientCredential, Secret};
use mesh_core::authority;
use mesh_core::catalogue::Catalogue;
use mesh_core::records::{ControllerSpec, Records};
use mesh_core::subjects;
use mesh_testkit::PermissionedBus;
use mesh_testkit::bus::{
    Conn, OBSERVER, WAIT, allowed_publish, allowed_subscribe, concrete, expect_no_violation,
    nkey_seed_for, refused_publish, refused_subscribe,
};

mod authority_table;

use authority_table::{FORBIDDEN, Op, RUNNER_NUID, artifact_forbidden, n, runner_object};

struct Mesh {
    bus: PermissionedBus,
    catalogue: Catalogue,
    records: Records,
}

fn start_mesh() -> Mesh {
    let (catalogue, records) = authority_table::mesh();
    let principals = authority::derive(&catalogue, &records, &ControllerSpec::default()).unwrap();
    Mesh {
        bus: PermissionedBus::start(principals),
        catalogue,
        records,
    }
}

impl Mesh {
    fn config(&self, name: &str) -> BusConfig {
        BusConfig {
            url: self.bus.server.url(),
            principal: name.into(),
            credential: ClientCredential::NKey(Secret::new(nkey_seed_for(name))),
            ca_file: Some(self.bus.ca_pem()),
            inbox_prefix: Some(subjects::inbox_prefix(name)),
            pin: None,
        }
    }

    async fn connect(&self, name: &str) -> Conn {
        self.bus.connect(name).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_matrix() {
    let mesh = start_mesh();
    let observer = mesh.connect(OBSERVER).await;
    let (mut allowed, mut refused) = (0usize, 0usize);
    for p in mesh.bus.principals.iter().filter(|p| p.name != OBSERVER) {
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
            assert!(mesh.bus.principals.iter().any(|p| p.name == *who));
            match op {
                Op::Pub => refused_publish(&mut conn, subject).await,
                Op::Sub => refused_subscribe(&mut conn, subject).await,
            }
            refused += 1;
        }
    }
    // Artifacts: n1's host reads runner's object and nothing else.
    let n1 = mesh
        .bus
        .principals
        .iter()
        .find(|p| p.name == "host_n1")
        .unwrap();
    let reads: Vec<&str> = n1
        .permissions
        .publish_subjects()
        .into_iter()
        .filter(|s| s.contains("OBJ_ARTIFACTS"))
        .collect();
    assert_eq!(
        reads,
        subjects::artifact::reader_publish(
            &runner_object(),
            &subjects::artifact::Nuid::new(RUNNER_NUID).unwrap()
        )
        .iter()
        .map(String::as_str)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>()
    );
    let artifact_rows = artifact_forbidden();
    for (who, op, subject) in &artifact_rows {
        let mut conn = mesh.connect(who).await;
        match op {
            Op::Pub => refused_publish(&mut conn, subject).await,
            Op::Sub => refused_subscribe(&mut conn, subject).await,
        }
        refused += 1;
    }
    // Every row of the table named a principal that exists and was run.
    assert_eq!(refused, FORBIDDEN.len() + artifact_rows.len());
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
async fn reload_admits_a_new_principal_without_dropping_anyone() {
    let mut mesh = start_mesh();
    let host = mesh.connect("host_n1").await;
    let id_before = host.client.server_info().client_id;
    let pid = mesh.bus.server.pid();

    let mut records = mesh.records.clone();
    records.nodes.push(n("n5"));
    let principals =
        authority::derive(&mesh.catalogue, &records, &ControllerSpec::default()).unwrap();
    mesh.bus.recompose(principals);
    mesh.bus.server.reload().unwrap();

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
    assert_eq!(mesh.bus.server.pid(), pid, "reloaded, not restarted");

    // The existing connection stayed up: same server-side id, still working.
    host.client.flush().await.unwrap();
    assert_eq!(host.client.server_info().client_id, id_before);
    assert_eq!(
        host.client.connection_state(),
        async_nats::connection::State::Connected
    );
    assert!(
        mesh.bus
            .server
            .wait_for_log("Reloaded server configuration", Duration::from_secs(5))
    );
}

//! Joining a mesh, live: genesis, the broker on its configuration, a real
//! `mesh controller`, tokens from `mesh node add`, and enrolments — by raw
//! clients where the test must shape the request, by real `mesh host`
//! processes everywhere else.

#[path = "join_live/harness.rs"]
mod harness;

use std::time::Duration;

use async_nats::jetstream;
use futures::StreamExt as _;
use harness::{Backend, Mesh, wait_until};
use mesh_core::enrolment::{EnrolAnswer, EnrolRequest, REFUSED};
use mesh_core::token::Token;

const LONG: Duration = Duration::from_secs(30);

/// Sends `req` as the token's enrolment principal and returns the answer,
/// or `None` when the connection closed first (the reload that admitted the
/// host removed the enrolment principal).
async fn send_request(
    mesh: &Mesh,
    token: &Token,
    req: &EnrolRequest,
    wait: Duration,
) -> Option<EnrolAnswer> {
    let inbox = mesh_core::subjects::enrol_inbox_prefix(&token.node);
    let client = mesh_bus::connect(&mesh.bus("enrol", token.enrolment_seed.expose(), Some(inbox)))
        .await
        .expect("a live token's key connects");
    let mut answers = client.subscribe(req.reply.clone()).await.unwrap();
    client.flush().await.unwrap();
    let js = jetstream::new(client.clone());
    js.publish(mesh_core::subjects::enrol(&token.node), req.to_json().into())
        .await
        .unwrap()
        .await
        .expect("CONTROL stores the request");
    let got = tokio::time::timeout(wait, answers.next()).await.ok().flatten();
    got.map(|m| EnrolAnswer::parse(&m.payload).expect("an answer"))
}

fn request(token: &Token) -> (EnrolRequest, nkeys::KeyPair) {
    let host = nkeys::KeyPair::new_user();
    let enrolment = nkeys::KeyPair::from_seed(token.enrolment_seed.expose()).unwrap();
    let req = EnrolRequest {
        node: token.node.clone(),
        enrolment_key: enrolment.public_key(),
        host_key: host.public_key(),
        xkey: nkeys::XKey::new().public_key(),
        reply: format!("{}.t{}", mesh_core::subjects::enrol_inbox_prefix(&token.node), rand_suffix()),
    };
    (req, host)
}

fn rand_suffix() -> u32 {
    std::process::id() ^ (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos())
}

/// The broker's answer to a connect with `seed`: `Ok` admitted, `Err` with
/// the client's reason.
async fn try_connect(mesh: &Mesh, principal: &str, seed: &str, inbox: String) -> Result<(), String> {
    match mesh_bus::connect(&mesh.bus(principal, seed, Some(inbox))).await {
        Ok(c) => {
            c.flush().await.map_err(|e| e.to_string())?;
            Ok(())
        }
        Err(e) => Err(format!("{e:#?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_refuses_alike_logs_why_and_enrols_a_good_request() {
    let mut mesh = Mesh::new(Backend::Sqlite);
    mesh.start_controller();

    // Expired: the enrolment principal stays in the users file until the
    // next composition, so the request reaches the controller.
    let t1 = Token::decode(&mesh.node_add("n1", "1s")).unwrap();
    let enrol_key = nkeys::KeyPair::from_seed(t1.enrolment_seed.expose()).unwrap().public_key();
    assert!(wait_until(LONG, || mesh.users_file().contains(&enrol_key)), "enrol_n1 composed");
    let now = mesh_store::now_ms() as u64;
    if t1.expires_at > now {
        // The expiry is the event: wait exactly for it.
        tokio::time::sleep(Duration::from_millis(t1.expires_at - now + 50)).await;
    }
    let (req, _) = request(&t1);
    let answer = send_request(&mesh, &t1, &req, LONG).await;
    assert_eq!(answer, Some(EnrolAnswer::refused()), "expired");
    mesh.controller().wait_log("expired", LONG);

    // Unknown: a request naming a key no token was issued with.
    let t2 = Token::decode(&mesh.node_add("n2", "1h")).unwrap();
    let enrol2 = nkeys::KeyPair::from_seed(t2.enrolment_seed.expose()).unwrap().public_key();
    assert!(wait_until(LONG, || mesh.users_file().contains(&enrol2)), "enrol_n2 composed");
    let (mut req, _) = request(&t2);
    req.enrolment_key = nkeys::KeyPair::new_user().public_key();
    let answer = send_request(&mesh, &t2, &req, LONG).await;
    // One message for every reason.
    let Some(EnrolAnswer::Refused { message, .. }) = answer else {
        panic!("{answer:?}")
    };
    assert_eq!(message, REFUSED);
    mesh.controller().wait_log("no such token was issued for this node", LONG);

    // Malformed: terminated, logged, and not redelivered (CONTROL empties).
    let client = mesh_bus::connect(&mesh.bus(
        "enrol",
        t2.enrolment_seed.expose(),
        Some(mesh_core::subjects::enrol_inbox_prefix(&t2.node)),
    ))
    .await
    .unwrap();
    jetstream::new(client.clone())
        .publish("mesh.control.enrol.n2", "{not json".into())
        .await
        .unwrap()
        .await
        .unwrap();
    mesh.controller().wait_log("enrolment request terminated", LONG);
    let observer = mesh.observer().await;
    let js = jetstream::new(observer.clone());
    let mut empty = false;
    for _ in 0..100 {
        let mut control = js.get_stream("CONTROL").await.unwrap();
        if control.info().await.unwrap().state.messages == 0 {
            empty = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(empty, "every request taken, none left to come round again");

    // A good request: spent, consumer made, the host admitted, the
    // enrolment principal gone and its key refused.
    let (req, host) = request(&t2);
    // The answer is seldom heard: the reload closes the enrolment connection.
    let _ = send_request(&mesh, &t2, &req, Duration::ZERO).await;
    mesh.controller().wait_log("node enrolled", LONG);
    let host_seed = host.seed().unwrap();
    let mut admitted = Err(String::new());
    for _ in 0..100 {
        admitted = try_connect(&mesh, "host_n2", &host_seed, "_INBOX.host_n2".into()).await;
        if admitted.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    admitted.expect("the host's own key is admitted once the composition is live");
    let users = mesh.users_file();
    assert!(users.contains(&host.public_key()));
    assert!(!users.contains(&enrol2), "the enrolment principal is gone:\n{users}");
    let refused = try_connect(
        &mesh,
        "enrol_n2",
        t2.enrolment_seed.expose(),
        mesh_core::subjects::enrol_inbox_prefix(&t2.node),
    )
    .await;
    let why = refused.expect_err("a spent token's key no longer connects");
    assert!(why.to_lowercase().contains("authorization"), "{why}");
    assert!(js.get_stream_no_info("NODES").await.unwrap().consumer_info("n2").await.is_ok());
    assert!(!users.contains("password"), "machines use NKeys:\n{users}");
}

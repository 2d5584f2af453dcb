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
    js.publish(
        mesh_core::subjects::enrol(&token.node),
        req.to_json().into(),
    )
    .await
    .unwrap()
    .await
    .expect("CONTROL stores the request");
    let got = tokio::time::timeout(wait, answers.next())
        .await
        .ok()
        .flatten();
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
        reply: format!(
            "{}.t{}",
            mesh_core::subjects::enrol_inbox_prefix(&token.node),
            rand_suffix()
        ),
    };
    (req, host)
}

fn rand_suffix() -> u32 {
    std::process::id()
        ^ (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos())
}

/// The broker's answer to a connect with `seed`: `Ok` admitted, `Err` with
/// the client's reason.
async fn try_connect(
    mesh: &Mesh,
    principal: &str,
    seed: &str,
    inbox: String,
) -> Result<(), String> {
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
    let enrol_key = nkeys::KeyPair::from_seed(t1.enrolment_seed.expose())
        .unwrap()
        .public_key();
    assert!(
        wait_until(LONG, || mesh.users_file().contains(&enrol_key)),
        "enrol_n1 composed"
    );
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
    let enrol2 = nkeys::KeyPair::from_seed(t2.enrolment_seed.expose())
        .unwrap()
        .public_key();
    assert!(
        wait_until(LONG, || mesh.users_file().contains(&enrol2)),
        "enrol_n2 composed"
    );
    let (mut req, _) = request(&t2);
    req.enrolment_key = nkeys::KeyPair::new_user().public_key();
    let answer = send_request(&mesh, &t2, &req, LONG).await;
    // One message for every reason.
    let Some(EnrolAnswer::Refused { message, .. }) = answer else {
        panic!("{answer:?}")
    };
    assert_eq!(message, REFUSED);
    mesh.controller()
        .wait_log("no such token was issued for this node", LONG);

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
    mesh.controller()
        .wait_log("enrolment request terminated", LONG);
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
    assert!(
        !users.contains(&enrol2),
        "the enrolment principal is gone:\n{users}"
    );
    let refused = try_connect(
        &mesh,
        "enrol_n2",
        t2.enrolment_seed.expose(),
        mesh_core::subjects::enrol_inbox_prefix(&t2.node),
    )
    .await;
    let why = refused.expect_err("a spent token's key no longer connects");
    assert!(why.to_lowercase().contains("authorization"), "{why}");
    assert!(
        js.get_stream_no_info("NODES")
            .await
            .unwrap()
            .consumer_info("n2")
            .await
            .is_ok()
    );
    assert!(!users.contains("password"), "machines use NKeys:\n{users}");
}

/// The composition counter of the controller's last "composition …" line.
fn compositions(log: &str) -> u64 {
    log.lines()
        .filter(|l| l.contains("composition "))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("compositions="))
                .and_then(|n| n.parse().ok())
        })
        .last()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_twenty_changes_is_one_to_three_compositions_and_all_are_live() {
    let mut mesh = Mesh::new(Backend::Sqlite);
    mesh.start_controller();
    mesh.controller().wait_log("composition live", LONG);
    let before = compositions(&mesh.controller().log());

    // Twenty principals in a burst, written the way any writer would: to
    // the store, which the controller follows.
    let store = mesh_store::Store::open(&mesh.store_url).await.unwrap();
    let mut keys = Vec::new();
    for i in 0..20 {
        let node = mesh_core::names::Name::new(format!("b{i}")).unwrap();
        store.add_node(&node, &[]).await.unwrap();
        let issued = store
            .issue_token(&node, Duration::from_secs(3600))
            .await
            .unwrap();
        keys.push((node, issued.enrolment_key, issued.secret));
    }
    store.close().await;
    assert!(
        wait_until(LONG, || {
            let users = mesh.users_file();
            keys.iter().all(|(_, k, _)| users.contains(k.as_str()))
        }),
        "all twenty in the users file"
    );
    // Written is not live: wait for the line that says the canary got in.
    assert!(wait_until(LONG, || {
        let log = mesh.controller().log();
        log.lines()
            .last()
            .is_some_and(|l| l.contains("composition live"))
            && compositions(&log) > before
    }));
    let after = compositions(&mesh.controller().log());
    assert!(
        after - before <= 3,
        "20 changes took {} compositions:\n{}",
        after - before,
        mesh.controller().log()
    );
    // Live means admitted: every one of the twenty keys connects.
    for (node, _, seed) in &keys {
        let inbox = mesh_core::subjects::enrol_inbox_prefix(node);
        try_connect(&mesh, "enrol", seed.expose(), inbox)
            .await
            .unwrap_or_else(|e| panic!("{node}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_did_not_reach_the_broker_is_not_live_until_it_does() {
    let mut mesh = Mesh::new(Backend::Sqlite);
    mesh.start_controller();
    mesh.controller().wait_log("composition live", LONG);

    // The pid file names a process that is not the broker: the signal goes
    // there, the broker keeps serving its old file.
    let pid_file = mesh.dir.join("broker/nats.pid");
    let real = std::fs::read_to_string(&pid_file).unwrap();
    let mut decoy = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    std::fs::write(&pid_file, format!("{}\n", decoy.id())).unwrap();

    let token = Token::decode(&mesh.node_add("n1", "1h")).unwrap();
    let key = nkeys::KeyPair::from_seed(token.enrolment_seed.expose())
        .unwrap()
        .public_key();
    mesh.controller().wait_log("composition not live", LONG);
    assert!(mesh.users_file().contains(&key), "written");
    let log = mesh.controller().log();
    assert!(
        log.contains("did not admit this composition's canary"),
        "{log}"
    );
    let refused = try_connect(
        &mesh,
        "enrol_n1",
        token.enrolment_seed.expose(),
        "_INBOX.enrol.n1".into(),
    )
    .await;
    assert!(
        refused.is_err(),
        "the broker does not serve the written file"
    );
    let _ = decoy.wait();

    // The broker's own pid again: the retry reaches it and goes live.
    std::fs::write(&pid_file, real).unwrap();
    let mut admitted = Err(String::new());
    for _ in 0..400 {
        admitted = try_connect(
            &mesh,
            "enrol_n1",
            token.enrolment_seed.expose(),
            "_INBOX.enrol.n1".into(),
        )
        .await;
        if admitted.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    admitted.expect("live after the retry reached the broker");
    mesh.controller().wait_log("composition live", LONG);
}

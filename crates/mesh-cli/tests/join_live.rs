//! Joining a mesh, live: genesis, the broker on its configuration, a real
//! `mesh controller`, tokens from `mesh node add`, and enrolments — by raw
//! clients where the test must shape the request, by real `mesh host`
//! processes everywhere else.

#[path = "join_live/harness.rs"]
mod harness;

use std::time::Duration;

use async_nats::jetstream;
use futures::StreamExt as _;
use harness::{Backend, Mesh, wait_bound, wait_until};
use mesh_core::enrolment::{AnswerTo, EnrolAnswer, EnrolRequest, REFUSED};
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
    let bus = mesh.bus("enrol", token.enrolment_seed.expose(), Some(inbox));
    // The users file holding the key is not yet the broker having reloaded
    // it: a loaded machine may take a moment between the two.
    let mut connected = mesh_bus::connect(&bus).await;
    for _ in 0..100 {
        if connected.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        connected = mesh_bus::connect(&bus).await;
    }
    let client = connected.expect("a live token's key connects");
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
    let key = mesh_core::declaration::verifying_key(&token.controller_key).unwrap();
    got.map(|m| {
        EnrolAnswer::verify(&m.payload, &key, &AnswerTo::of(req))
            .expect("an answer signed by the token's controller key")
    })
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
        spare_keys: Vec::new(),
        amqp_hashes: Default::default(),
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

    // Expired: a composition is due at the token's expiry, so the broker
    // itself turns its key away; nothing else need recompose first.
    let t1 = Token::decode(&mesh.node_add("n1", "5s")).unwrap();
    let enrol_key = nkeys::KeyPair::from_seed(t1.enrolment_seed.expose())
        .unwrap()
        .public_key();
    assert!(
        wait_until(LONG, || mesh.users_file().contains(&enrol_key)),
        "enrol_n1 composed"
    );
    let inbox1 = mesh_core::subjects::enrol_inbox_prefix(&t1.node);
    let seed1 = t1.enrolment_seed.expose().to_string();
    // Admitted first: the broker's reload follows the file, and a refusal
    // before it (a loaded machine) is not the expiry's.
    loop {
        match try_connect(&mesh, "enrol_n1", &seed1, inbox1.clone()).await {
            Ok(()) => break,
            Err(why) => {
                assert!(
                    (mesh_store::now_ms() as u64) < t1.expires_at,
                    "enrol_n1 was never admitted before its token expired: {why}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    let refused = async {
        let deadline = std::time::Instant::now() + LONG;
        loop {
            match try_connect(&mesh, "enrol_n1", &seed1, inbox1.clone()).await {
                // The server's refusal; a connection it closed before the
                // client read why (a broken pipe under load) says nothing
                // yet: tried again.
                Err(why) if why.to_lowercase().contains("authorization") => return why,
                Err(why) if std::time::Instant::now() >= deadline => return why,
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                Ok(()) => {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "an expired token's key is still admitted {LONG:?} on"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
    .await;
    assert!(
        mesh_store::now_ms() as u64 >= t1.expires_at,
        "refused only once expired: {refused}"
    );
    assert!(
        refused.to_lowercase().contains("authorization"),
        "{refused}"
    );
    assert!(!mesh.users_file().contains(&enrol_key));
    mesh.controller()
        .wait_log("an enrolment token expired; composing without it", LONG);

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
    // Signed, and sent before the reload that closes the enrolment connection.
    let answer = send_request(&mesh, &t2, &req, LONG).await;
    assert_eq!(answer, Some(EnrolAnswer::enrolled(&t2.node)));
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

/// The same enrolment delivered twice (the controller handed it back, or
/// CONTROL redelivered it while a composition was slow) is one enrolment:
/// both deliveries are answered enrolled, never "refused" for a token the
/// first spent. A node recorded as enrolled whose host never came gets a
/// new token with `--reissue`, and only such a node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enrolment_delivered_twice_is_enrolled_twice_and_a_host_that_never_came_is_reissued() {
    let mut mesh = Mesh::new(Backend::Sqlite);
    mesh.start_controller();
    let token = Token::decode(&mesh.node_add("n1", "1h")).unwrap();
    let enrol_key = nkeys::KeyPair::from_seed(token.enrolment_seed.expose())
        .unwrap()
        .public_key();
    assert!(
        wait_until(LONG, || mesh.users_file().contains(&enrol_key)),
        "enrol_n1 composed"
    );
    let (req, _) = request(&token);
    let inbox = mesh_core::subjects::enrol_inbox_prefix(&token.node);
    // Written is not yet live: the broker admits the key once it has
    // reloaded the file.
    let bus = mesh.bus("enrol", token.enrolment_seed.expose(), Some(inbox));
    let until = std::time::Instant::now() + LONG;
    let client = loop {
        match mesh_bus::connect(&bus).await {
            Ok(c) => break c,
            Err(_) if std::time::Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("a live token's key connects: {e:#}"),
        }
    };
    let mut answers = client.subscribe(req.reply.clone()).await.unwrap();
    client.flush().await.unwrap();
    let js = jetstream::new(client.clone());
    for _ in 0..2 {
        js.publish(
            mesh_core::subjects::enrol(&token.node),
            req.to_json().into(),
        )
        .await
        .unwrap()
        .await
        .expect("CONTROL stores the request");
    }
    let key = mesh_core::declaration::verifying_key(&token.controller_key).unwrap();
    for delivery in ["first", "second"] {
        let m = tokio::time::timeout(LONG, answers.next())
            .await
            .unwrap_or_else(|_| panic!("no answer to the {delivery} delivery"))
            .expect("the answer");
        let answer = EnrolAnswer::verify(&m.payload, &key, &AnswerTo::of(&req)).unwrap();
        assert_eq!(answer, EnrolAnswer::enrolled(&token.node), "{delivery}");
    }
    drop(answers);
    drop(client);
    assert!(
        !mesh.controller().log().contains("enrolment refused"),
        "{}",
        mesh.controller().log()
    );

    // The raw client never heartbeats: the host "never came".
    let out = mesh.mesh(&["node", "add", "n1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("mesh node add n1 --reissue"), "{err}");
    let out = mesh.mesh(&["node", "add", "n1", "--reissue", "--ttl", "1h"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let again = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let mut host = mesh.host("n1", Some(&again));
    let observer = jetstream::new(mesh.observer().await);
    wait_bound(&observer, &["n1"], LONG).await;
    assert!(
        wait_until(LONG, || mesh.nodes()[0]["last_seen_at"].is_number()),
        "the reissued host is heard from: {:?}",
        mesh.nodes()
    );
    let out = mesh.mesh(&["node", "add", "n1", "--reissue"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has been heard from"), "{err}");
    assert!(host.running(), "{}", host.log());
}

/// The composition counter of the controller's last "composition …" line.
fn compositions(log: &str) -> u64 {
    log.lines()
        .rev()
        .filter(|l| l.contains("composition "))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("compositions="))
                .and_then(|n| n.parse().ok())
        })
        .next()
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

/// The public key of a host's NKey seed file, which must be 0600.
fn host_public_key(mesh: &Mesh, name: &str) -> String {
    use std::os::unix::fs::PermissionsExt as _;
    let path = mesh.host_dir(name).join("nkey.seed");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{}", path.display());
    let dir_mode = std::fs::metadata(mesh.host_dir(name))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(dir_mode, 0o700);
    let xkey = mesh.host_dir(name).join("xkey.seed");
    assert_eq!(
        std::fs::metadata(&xkey).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let seed = std::fs::read_to_string(path).unwrap();
    nkeys::KeyPair::from_seed(seed.trim()).unwrap().public_key()
}

async fn three_hosts_enrol_and_bind(backend: Backend) {
    let mut mesh = Mesh::new(backend);
    mesh.start_controller();
    let names = ["n1", "n2", "n3"];
    let tokens: Vec<String> = names.iter().map(|n| mesh.node_add(n, "1h")).collect();
    // Once each token's key is admitted (as it is by the time an operator
    // has carried the token to its machine), nothing of a good enrolment
    // is refused.
    for t in &tokens {
        token_admitted(&mesh, &Token::decode(t).unwrap()).await;
    }
    // The probes above were refused until then: only what follows counts.
    let probed = mesh.broker.log().len();
    let mut hosts: Vec<_> = names
        .iter()
        .zip(&tokens)
        .map(|(n, t)| mesh.host(n, Some(t)))
        .collect();
    let observer = mesh.observer().await;
    let js = jetstream::new(observer.clone());
    wait_bound(&js, &names, LONG).await;
    for (h, n) in hosts.iter().zip(names) {
        h.wait_log(&format!("enrolled as node {n}"), LONG);
    }
    // Said once, in words: the broker refused no key (each host waits for
    // the reload that admits it before it connects with its own, and the
    // enrolment connection never dials again), and no log prints a value
    // in Rust's debug form. (A connection caught mid-handshake by a reload
    // is cut off by the server with a keyless "authentication error": the
    // composer's canary may be; it is not a refusal of any principal.)
    let broker_log = mesh.broker.log().split_off(probed);
    let refused = refused_outside_a_reload(&broker_log);
    assert!(refused.is_empty(), "{refused:?}\n{broker_log}");
    for h in &hosts {
        let log = h.log();
        assert!(!log.contains("refused the credential"), "{log}");
        assert_words(&log);
    }
    assert_words(&mesh.controller().log());

    // The users file: each host by its own key, no enrolment principal, no
    // password; each token's key now refused by the broker.
    let users = mesh.users_file();
    for (n, t) in names.iter().zip(&tokens) {
        assert!(
            users.contains(&host_public_key(&mesh, n)),
            "host_{n}:\n{users}"
        );
        let token = Token::decode(t).unwrap();
        let enrol_key = nkeys::KeyPair::from_seed(token.enrolment_seed.expose())
            .unwrap()
            .public_key();
        assert!(!users.contains(&enrol_key), "enrol_{n} is gone:\n{users}");
        let why = try_connect(
            &mesh,
            "enrol",
            token.enrolment_seed.expose(),
            mesh_core::subjects::enrol_inbox_prefix(&token.node),
        )
        .await
        .expect_err("a spent token's key is refused");
        assert!(why.to_lowercase().contains("authorization"), "{why}");
    }
    assert!(!users.contains("password"), "machines use NKeys:\n{users}");

    // `mesh nodes`: enrolled by the keys they made, and seen (heartbeats,
    // written in batches).
    let key_of = |n: &str| host_public_key(&mesh, n);
    assert!(
        wait_until(LONG, || {
            let rows = mesh.nodes();
            rows.len() == 3
                && rows.iter().all(|r| {
                    r["state"] == "enrolled"
                        && r["last_seen_at"].is_i64()
                        && r["liveness"] == "ready"
                        && r["host_key"] == key_of(r["node"].as_str().unwrap()).as_str()
                })
        }),
        "{:#?}",
        mesh.nodes()
    );

    // A host restarted without its token runs on the state it kept.
    assert!(hosts[0].stop().success(), "SIGTERM is an orderly stop");
    let mut unbound = false;
    for _ in 0..600 {
        if !harness::bound(&js, "n1").await {
            unbound = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(unbound, "unbound once stopped");
    hosts[0] = mesh.host("n1", None);
    wait_bound(&js, &["n1"], LONG).await;
    hosts[0].wait_log("bound the node's consumer", LONG);

    // Nothing left behind.
    let pids: Vec<u32> = hosts.iter().map(|h| h.pid()).collect();
    let ctl = mesh.controller().pid();
    for h in &mut hosts {
        assert!(h.stop().success(), "{}", h.log());
    }
    assert!(mesh.controller.as_mut().unwrap().stop().success());
    let log = mesh.controller().log();
    assert!(log.contains("controller stopped"), "{log}");
    for pid in pids.into_iter().chain([ctl]) {
        assert!(!mesh_testkit::pid_alive(pid), "pid {pid} left behind");
    }
}

/// No line of `log` shows a value in Rust's debug form (`Work { compose:
/// true … }`, `Some(3)`): a log is read by operators.
fn assert_words(log: &str) {
    for line in log.lines() {
        // `Name { ` with Name capitalised, or a wrapped `Some(`/`Ok(`/`Err(`.
        let debug_struct = line.match_indices(" { ").any(|(at, _)| {
            let before = &line[..at];
            let word: String = before
                .chars()
                .rev()
                .take_while(|c| c.is_alphanumeric())
                .collect();
            word.chars().last().is_some_and(char::is_uppercase)
        });
        let wrapped = ["Some(", "Ok(", "Err("]
            .iter()
            .any(|w| line.contains(&format!("={w}")) || line.contains(&format!(" {w}")));
        assert!(!debug_struct && !wrapped, "a value in debug form: {line}");
    }
}

/// Waits until the broker admits `token`'s enrolment key (tried every
/// 100 ms; each refusal is logged by the broker).
async fn token_admitted(mesh: &Mesh, token: &Token) {
    let inbox = mesh_core::subjects::enrol_inbox_prefix(&token.node);
    let until = std::time::Instant::now() + LONG;
    while std::time::Instant::now() < until {
        let seed = token.enrolment_seed.expose();
        if try_connect(mesh, "enrol", seed, inbox.clone())
            .await
            .is_ok()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the token's key for {} is never admitted", token.node);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hosts_enrol_and_bind_on_sqlite() {
    three_hosts_enrol_and_bind(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hosts_enrol_and_bind_on_postgres() {
    three_hosts_enrol_and_bind(Backend::Postgres).await;
}

/// What a refused `mesh host` printed: its exit code and last stderr line.
fn refused(mut host: harness::Daemon) -> String {
    let status = host.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(2), "{}", host.log());
    host.log().lines().last().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_used_twice_and_an_expired_token_say_one_thing() {
    let mut mesh = Mesh::new(Backend::Sqlite);
    mesh.start_controller();
    let t1 = mesh.node_add("n1", "1h");
    let first = mesh.host("n1", Some(&t1));
    let js = jetstream::new(mesh.observer().await);
    wait_bound(&js, &["n1"], LONG).await;

    // The spent token's key is refused by the broker: said within the
    // refusal window (2 s), not after the 10 s connect retries of old.
    let started = std::time::Instant::now();
    let again = mesh.host("n1-again", Some(&t1));
    let twice = refused(again);
    let took = started.elapsed();
    // The advice names what works for an enrolled node (its state
    // directory, or --reissue): `mesh node add n1` alone is refused for it.
    assert_eq!(
        twice,
        "error: this token was already used or has expired: if node n1 enrolled with it, start that host from the state directory it enrolled into, with no token (`mesh host --state DIR`); if its host never kept that enrolment, `mesh node add n1 --reissue` on the controller issues a new token (for a node not enrolled yet: `mesh node add n1`)"
    );
    // The failed attempt leaves no keys behind: a seed with no enrolment.
    let leftovers: Vec<String> = std::fs::read_dir(mesh.host_dir("n1-again"))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|f| f.contains("seed") || f == "spare")
                .collect()
        })
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "keys left behind: {leftovers:?}");
    assert!(took < Duration::from_secs(6), "took {took:?}");

    let t2 = mesh.node_add("n2", "1s");
    let expires = Token::decode(&t2).unwrap().expires_at;
    let now = mesh_store::now_ms() as u64;
    if expires > now {
        tokio::time::sleep(Duration::from_millis(expires - now + 50)).await;
    }
    let late = refused(mesh.host("n2", Some(&t2)));
    assert_eq!(late, twice.replace("n1", "n2"), "one message for both");
    // Neither refusal wrote a host record.
    assert!(!mesh.host_dir("n1-again").join("host.json").exists());
    assert!(!mesh.host_dir("n2").join("host.json").exists());
    drop(first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_enrolments_with_one_token_enrol_one_node() {
    let mut mesh = Mesh::new(Backend::Sqlite);
    mesh.start_controller();
    let token = Token::decode(&mesh.node_add("n1", "1h")).unwrap();
    let enrol_key = nkeys::KeyPair::from_seed(token.enrolment_seed.expose())
        .unwrap()
        .public_key();
    assert!(wait_until(LONG, || mesh.users_file().contains(&enrol_key)));

    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(50));
    let mut tasks = Vec::new();
    for i in 0..50 {
        let (token, dir, barrier) = (
            token.clone(),
            mesh.host_dir(&format!("c{i}")),
            barrier.clone(),
        );
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let r = mesh_host::enrol(&token, &dir, &mesh_host::EnrolOptions::default()).await;
            (dir, r)
        }));
    }
    let mut winners = Vec::new();
    for t in tasks {
        let (dir, r) = t.await.unwrap();
        match r {
            Ok(state) => winners.push((dir, state)),
            // Refused by the controller, or (once the winner's reload is
            // live) the spent token's key refused by the broker.
            Err(e) => assert!(
                matches!(
                    e,
                    mesh_host::EnrolError::Refused | mesh_host::EnrolError::Spent { .. }
                ),
                "{e}"
            ),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one enrolment wins");
    let (dir, _) = &winners[0];
    let seed = std::fs::read_to_string(dir.join("nkey.seed")).unwrap();
    let winner_key = nkeys::KeyPair::from_seed(seed.trim()).unwrap().public_key();
    let rows = mesh.nodes();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0]["host_key"],
        winner_key.as_str(),
        "the winner's key is recorded"
    );
    let log = mesh.controller().log();
    assert_eq!(log.matches("node enrolled").count(), 1, "{log}");
    // The losers that reached the controller were refused as spent.
    assert!(
        log.contains("enrolment refused") && log.contains("spent"),
        "{log}"
    );
}

/// Log lines written on this thread, kept for a test to read.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_host_admitted_after_its_wait_keeps_its_enrolment_and_says_why() {
    let mut mesh = Mesh::new(Backend::Sqlite);
    mesh.start_controller();
    let token = Token::decode(&mesh.node_add("n1", "1h")).unwrap();
    token_admitted(&mesh, &token).await;
    let captured = Captured::default();
    let writer = captured.clone();
    let _logs = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish(),
    );
    // A wait for admission shorter than any reload: the controller's signed
    // answer came, the broker has not admitted the key yet.
    let opts = mesh_host::EnrolOptions {
        admit_within: Duration::from_millis(1),
        ..mesh_host::EnrolOptions::default()
    };
    let dir = mesh.host_dir("n1");
    let enrolled = mesh_host::enrol(&token, &dir, &opts).await;
    let said = captured.text();
    assert!(enrolled.is_ok(), "{:?}\n{said}", enrolled.err());
    assert!(dir.join("host.json").exists(), "the enrolment is kept");
    assert!(
        said.contains(
            "the broker has not admitted this host's key since the controller's signed answer"
        ) && said.contains("`mesh node add n1 --reissue`"),
        "{said}"
    );
    assert!(!said.contains("already used"), "not a spent token: {said}");
    // Its host, started from the state kept, is admitted and binds.
    let host = mesh.host("n1", None);
    let js = jetstream::new(mesh.observer().await);
    wait_bound(&js, &["n1"], LONG).await;
    drop(host);
    let log = mesh.controller().log();
    assert!(!log.contains("answering anyway"), "{log}");
}

/// `token` with `edit` applied, re-encoded: the checksum recomputed, as a
/// deliberate edit would have it.
fn edited(token: &str, edit: impl FnOnce(&mut Token)) -> String {
    let mut t = Token::decode(token).unwrap();
    edit(&mut t);
    t.encode().into_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_edited_with_their_checksum_recomputed_do_not_enrol() {
    let mut mesh = Mesh::new(Backend::Sqlite);
    mesh.start_controller();
    let good = mesh.node_add("n1", "1h");
    let enrol_key =
        nkeys::KeyPair::from_seed(Token::decode(&good).unwrap().enrolment_seed.expose())
            .unwrap()
            .public_key();
    assert!(wait_until(LONG, || mesh.users_file().contains(&enrol_key)));

    // Another node's name: the enrolment key may publish only for n1. The
    // server's refusal is the answer, at once.
    let other_node = edited(&good, |t| {
        t.node = mesh_core::names::Name::new("n9").unwrap()
    });
    let said = refused(mesh.host("n9", Some(&other_node)));
    assert!(
        said.contains("may enrol only the node it was issued for"),
        "{said}"
    );
    assert!(!said.contains("streams"), "{said}");
    assert!(!mesh.host_dir("n9").join("host.json").exists());

    // Another controller key: the controller's answer does not verify.
    let other = ed25519_dalek::SigningKey::from_bytes(&[77; 32]);
    let other_key = edited(&good, |t| {
        t.controller_key = hex::encode(other.verifying_key().to_bytes())
    });
    let said = refused(mesh.host("n1", Some(&other_key)));
    assert!(
        said.contains("not signed by the controller the token names"),
        "{said}"
    );
    assert!(
        !mesh.host_dir("n1").join("host.json").exists(),
        "not enrolled"
    );
    // The controller did enrol n1 (its answer was its own; the host would
    // not believe it): the records say enrolled, nothing of the host is
    // left, and `mesh status` names the node with the step that mends it.
    assert!(
        !mesh.host_dir("n1").join("nkey.seed").exists(),
        "no key of a refused enrolment is kept"
    );
    let out = mesh.mesh(&["status", "--output", "json"]);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let actions = status["needs_action"].as_array().unwrap();
    let action = actions
        .iter()
        .find(|a| a["what"] == "node n1 enrolled but was never heard from")
        .unwrap_or_else(|| panic!("{actions:#?}"));
    assert!(
        action["next"]
            .as_str()
            .unwrap()
            .contains("`mesh node add n1 --reissue`"),
        "{action}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_certificate_from_the_same_ca_is_refused_by_the_host() {
    let mut mesh = Mesh::new(Backend::Sqlite);
    mesh.start_controller();
    let token = mesh.node_add("n1", "1h");

    // Another certificate for the same names, signed by the mesh's own CA.
    let ca_key =
        rcgen::KeyPair::from_pem(&std::fs::read_to_string(mesh.dir.join("ca/ca-key.pem")).unwrap())
            .unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "mesh CA");
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "mesh broker");
    let cert = params.signed_by(&key, &issuer).unwrap();
    std::fs::write(mesh.dir.join("broker/cert.pem"), cert.pem()).unwrap();
    std::fs::write(mesh.dir.join("broker/key.pem"), key.serialize_pem()).unwrap();
    mesh.broker.restart().unwrap();

    let said = refused(mesh.host("n1", Some(&token)));
    assert!(said.contains("does not match the token"), "{said}");
    assert!(!mesh.host_dir("n1").join("host.json").exists());
}

/// The broker's refusals of a key (`authentication error - Nkey …`) that
/// did not fall inside a reload (between its `Trapped "hangup" signal` and
/// `Reloaded server configuration`). nats-server may refuse a connect that
/// arrives in the instant it swaps its accounts, for a key it holds before
/// and after (seen for the controller's own key); the client tries again.
/// Any other refusal is a key the broker did not hold: what a good
/// enrolment must never cause.
fn refused_outside_a_reload(log: &str) -> Vec<&str> {
    let mut reloading = false;
    let mut refused = Vec::new();
    for line in log.lines() {
        if line.contains("Trapped \"hangup\" signal") {
            reloading = true;
        } else if line.contains("Reloaded server configuration") {
            reloading = false;
        } else if line.contains("authentication error - Nkey") && !reloading {
            refused.push(line);
        }
    }
    refused
}

#[test]
fn a_refusal_counts_unless_it_falls_inside_a_reload() {
    let log = "[1] [INF] Trapped \"hangup\" signal
[1] [ERR] 127.0.0.1:1 - cid:5 - authentication error - Nkey \"UA\"
[1] [INF] Reloaded server configuration (sha256:00)
[1] [ERR] 127.0.0.1:2 - cid:6 - authentication error - Nkey \"UB\"
";
    assert_eq!(
        refused_outside_a_reload(log),
        ["[1] [ERR] 127.0.0.1:2 - cid:6 - authentication error - Nkey \"UB\""]
    );
}

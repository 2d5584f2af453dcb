//! The host against a real TLS nats-server serving a composed users file:
//! `run` waits out a broker that does not know its key yet, then binds its
//! consumer, acks a declaration and heartbeats; a pinned certificate
//! mismatch is refused in words; enrolment is refused with the one message,
//! and succeeds when the reload that admits the host closes the enrolment
//! connection before any answer.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::push};
use futures::StreamExt as _;
use mesh_bus::{CertPin, assert_objects};
use mesh_core::authority::{
    self, Principal, PrincipalKind, controller_principal, enrolment_principal, host_principal,
};
use mesh_core::catalogue::{Aliases, Catalogue};
use mesh_core::enrolment::{EnrolAnswer, EnrolRequest, Heartbeat, REFUSED};
use mesh_core::jetstream as objects;
use mesh_core::names::Name;
use mesh_core::records::{ControllerSpec, Records};
use mesh_core::secret::Secret;
use mesh_core::subjects::{self, STREAM_CONTROL, STREAM_NODES};
use mesh_core::token::Token;
use mesh_host::state::{HOST_FILE, NKEY_SEED_FILE, XKEY_SEED_FILE, write_private};
use mesh_host::{EnrolError, EnrolOptions, HostError, HostKeys, HostOptions, HostState};
use mesh_testkit::PermissionedBus;
use mesh_testkit::bus::{compose, nkey_seed_for, observer};
use tokio::sync::oneshot;

/// Every wait in these tests is bounded by this.
const BOUND: Duration = Duration::from_secs(20);

fn n1() -> Name {
    Name::new("n1").unwrap()
}

fn controller() -> Principal {
    controller_principal(&ControllerSpec::default())
}

fn principal_name(kind: PrincipalKind) -> String {
    kind.principal_name()
}

fn quick() -> HostOptions {
    HostOptions {
        heartbeat_every: Duration::from_millis(200),
        backoff_start: Duration::from_millis(50),
        backoff_max: Duration::from_millis(400),
        ..HostOptions::default()
    }
}

fn pin_of(bus: &PermissionedBus) -> String {
    CertPin::of_der(&bus.server.certificates().unwrap().cert_der).to_hex()
}

/// The streams and the node's consumer, asserted as the controller would.
async fn assert_mesh_objects(bus: &PermissionedBus) -> jetstream::Context {
    let ctl = bus.connect(authority::CONTROLLER).await;
    let js = jetstream::new(ctl.client.clone());
    let records = Records {
        nodes: vec![n1()],
        ..Records::default()
    };
    let wanted = objects::derive(
        &Catalogue::build(Vec::new(), Aliases::new()),
        &records,
        &ControllerSpec::default(),
    )
    .unwrap();
    assert_objects(&js, &wanted).await.unwrap();
    js
}

/// A state directory whose host key is the one the test's users file
/// lists for `host_n1` once it is composed in.
fn seeded_state_dir(dir: &Path) {
    std::fs::create_dir(dir).unwrap();
    let seed = nkey_seed_for(&principal_name(PrincipalKind::Host { node: n1() }));
    write_private(&dir.join(NKEY_SEED_FILE), seed.as_bytes()).unwrap();
    HostKeys::load_or_create(dir).unwrap();
}

fn recompose(bus: &PermissionedBus, mut principals: Vec<Principal>) {
    principals.push(observer());
    bus.server
        .write_file("users.conf", &compose(&principals))
        .unwrap();
    bus.server.reload().unwrap();
}

#[tokio::test]
async fn run_waits_for_its_key_then_binds_acks_and_heartbeats() {
    let bus = PermissionedBus::start(vec![controller()]);
    let js = assert_mesh_objects(&bus).await;
    let observer = bus.connect(mesh_testkit::bus::OBSERVER).await;
    let mut beats = observer
        .client
        .subscribe(subjects::heartbeat(&n1()))
        .await
        .unwrap();
    observer.client.flush().await.unwrap();

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("host");
    seeded_state_dir(&dir);
    let state = HostState::record(
        &dir,
        n1(),
        vec![bus.server.url()],
        pin_of(&bus),
        "0c".repeat(32),
    )
    .unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let host = tokio::spawn({
        let state = state.clone();
        async move {
            mesh_host::run(&state, &quick(), async {
                let _ = stopped.await;
            })
            .await
        }
    });

    // Refused first: the users file does not list the host's key yet.
    let server_log = {
        let log = bus.server.log_path();
        tokio::task::spawn_blocking(move || {
            let deadline = std::time::Instant::now() + BOUND;
            loop {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                if text.to_lowercase().contains("authentication error")
                    || std::time::Instant::now() > deadline
                {
                    return text;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
        .await
        .unwrap()
    };
    assert!(
        server_log.to_lowercase().contains("authentication error"),
        "the broker never turned the host away: {server_log}"
    );
    assert!(!host.is_finished(), "run gave up on a refusal");
    let early = tokio::time::timeout(Duration::from_millis(300), beats.next()).await;
    assert!(early.is_err(), "a heartbeat from an unadmitted host");

    recompose(&bus, vec![controller(), host_principal(&n1())]);

    // (b) heartbeats arrive as JSON naming the node.
    let beat = tokio::time::timeout(BOUND, beats.next())
        .await
        .expect("a heartbeat once the key is live")
        .unwrap();
    let hb = Heartbeat::parse(&beat.subject, &beat.payload).unwrap();
    assert_eq!(hb.node, n1());
    assert!(hb.sent_at > 0);

    // (a) the consumer is bound, and a declaration is double-acked.
    let name = subjects::consumer::node(&n1());
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let mut c = js
            .get_consumer_from_stream::<push::Config, _, _>(&name, STREAM_NODES)
            .await
            .unwrap();
        if c.info().await.unwrap().push_bound {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never push-bound");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ack = js
        .publish(subjects::node_declaration(&n1()), "{}".into())
        .await
        .unwrap()
        .await
        .unwrap();
    loop {
        let mut c = js
            .get_consumer_from_stream::<push::Config, _, _>(&name, STREAM_NODES)
            .await
            .unwrap();
        let info = c.info().await.unwrap().clone();
        if info.ack_floor.stream_sequence >= ack.sequence && info.num_ack_pending == 0 {
            assert_eq!(info.num_redelivered, 0);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "declaration {} not acked: {info:?}",
            ack.sequence
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    stop.send(()).unwrap();
    let result = tokio::time::timeout(BOUND, host).await.unwrap().unwrap();
    assert!(result.is_ok(), "{result:?}");
}

/// The key the test plays the controller with; the token names it.
fn controller_signing_key() -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&[5; 32])
}

fn token(bus: &PermissionedBus, cert_sha256: String) -> Token {
    Token {
        bus_urls: vec![bus.server.url()],
        cert_sha256,
        controller_key: hex::encode(controller_signing_key().verifying_key().to_bytes()),
        node: n1(),
        enrolment_seed: Secret::new(nkey_seed_for(&principal_name(PrincipalKind::Enrolment {
            node: n1(),
        }))),
        expires_at: u64::MAX,
    }
}

fn enrol_options() -> EnrolOptions {
    EnrolOptions {
        answer_within: Duration::from_secs(10),
        admit_within: Duration::from_secs(10),
        connect_within: Duration::from_secs(5),
        refused_within: Duration::from_secs(2),
    }
}

#[tokio::test]
async fn a_certificate_other_than_the_pinned_one_is_refused_in_words() {
    let bus = PermissionedBus::start(vec![controller(), enrolment_principal(&n1())]);
    let tmp = tempfile::tempdir().unwrap();
    let wrong = "ab".repeat(32);
    let err = mesh_host::enrol(
        &token(&bus, wrong.clone()),
        &tmp.path().join("s"),
        &enrol_options(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, EnrolError::CertificateMismatch { .. }),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("presented a certificate that does not match the token's fingerprint"),
        "{text}"
    );
    assert!(text.contains(&bus.server.url()), "{text}");
    // Whole: two prints cut to a prefix once looked identical.
    assert!(text.contains(&wrong), "{text}");
    assert!(text.contains(&pin_of(&bus)), "{text}");

    // The running host treats a mismatch as fatal too, instead of retrying.
    let dir = tmp.path().join("h");
    seeded_state_dir(&dir);
    let state =
        HostState::record(&dir, n1(), vec![bus.server.url()], wrong, "0c".repeat(32)).unwrap();
    let err = tokio::time::timeout(
        BOUND,
        mesh_host::run(&state, &quick(), std::future::pending()),
    )
    .await
    .expect("a mismatch ends run")
    .unwrap_err();
    assert!(
        matches!(err, HostError::CertificateMismatch { .. }),
        "{err}"
    );
}

/// Plays the controller: takes the first enrolment request from CONTROL and
/// hands it to `answer`.
async fn controller_takes_one<F, Fut>(js: jetstream::Context, answer: F)
where
    F: FnOnce(EnrolRequest) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let consumer = js
        .get_consumer_from_stream::<push::Config, _, _>(
            subjects::consumer::CONTROLLER_CONTROL,
            STREAM_CONTROL,
        )
        .await
        .unwrap();
    let mut messages = consumer.messages().await.unwrap();
    let m = messages.next().await.unwrap().unwrap();
    let req = EnrolRequest::parse(&m.subject, &m.payload).unwrap();
    m.ack().await.unwrap();
    answer(req).await;
}

#[tokio::test]
async fn a_refusal_answer_ends_enrolment_with_the_one_message() {
    let err = enrol_answered_with(EnrolAnswer::refused(), controller_signing_key()).await;
    assert!(matches!(err, EnrolError::Refused), "{err:?}");
    assert_eq!(err.to_string(), REFUSED);
}

#[tokio::test]
async fn a_welcome_signed_by_another_key_is_refused_naming_the_controller() {
    let other = ed25519_dalek::SigningKey::from_bytes(&[6; 32]);
    let err = enrol_answered_with(EnrolAnswer::enrolled(&n1()), other).await;
    assert!(
        matches!(err, EnrolError::NotSignedByController { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("not signed by the controller the token names"),
        "{err}"
    );
}

/// Enrols against a test controller that answers `answer` signed by `key`;
/// the enrolment must fail, leaving no key it made and no host record.
async fn enrol_answered_with(answer: EnrolAnswer, key: ed25519_dalek::SigningKey) -> EnrolError {
    let bus = PermissionedBus::start(vec![controller(), enrolment_principal(&n1())]);
    let js = assert_mesh_objects(&bus).await;
    let answerer = tokio::spawn({
        let js = js.clone();
        async move {
            controller_takes_one(js.clone(), |req| async move {
                assert_eq!(req.node, n1());
                let to = mesh_core::enrolment::AnswerTo::of(&req);
                js.client()
                    .publish(req.reply.clone(), answer.sign(&to, &key).into())
                    .await
                    .unwrap();
                js.client().flush().await.unwrap();
            })
            .await
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let err = tokio::time::timeout(
        BOUND,
        mesh_host::enrol(&token(&bus, pin_of(&bus)), &dir, &enrol_options()),
    )
    .await
    .unwrap()
    .unwrap_err();
    answerer.await.unwrap();
    // Not enrolled, and this token never will: a retry with a new one makes
    // its own keys, so none of these is left to be mistaken for an
    // enrolment's.
    assert!(!dir.join(NKEY_SEED_FILE).exists() && !dir.join(XKEY_SEED_FILE).exists());
    assert!(!dir.join(HOST_FILE).exists());
    assert!(!dir.exists(), "the directory the attempt made is gone too");
    err
}

#[tokio::test]
async fn the_reload_that_admits_the_host_ends_enrolment_without_an_answer() {
    let bus = Arc::new(PermissionedBus::start(vec![
        controller(),
        enrolment_principal(&n1()),
    ]));
    let js = assert_mesh_objects(&bus).await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    // The key the test's users file will list for host_n1.
    seeded_state_dir(&dir);
    let host_key = HostKeys::load(&dir).unwrap().host_key().to_string();
    let answerer = tokio::spawn({
        let bus = bus.clone();
        async move {
            controller_takes_one(js, |req| async move {
                assert_eq!(req.host_key, host_key, "the pre-made key is reused");
                // The enrolment principal gone, the host in: the reload
                // closes the enrolment connection; no answer is sent.
                recompose(&bus, vec![controller(), host_principal(&n1())]);
            })
            .await
        }
    });
    let state = tokio::time::timeout(
        BOUND,
        mesh_host::enrol(&token(&bus, pin_of(&bus)), &dir, &enrol_options()),
    )
    .await
    .unwrap()
    .unwrap();
    answerer.await.unwrap();
    assert_eq!(state.node, n1());
    assert_eq!(HostState::open(&dir).unwrap(), state);
    assert_eq!(state.cert_sha256, pin_of(&bus));
}

#[tokio::test]
async fn an_enrolment_key_the_broker_never_admits_is_retried_then_refused() {
    // The controller has not recomposed since the token was issued: the
    // enrolment principal is not in the file.
    let bus = PermissionedBus::start(vec![controller()]);
    let tmp = tempfile::tempdir().unwrap();
    let opts = EnrolOptions {
        connect_within: Duration::from_secs(5),
        refused_within: Duration::from_millis(1000),
        ..enrol_options()
    };
    let started = tokio::time::Instant::now();
    let err = tokio::time::timeout(
        BOUND,
        mesh_host::enrol(&token(&bus, pin_of(&bus)), &tmp.path().join("s"), &opts),
    )
    .await
    .unwrap()
    .unwrap_err();
    // A key refused past `refused_within` is a spent or expired token's,
    // said well before `connect_within`.
    assert!(matches!(err, EnrolError::Spent { .. }), "{err:?}");
    assert!(
        err.to_string().contains("already used or has expired"),
        "{err}"
    );
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(1000), "gave up early");
    assert!(
        took < Duration::from_secs(5),
        "waited for connect_within: {took:?}"
    );
    let log = bus.server.log().to_lowercase();
    assert!(
        log.matches("authentication error").count() >= 2,
        "retried the refused key: {log}"
    );
}

#[tokio::test]
async fn run_binds_once_the_controller_creates_the_consumer() {
    let bus = PermissionedBus::start(vec![controller(), host_principal(&n1())]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("host");
    seeded_state_dir(&dir);
    let state = HostState::record(
        &dir,
        n1(),
        vec![bus.server.url()],
        pin_of(&bus),
        "0c".repeat(32),
    )
    .unwrap();
    let observer = bus.connect(mesh_testkit::bus::OBSERVER).await;
    let mut beats = observer
        .client
        .subscribe(subjects::heartbeat(&n1()))
        .await
        .unwrap();
    observer.client.flush().await.unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let host = tokio::spawn(async move {
        mesh_host::run(&state, &quick(), async {
            let _ = stopped.await;
        })
        .await
    });
    // Connected (it heartbeats) while neither NODES nor its consumer exists.
    tokio::time::timeout(BOUND, beats.next())
        .await
        .expect("a heartbeat")
        .unwrap();
    let js = assert_mesh_objects(&bus).await;
    let name = subjects::consumer::node(&n1());
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let mut c = js
            .get_consumer_from_stream::<push::Config, _, _>(&name, STREAM_NODES)
            .await
            .unwrap();
        if c.info().await.unwrap().push_bound {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never push-bound");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.send(()).unwrap();
    let result = tokio::time::timeout(BOUND, host).await.unwrap().unwrap();
    assert!(result.is_ok(), "{result:?}");
}

//! `mesh host` from the real binary: without an enrolment it says how to
//! enrol; a bad token is refused without being echoed; a refused enrolment
//! prints the one message and exits 2; a running host stops on SIGTERM with
//! exit 0.

mod support;

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::push};
use futures::StreamExt as _;
use mesh_bus::{CertPin, assert_objects};
use mesh_core::authority::{
    PrincipalKind, controller_principal, enrolment_principal, host_principal,
};
use mesh_core::catalogue::{Aliases, Catalogue};
use mesh_core::enrolment::{EnrolAnswer, EnrolRequest, REFUSED};
use mesh_core::names::Name;
use mesh_core::records::{ControllerSpec, Records};
use mesh_core::secret::Secret;
use mesh_core::subjects::{self, STREAM_CONTROL};
use mesh_core::token::Token;
use mesh_host::state::{NKEY_SEED_FILE, write_private};
use mesh_host::{HostKeys, HostState};
use mesh_testkit::PermissionedBus;
use mesh_testkit::bus::nkey_seed_for;
use support::mesh_bin;

const BOUND: Duration = Duration::from_secs(20);

fn n1() -> Name {
    Name::new("n1").unwrap()
}

fn mesh(dir: &Path, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(mesh_bin())
        .args(args)
        .current_dir(dir)
        .env_remove("MESH_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn without_a_token_or_an_enrolment_it_says_how_to_enrol() {
    let tmp = tempfile::tempdir().unwrap();
    let o = mesh(tmp.path(), &["host", "--state", "st"], "");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.starts_with("error: st holds no enrolled host"), "{e}");
    assert!(e.contains("mesh host --token TOKEN --state st"), "{e}");
    assert!(!tmp.path().join("st").exists(), "nothing created");
}

#[test]
fn a_bad_token_is_refused_without_echoing_it() {
    let tmp = tempfile::tempdir().unwrap();
    let secretish = "mesh1.eyJzZWNyZXQiOiJTVUFBQUFBQUFBQUFBQUFBQUEifQ-not-base64!";
    for (args, stdin) in [
        (vec!["host", "--token", secretish], ""),
        (vec!["host", "--token", "-"], secretish),
    ] {
        let o = mesh(tmp.path(), &args, stdin);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let e = stderr(&o);
        assert!(e.starts_with("error: "), "{e}");
        assert!(
            !e.contains("eyJzZWNyZXQi") && !e.contains("not-base64"),
            "{e}"
        );
        assert!(o.stdout.is_empty());
    }
    let o = Command::new(mesh_bin())
        .args(["host", "--help"])
        .env("MESH_TOKEN", secretish)
        .output()
        .unwrap();
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(!help.contains("eyJzZWNyZXQi"), "{help}");
    assert!(help.contains("MESH_TOKEN"), "{help}");
}

async fn objects(bus: &PermissionedBus) -> jetstream::Context {
    let ctl = bus.connect("controller").await;
    let js = jetstream::new(ctl.client.clone());
    let wanted = mesh_core::jetstream::derive(
        &Catalogue::build(Vec::new(), Aliases::new()),
        &Records {
            nodes: vec![n1()],
            ..Records::default()
        },
        &ControllerSpec::default(),
    )
    .unwrap();
    assert_objects(&js, &wanted).await.unwrap();
    js
}

fn pin(bus: &PermissionedBus) -> String {
    CertPin::of_der(&bus.server.certificates().unwrap().cert_der).to_hex()
}

#[tokio::test]
async fn a_refused_enrolment_prints_the_one_message_and_exits_2() {
    let bus = PermissionedBus::start(vec![
        controller_principal(&ControllerSpec::default()),
        enrolment_principal(&n1()),
    ]);
    let js = objects(&bus).await;
    // The controller's signing key the token names: a refusal is signed
    // like a welcome, or the host could not tell it from a forgery.
    let key = ed25519_dalek::SigningKey::from_bytes(&[5; 32]);
    let controller_key = hex::encode(key.verifying_key().to_bytes());
    // Plays the controller: refuses the first request.
    let answerer = tokio::spawn(async move {
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
        let to = mesh_core::enrolment::AnswerTo::of(&req);
        js.client()
            .publish(
                req.reply.clone(),
                EnrolAnswer::refused().sign(&to, &key).into(),
            )
            .await
            .unwrap();
        js.client().flush().await.unwrap();
    });
    let token = Token {
        bus_urls: vec![bus.server.url()],
        cert_sha256: pin(&bus),
        controller_key,
        node: n1(),
        enrolment_seed: Secret::new(nkey_seed_for(
            &PrincipalKind::Enrolment { node: n1() }.principal_name(),
        )),
        expires_at: u64::MAX,
    };
    let tmp = tempfile::tempdir().unwrap();
    let text = token.encode().into_string();
    let dir = tmp.path().to_path_buf();
    let o = tokio::time::timeout(
        BOUND,
        tokio::task::spawn_blocking(move || {
            let child = Command::new(mesh_bin())
                .args(["host", "--state", "st"])
                .current_dir(&dir)
                .env("MESH_TOKEN", &text)
                .env("MESH_LOG", "off")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let o = child.wait_with_output();
            o.unwrap()
        }),
    )
    .await
    .unwrap()
    .unwrap();
    answerer.await.unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(stderr(&o), format!("error: {REFUSED}\n"));
    assert!(o.stdout.is_empty());
}

#[tokio::test]
async fn a_running_host_stops_on_sigterm_with_exit_0() {
    let bus = PermissionedBus::start(vec![
        controller_principal(&ControllerSpec::default()),
        host_principal(&n1()),
    ]);
    let _js = objects(&bus).await;
    let observer = bus.connect(mesh_testkit::bus::OBSERVER).await;
    let mut beats = observer
        .client
        .subscribe(subjects::heartbeat(&n1()))
        .await
        .unwrap();
    observer.client.flush().await.unwrap();

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("st");
    std::fs::create_dir(&dir).unwrap();
    let seed = nkey_seed_for(&PrincipalKind::Host { node: n1() }.principal_name());
    write_private(&dir.join(NKEY_SEED_FILE), seed.as_bytes()).unwrap();
    HostKeys::load_or_create(&dir).unwrap();
    HostState::record(
        &dir,
        n1(),
        vec![bus.server.url()],
        pin(&bus),
        "0c".repeat(32),
    )
    .unwrap();

    let child = Command::new(mesh_bin())
        .args(["host", "--state", "st"])
        .current_dir(tmp.path())
        .env_remove("MESH_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Running: its heartbeat arrives.
    let beat = tokio::time::timeout(BOUND, beats.next()).await;
    let pid = child.id() as libc::pid_t;
    // SAFETY: signalling the child this test started, by its own pid.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let o = tokio::time::timeout(
        BOUND,
        tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()),
    )
    .await
    .expect("the host stops on SIGTERM")
    .unwrap();
    let err = stderr(&o);
    assert!(
        matches!(beat, Ok(Some(_))),
        "no heartbeat from the running host: {err}"
    );
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains(&seed[2..]), "the seed was logged");
    assert!(err.contains("connected to the bus"), "{err}");
    assert!(err.contains("shutting down"), "{err}");
}

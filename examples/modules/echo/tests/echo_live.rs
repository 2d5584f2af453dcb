//! The real `mesh-echo` binary against a real, permissioned, TLS-on
//! nats-server: its principal derived from a catalogue holding the echo
//! manifest, its credential an NKey seed file, the broker pinned by
//! certificate fingerprint, the JetStream objects asserted by the
//! controller. What it emits must be in EVENTS; what its manifest does not
//! declare must be refused by the server, and said so by the SDK.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mesh_core::authority::{self, PrincipalKind};
use mesh_core::catalogue::{Aliases, Catalogue};
use mesh_core::names::Name;
use mesh_core::records::{Assignment, ControllerSpec, Records};
use mesh_core::{event, jetstream, manifest, subjects};
use mesh_sdk::{DEFAULT_ACK_TIMEOUT, Module, ModuleEnv, SdkError};
use mesh_testkit::PermissionedBus;
use mesh_testkit::bus::nkey_seed_for;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

const WAIT: Duration = Duration::from_secs(15);

fn n(s: &str) -> Name {
    Name::new(s).unwrap()
}

fn echo_manifest() -> manifest::Manifest {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../catalogue/echo/mesh.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    manifest::parse("echo/mesh.toml", &text).unwrap_or_else(|d| panic!("{d:?}"))
}

/// The module's process, killed if the test fails before stopping it.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn module_env(bus: &PermissionedBus, seed_file: PathBuf) -> Vec<(&'static str, String)> {
    let certs = bus.server.certificates().expect("TLS is on");
    let pin = mesh_bus::fingerprint_of_pem_file(&certs.cert_pem).unwrap();
    let principal = PrincipalKind::Module {
        node: n("n1"),
        module: n("echo"),
    }
    .principal_name();
    vec![
        (mesh_sdk::ENV_BUS_URLS, bus.server.url()),
        (mesh_sdk::ENV_BUS_PIN, pin),
        (mesh_sdk::ENV_NKEY_FILE, seed_file.display().to_string()),
        (
            mesh_sdk::ENV_INBOX_PREFIX,
            subjects::inbox_prefix(&principal),
        ),
        (mesh_sdk::ENV_NODE, "n1".into()),
        (mesh_sdk::ENV_MODULE, "echo".into()),
    ]
}

fn log_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("echo.log")).unwrap_or_default()
}

async fn wait_for_addr(dir: &Path, child: &mut Child) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(text) = std::fs::read_to_string(dir.join("echo.addr")) {
            assert!(text.ends_with('\n'), "{text:?}");
            return text.trim_end().to_string();
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("mesh-echo exited ({status}):\n{}", log_of(dir));
        }
        assert!(
            Instant::now() < deadline,
            "no echo.addr within {WAIT:?}:\n{}",
            log_of(dir)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_answers_emits_what_it_declares_and_nothing_else() {
    let catalogue = Catalogue::build(vec![echo_manifest()], Aliases::new());
    let records = Records {
        nodes: vec![n("n1")],
        assignments: vec![Assignment::new(n("n1"), n("echo"))],
        ..Records::default()
    };
    let controller = ControllerSpec::default();
    let principals = authority::derive(&catalogue, &records, &controller).unwrap();
    let bus = PermissionedBus::start(principals);

    let ctl = bus.connect(authority::CONTROLLER).await;
    let js = async_nats::jetstream::new(ctl.client.clone());
    let objects = jetstream::derive(&catalogue, &records, &controller).unwrap();
    mesh_bus::assert_objects(&js, &objects).await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let seed_file = dir.path().join("echo.nk");
    std::fs::write(&seed_file, nkey_seed_for("module_n1_echo")).unwrap();
    std::fs::set_permissions(
        &seed_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let env = module_env(&bus, seed_file);

    let log = std::fs::File::create(dir.path().join("echo.log")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_mesh-echo"))
        .current_dir(dir.path())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut running = Running(child);
    let addr = wait_for_addr(dir.path(), &mut running.0).await;
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");

    let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    write.write_all(b"hi\n").await.unwrap();
    let answer = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("no answer within {WAIT:?}:\n{}", log_of(dir.path())))
        .unwrap();
    assert_eq!(
        answer.as_deref(),
        Some("echo: hi"),
        "{}",
        log_of(dir.path())
    );

    // Read back as the controller: the answer follows the stored event.
    let events = js.get_stream(subjects::STREAM_EVENTS).await.unwrap();
    let subject =
        |e: &str| subjects::module_event(&n("echo"), &subjects::EventSelector::Named(n(e)));
    let heard = events
        .get_last_raw_message_by_subject(&subject("heard"))
        .await
        .unwrap();
    let heard = event::parse(&heard.payload).unwrap();
    assert_eq!(heard.module, n("echo"));
    assert_eq!(heard.node, n("n1"));
    assert_eq!(heard.payload, serde_json::json!({"line": "hi"}));
    assert_eq!(heard.id.len(), 32, "{}", heard.id);

    let started = events
        .get_last_raw_message_by_subject(&subject("started"))
        .await
        .unwrap();
    let started = event::parse(&started.payload).unwrap();
    assert_eq!(started.payload, serde_json::json!({"addr": addr}));
    assert!(started.at <= heard.at);
    assert_ne!(started.id, heard.id);

    // The module's own key, through the SDK: a declared event is stored, an
    // undeclared one refused by the server — promptly, long before an ack
    // timeout would have said so.
    let lookup = |var: &str| env.iter().find(|(k, _)| *k == var).map(|(_, v)| v.clone());
    let mut sdk_env = ModuleEnv::from_lookup(lookup).unwrap();
    sdk_env.ack_timeout = Duration::from_secs(30);
    let module = Module::connect_with(&sdk_env).await.unwrap();
    module
        .emit("heard", serde_json::json!({"line": "from the sdk"}))
        .await
        .unwrap();
    let asked = Instant::now();
    let err = module
        .emit("undeclared", serde_json::json!({}))
        .await
        .unwrap_err();
    assert!(matches!(err, SdkError::Refused { .. }), "{err}");
    assert!(
        asked.elapsed() < DEFAULT_ACK_TIMEOUT,
        "{:?}",
        asked.elapsed()
    );
    let text = err.to_string();
    assert!(text.contains("\"undeclared\""), "{text}");
    assert!(text.contains("[events] emits"), "{text}");
    assert!(
        events
            .get_last_raw_message_by_subject(&subject("undeclared"))
            .await
            .is_err(),
        "an undeclared event was stored"
    );

    // A key the bus does not know: the process ends non-zero, its last log
    // line saying why (what a host would report).
    let stranger = tempfile::tempdir().unwrap();
    let stranger_seed = stranger.path().join("echo.nk");
    std::fs::write(&stranger_seed, nkeys::KeyPair::new_user().seed().unwrap()).unwrap();
    std::fs::set_permissions(
        &stranger_seed,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mesh-echo"))
        .current_dir(stranger.path())
        .envs(module_env(&bus, stranger_seed))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("could not connect to the bus as module_n1_echo"),
        "{stderr}"
    );

    // SIGTERM: a prompt, clean exit.
    let pid = i32::try_from(running.0.id()).unwrap();
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(s) = running.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "still running 5 s after SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status}:\n{}", log_of(dir.path()));
    let log = log_of(dir.path());
    assert!(log.contains("emitted started"), "{log}");
    assert!(log.contains("emitted heard"), "{log}");
}

#[test]
fn an_incomplete_environment_ends_it_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mesh-echo"))
        .current_dir(dir.path())
        .env_clear()
        .env(mesh_sdk::ENV_NODE, "n1")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("MESH_MODULE is not set; set it to"),
        "{stderr}"
    );
    // Nothing advertised for a module that never started.
    assert!(!dir.path().join("echo.addr").exists());
}

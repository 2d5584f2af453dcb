//! Genesis on disk: files and modes, refusal of a second genesis, the broker
//! configuration accepted and served by a real nats-server, and the broker
//! certificate's chain, names and fingerprint. A genesis of three servers:
//! every configuration accepted, and the three started from them form a
//! cluster that keeps a stream on all three and admits no other CA's server.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use mesh_bus::CertPin;
use mesh_controller::genesis::{
    BROKER_CERT, BROKER_CONF, BROKER_KEY, BROKER_PID, BUS_FILE, CA_CERT, CA_KEY, JETSTREAM_DIR,
    NKEY_SEED, SIGNING_SEED, USERS_FILE, XKEY_SEED,
};
use mesh_controller::{Genesis, GenesisError, GenesisOptions};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use sha2::{Digest as _, Sha256};

const ADDRESSES: &[&str] = &["10.1.2.3", "ctl.example", "::1"];

/// Every entry a genesis writes, in the order `AlreadyExists` names them.
const WRITTEN: &[&str] = &[
    SIGNING_SEED,
    NKEY_SEED,
    XKEY_SEED,
    CA_CERT,
    CA_KEY,
    BROKER_CERT,
    BROKER_KEY,
    BROKER_CONF,
    BUS_FILE,
    JETSTREAM_DIR,
];

fn addresses() -> Vec<String> {
    ADDRESSES.iter().map(|s| s.to_string()).collect()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// Every entry under `dir`: its mode and, for files, its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                out.insert(p.clone(), (mode(&p), Vec::new()));
                todo.push(p);
            } else {
                out.insert(p.clone(), (mode(&p), std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

fn read(g: &Genesis, rel: &str) -> String {
    std::fs::read_to_string(g.path(rel)).unwrap()
}

fn der(path: &Path) -> CertificateDer<'static> {
    CertificateDer::from_pem_file(path).unwrap()
}

fn users_file(g: &Genesis) -> String {
    format!(
        "authorization {{\n  users = [\n    {{ nkey: \"{}\" }}\n  ]\n}}\n",
        g.controller_nkey
    )
}

#[test]
fn files_and_modes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("state");
    let g = Genesis::create(&dir, &addresses()).unwrap();
    for d in ["", "controller", "ca", "broker", JETSTREAM_DIR] {
        assert_eq!(mode(&dir.join(d)), 0o700, "dir {d:?}");
    }
    for k in [SIGNING_SEED, NKEY_SEED, XKEY_SEED, CA_KEY, BROKER_KEY] {
        assert_eq!(mode(&dir.join(k)), 0o600, "{k}");
    }
    for f in [CA_CERT, BROKER_CERT, BROKER_CONF] {
        assert!(g.path(f).is_file(), "{f}");
    }
    // The users file is the controller's to compose.
    assert!(!g.path(USERS_FILE).exists());
    // A single server's layout and bus file are those of every mesh made
    // before clusters.
    assert_eq!(g.replicas, 1);
    assert_eq!(g.broker_configs(), [g.path(BROKER_CONF)]);
    assert_eq!(g.broker_pid_files(), [g.path(BROKER_PID)]);
    assert!(!g.path("broker/nats-1.conf").exists());
    assert_eq!(std::fs::read_dir(g.path(JETSTREAM_DIR)).unwrap().count(), 0);
    assert_eq!(
        read(&g, BUS_FILE),
        "{\n  \"port\": 4222,\n  \"addresses\": [\n    \"10.1.2.3\",\n    \"ctl.example\",\n    \"::1\"\n  ]\n}\n"
    );
}

#[test]
fn an_existing_state_dir_is_narrowed_to_0700() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    Genesis::create(tmp.path(), &[]).unwrap();
    assert_eq!(mode(tmp.path()), 0o700);
}

#[test]
fn open_reads_back_the_public_parts_of_the_seeds_and_debug_shows_no_secret() {
    let tmp = tempfile::tempdir().unwrap();
    let g = Genesis::create(tmp.path(), &addresses()).unwrap();
    assert_eq!(Genesis::open(tmp.path()).unwrap(), g);

    let nkey_seed = read(&g, NKEY_SEED);
    let kp = nkeys::KeyPair::from_seed(nkey_seed.trim()).unwrap();
    assert!(nkey_seed.starts_with("SU"));
    assert_eq!(g.controller_nkey, kp.public_key());
    assert!(g.controller_nkey.starts_with('U'));

    let xkey_seed = read(&g, XKEY_SEED);
    assert!(xkey_seed.starts_with("SX"));
    assert_eq!(
        g.xkey,
        nkeys::XKey::from_seed(xkey_seed.trim())
            .unwrap()
            .public_key()
    );

    let signing_seed = read(&g, SIGNING_SEED);
    let seed: [u8; 32] = hex::decode(signing_seed.trim())
        .unwrap()
        .try_into()
        .unwrap();
    let sk = ed25519_dalek::SigningKey::from_bytes(&seed);
    assert_eq!(g.signing_key, hex::encode(sk.verifying_key().to_bytes()));

    let shown = format!("{g:?}");
    for secret in [nkey_seed.trim(), xkey_seed.trim(), signing_seed.trim()] {
        assert!(!shown.contains(secret), "{shown}");
    }
}

#[test]
fn a_damaged_seed_file_is_refused_without_showing_it() {
    let tmp = tempfile::tempdir().unwrap();
    let g = Genesis::create(tmp.path(), &[]).unwrap();
    for rel in [NKEY_SEED, XKEY_SEED, SIGNING_SEED] {
        let good = read(&g, rel);
        let damaged = format!("{}Q", good.trim());
        std::fs::write(g.path(rel), &damaged).unwrap();
        let err = Genesis::open(tmp.path()).unwrap_err();
        assert!(
            matches!(err, GenesisError::BadKeyFile { .. }),
            "{rel}: {err}"
        );
        assert!(err.to_string().contains(rel), "{err}");
        assert!(!err.to_string().contains(&damaged[2..20]), "{err}");
        assert!(!format!("{err:?}").contains(&damaged[2..20]), "{err:?}");
        std::fs::write(g.path(rel), good).unwrap();
    }
    // A valid seed of the wrong kind: an account key cannot connect as a user.
    let account = nkeys::KeyPair::new_account().seed().unwrap();
    std::fs::write(g.path(NKEY_SEED), &account).unwrap();
    let err = Genesis::open(tmp.path()).unwrap_err();
    assert!(matches!(err, GenesisError::BadKeyFile { .. }), "{err}");
    assert!(!err.to_string().contains(&account[2..20]), "{err}");
}

#[test]
fn a_second_create_is_refused_naming_every_file_and_changing_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    Genesis::create(tmp.path(), &addresses()).unwrap();
    let before = snapshot(tmp.path());
    let err = Genesis::create(tmp.path(), &addresses()).unwrap_err();
    let GenesisError::AlreadyExists { files, .. } = &err else {
        panic!("{err}");
    };
    let want: Vec<PathBuf> = WRITTEN.iter().map(|f| tmp.path().join(f)).collect();
    assert_eq!(files, &want);
    let msg = err.to_string();
    for f in &want {
        assert!(msg.contains(&f.display().to_string()), "{msg}");
    }
    assert_eq!(snapshot(tmp.path()), before);
}

#[test]
fn one_leftover_file_is_enough_to_refuse_and_nothing_is_written() {
    // A users file or a store from an earlier mesh: a new broker config beside
    // them would admit that mesh's principals or adopt its streams.
    for leftover in [USERS_FILE, JETSTREAM_DIR, BROKER_KEY] {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(leftover);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        if leftover == JETSTREAM_DIR {
            std::fs::create_dir(&path).unwrap();
        } else {
            std::fs::write(&path, "left over").unwrap();
        }
        let before = snapshot(tmp.path());
        let err = Genesis::create(tmp.path(), &[]).unwrap_err();
        let GenesisError::AlreadyExists { files, .. } = &err else {
            panic!("{err}");
        };
        assert_eq!(files, &vec![path.clone()], "{leftover}");
        assert_eq!(snapshot(tmp.path()), before, "{leftover}");
    }
}

#[test]
fn a_bad_address_is_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("state");
    let err = Genesis::create(&dir, &["10.0.0.1:4222".into()]).unwrap_err();
    assert!(matches!(err, GenesisError::BadAddress { .. }), "{err}");
    assert!(!dir.exists());
}

#[test]
fn nats_server_accepts_the_broker_config_once_a_users_file_is_beside_it() {
    let tmp = tempfile::tempdir().unwrap();
    let g = Genesis::create(tmp.path(), &addresses()).unwrap();
    let conf = g.path(BROKER_CONF);
    // Without the users file the include fails: the config really includes it.
    let err = mesh_testkit::nats::test_config(&conf).unwrap_err();
    assert!(err.to_string().contains("users.conf"), "{err}");
    std::fs::write(g.path(USERS_FILE), users_file(&g)).unwrap();
    mesh_testkit::nats::test_config(&conf).unwrap();
}

#[test]
fn the_broker_certificate_chains_to_the_ca_and_carries_the_requested_names() {
    let tmp = tempfile::tempdir().unwrap();
    let g = Genesis::create(tmp.path(), &addresses()).unwrap();
    let ca = der(&g.path(CA_CERT));
    let cert = der(&g.path(BROKER_CERT));
    let anchor = webpki::anchor_from_trusted_cert(&ca).unwrap();
    let ee = webpki::EndEntityCert::try_from(&cert).unwrap();
    let verify = |anchor: &rustls_pki_types::TrustAnchor<'_>| {
        ee.verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            std::slice::from_ref(anchor),
            &[],
            UnixTime::now(),
            webpki::KeyUsage::server_auth(),
            None,
            None,
        )
        .map(|_| ())
    };
    verify(&anchor).unwrap();
    // A cluster's servers present it to each other on their routes too.
    ee.verify_for_usage(
        webpki::ALL_VERIFICATION_ALGS,
        std::slice::from_ref(&anchor),
        &[],
        UnixTime::now(),
        webpki::KeyUsage::client_auth(),
        None,
        None,
    )
    .unwrap();

    // Another genesis's CA does not vouch for it.
    let other = tempfile::tempdir().unwrap();
    let og = Genesis::create(other.path(), &[]).unwrap();
    let other_ca = der(&og.path(CA_CERT));
    assert!(verify(&webpki::anchor_from_trusted_cert(&other_ca).unwrap()).is_err());

    for name in ["127.0.0.1", "localhost", "10.1.2.3", "ctl.example", "::1"] {
        let sn = ServerName::try_from(name).unwrap();
        ee.verify_is_valid_for_subject_name(&sn)
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
    }
    for name in ["10.1.2.4", "other.example"] {
        let sn = ServerName::try_from(name).unwrap();
        assert!(ee.verify_is_valid_for_subject_name(&sn).is_err(), "{name}");
    }
}

#[test]
fn the_fingerprint_is_the_sha256_of_the_certificate_der() {
    let tmp = tempfile::tempdir().unwrap();
    let g = Genesis::create(tmp.path(), &[]).unwrap();
    let cert = der(&g.path(BROKER_CERT));
    assert_eq!(g.cert_sha256, hex::encode(Sha256::digest(cert.as_ref())));
}

/// A nats-server run on a genesis's own configuration, killed on drop.
struct Broker(Child);

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn the_genesis_broker_admits_the_controller_over_the_pinned_certificate_only() {
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let opts = GenesisOptions {
        port,
        ..GenesisOptions::default()
    };
    let g = Genesis::create_with(tmp.path(), &[], &opts).unwrap();
    std::fs::write(g.path(USERS_FILE), users_file(&g)).unwrap();
    let log = std::fs::File::create(tmp.path().join("broker.log")).unwrap();
    let _broker = Broker(
        Command::new(mesh_testkit::nats_server_binary().unwrap())
            .arg("-c")
            .arg(g.path(BROKER_CONF))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let seed = read(&g, NKEY_SEED).trim().to_string();
    let url = format!("tls://127.0.0.1:{port}");
    let pin = CertPin::from_hex(&g.cert_sha256).unwrap();
    let pinned = |seed: String| {
        async_nats::ConnectOptions::with_nkey(seed)
            .tls_client_config(pin.client_config())
            .require_tls(true)
    };

    let mut client = None;
    for _ in 0..100 {
        if let Ok(c) = pinned(seed.clone()).connect(&url).await {
            client = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let client = client.unwrap_or_else(|| {
        panic!(
            "the broker never admitted the controller; its log:\n{}",
            std::fs::read_to_string(tmp.path().join("broker.log")).unwrap_or_default()
        )
    });
    // JetStream is on, with its store where genesis put it.
    async_nats::jetstream::new(client)
        .query_account()
        .await
        .unwrap();
    assert!(
        std::fs::read_dir(g.path(JETSTREAM_DIR))
            .unwrap()
            .next()
            .is_some()
    );

    // The users file is in force: a key it does not list is refused.
    let stranger = nkeys::KeyPair::new_user().seed().unwrap();
    assert!(pinned(stranger).connect(&url).await.is_err());

    // A CA-trusting client reaching it as localhost: the name is in the
    // certificate and the certificate chains to the CA.
    async_nats::ConnectOptions::with_nkey(seed)
        .add_root_certificates(g.path(CA_CERT))
        .require_tls(true)
        .connect(format!("tls://localhost:{port}"))
        .await
        .unwrap();
}

fn cluster(port: u16) -> GenesisOptions {
    GenesisOptions {
        port,
        replicas: 3,
        ..GenesisOptions::default()
    }
}

const SERVER_CONFS: [&str; 3] = [
    "broker/nats-1.conf",
    "broker/nats-2.conf",
    "broker/nats-3.conf",
];

#[test]
fn a_cluster_genesis_lays_out_a_config_a_pid_file_and_a_store_per_server() {
    let tmp = tempfile::tempdir().unwrap();
    let g = Genesis::create_with(tmp.path(), &[], &cluster(4222)).unwrap();
    assert_eq!(g.replicas, 3);
    assert_eq!(Genesis::open(tmp.path()).unwrap(), g);
    assert_eq!(g.broker_configs(), SERVER_CONFS.map(|c| g.path(c)));
    assert_eq!(
        g.broker_pid_files(),
        [
            "broker/nats-1.pid",
            "broker/nats-2.pid",
            "broker/nats-3.pid"
        ]
        .map(|p| g.path(p))
    );
    for conf in SERVER_CONFS {
        assert_eq!(mode(&g.path(conf)), 0o644, "{conf}");
    }
    assert!(!g.path(BROKER_CONF).exists());
    for store in [
        "jetstream",
        "jetstream/server-1",
        "jetstream/server-2",
        "jetstream/server-3",
    ] {
        assert_eq!(mode(&g.path(store)), 0o700, "{store}");
    }
    assert_eq!(
        read(&g, BUS_FILE),
        "{\n  \"port\": 4222,\n  \"addresses\": [],\n  \"replicas\": 3\n}\n"
    );
    assert_eq!(
        g.bus_urls(),
        [
            "tls://127.0.0.1:4222",
            "tls://127.0.0.1:4223",
            "tls://127.0.0.1:4224"
        ]
    );

    // A second genesis names the cluster's configurations too.
    let before = snapshot(tmp.path());
    let err = Genesis::create_with(tmp.path(), &[], &cluster(4222)).unwrap_err();
    let GenesisError::AlreadyExists { files, .. } = &err else {
        panic!("{err}");
    };
    let want: Vec<PathBuf> = WRITTEN
        .iter()
        .filter(|f| **f != BROKER_CONF)
        .chain(&SERVER_CONFS)
        .map(|f| tmp.path().join(f))
        .collect();
    assert_eq!(files, &want);
    assert_eq!(snapshot(tmp.path()), before);
}

#[test]
fn a_cluster_genesis_it_cannot_lay_out_is_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("state");
    let two: Vec<String> = addresses()[..2].to_vec();
    let err = Genesis::create_with(&dir, &two, &cluster(4222)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "--replicas 3 takes 3 --address (one per server) or none (all on this machine); 2 given"
    );
    let twice: Vec<String> = ["10.1.2.3", "ctl.example", "CTL.example"]
        .map(String::from)
        .to_vec();
    let err = Genesis::create_with(&dir, &twice, &cluster(4222)).unwrap_err();
    assert!(matches!(err, GenesisError::ServerAddress { .. }), "{err}");
    let even = GenesisOptions {
        port: 4222,
        replicas: 2,
        ..GenesisOptions::default()
    };
    let err = Genesis::create_with(&dir, &[], &even).unwrap_err();
    assert!(matches!(err, GenesisError::BadReplicas(2)), "{err}");
    let err = Genesis::create_with(&dir, &[], &cluster(65531)).unwrap_err();
    assert!(matches!(err, GenesisError::ClusterPort { .. }), "{err}");
    assert!(!dir.exists());
}

#[test]
fn nats_server_accepts_every_config_of_a_cluster_here_or_over_machines() {
    for machines in [&[][..], &["10.1.2.3", "ctl.example", "fd00::3"][..]] {
        let tmp = tempfile::tempdir().unwrap();
        let machines: Vec<String> = machines.iter().map(|m| m.to_string()).collect();
        let g = Genesis::create_with(tmp.path(), &machines, &cluster(4222)).unwrap();
        assert_eq!(g.broker_configs().len(), 3);
        for conf in g.broker_configs() {
            // Each includes the one users file beside them all.
            let err = mesh_testkit::nats::test_config(&conf).unwrap_err();
            assert!(err.to_string().contains("users.conf"), "{err}");
        }
        std::fs::write(g.path(USERS_FILE), users_file(&g)).unwrap();
        for conf in g.broker_configs() {
            mesh_testkit::nats::test_config(&conf)
                .unwrap_or_else(|e| panic!("{}: {e}", conf.display()));
        }
    }
}

/// Connects as the controller over the pinned certificate, retrying while
/// the server comes up.
async fn connect_pinned(g: &Genesis, url: &str) -> async_nats::Client {
    let seed = read(g, NKEY_SEED).trim().to_string();
    let pin = CertPin::from_hex(&g.cert_sha256).unwrap();
    let mut last = None;
    for _ in 0..100 {
        match async_nats::ConnectOptions::with_nkey(seed.clone())
            .tls_client_config(pin.client_config())
            .require_tls(true)
            .connect(url)
            .await
        {
            Ok(c) => return c,
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{url} never admitted the controller: {last:?}");
}

#[tokio::test]
async fn three_servers_of_a_cluster_genesis_keep_an_r3_stream_and_admit_no_stranger() {
    use async_nats::jetstream::stream::{Config, StorageType};

    let tmp = tempfile::tempdir().unwrap();
    // Three client ports, then three route ports.
    let port = mesh_testkit::free_port_run(6).unwrap();
    let g = Genesis::create_with(&tmp.path().join("state"), &[], &cluster(port)).unwrap();
    std::fs::write(g.path(USERS_FILE), users_file(&g)).unwrap();
    let servers = mesh_testkit::Cluster::start(&g.broker_configs(), tmp.path()).unwrap();
    // Each server writes the pid file genesis named for it.
    for (b, pid_file) in servers.servers().iter().zip(g.broker_pid_files()) {
        let written = std::fs::read_to_string(&pid_file).unwrap();
        assert_eq!(
            written.trim(),
            b.pid().to_string(),
            "{}",
            pid_file.display()
        );
    }

    // Three replicas need a meta leader and every peer: the routes up and
    // a leader elected (a request sent before goes unanswered).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !servers.logs().contains("new metadata leader") {
        assert!(
            std::time::Instant::now() < deadline,
            "no metadata leader within 30 s; the servers' logs:\n{}",
            servers.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let urls = g.local_urls();
    let js = async_nats::jetstream::ContextBuilder::new()
        .timeout(Duration::from_secs(2))
        .build(connect_pinned(&g, &urls[0]).await);
    let config = Config {
        name: "R3".into(),
        subjects: vec!["r3.>".into()],
        num_replicas: 3,
        storage: StorageType::File,
        ..Config::default()
    };
    let mut stream = None;
    let mut last = None;
    for _ in 0..100 {
        match js.create_stream(config.clone()).await {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut stream = stream.unwrap_or_else(|| {
        panic!(
            "no R3 stream: {last:?}; the servers' logs:\n{}",
            servers.logs()
        )
    });
    js.publish("r3.hello", "kept on three servers".into())
        .await
        .unwrap()
        .await
        .unwrap();

    // The stream's group is the three servers genesis named.
    let info = stream.info().await.unwrap();
    let group = info.cluster.as_ref().expect("a clustered stream");
    assert_eq!(group.name.as_deref(), Some("mesh"));
    let mut peers: Vec<String> = group.replicas.iter().map(|p| p.name.clone()).collect();
    peers.extend(group.leader.clone());
    peers.sort();
    assert_eq!(peers, ["mesh-1", "mesh-2", "mesh-3"]);

    // Read back through another server of the cluster.
    let js3 = async_nats::jetstream::new(connect_pinned(&g, &urls[2]).await);
    let read_back = js3
        .get_stream("R3")
        .await
        .unwrap()
        .get_last_raw_message_by_subject("r3.hello")
        .await
        .unwrap();
    assert_eq!(&read_back.payload[..], b"kept on three servers");

    // A server of another mesh, trusting this mesh's CA and routing to this
    // cluster, presents its own broker certificate: refused on the route.
    let other_port = mesh_testkit::free_port_run(6).unwrap();
    let other = Genesis::create_with(&tmp.path().join("other"), &[], &cluster(other_port)).unwrap();
    std::fs::write(other.path(USERS_FILE), users_file(&other)).unwrap();
    let ours = g.servers();
    let route_to_ours = &ours[0].route.as_ref().unwrap().url;
    let stranger_conf = other.path("broker/stranger.conf");
    let text = read(&other, "broker/nats-1.conf")
        .replace("\"mesh-1\"", "\"stranger\"")
        .replace(&quoted(&other.path(CA_CERT)), &quoted(&g.path(CA_CERT)));
    let routes_start = text.find("  routes: [\n").unwrap();
    let routes_end = routes_start + text[routes_start..].find("  ]\n").unwrap() + 4;
    let text = format!(
        "{}  routes: [\n    \"{route_to_ours}\"\n  ]\n{}",
        &text[..routes_start],
        &text[routes_end..]
    );
    assert!(text.contains(&quoted(&g.path(CA_CERT))), "{text}");
    std::fs::write(&stranger_conf, text).unwrap();
    let _stranger =
        mesh_testkit::Broker::start(&stranger_conf, &tmp.path().join("stranger.log")).unwrap();
    let refused = |log: &str| {
        log.lines().any(|l| {
            l.contains("TLS route handshake error")
                && l.contains("unknown authority")
                && l.contains(&other.cert_sha256)
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !refused(&servers.servers()[0].log()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the stranger was never refused; the servers' logs:\n{}",
            servers.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Still three peers, the stream's message still there.
    let info = stream.info().await.unwrap();
    assert_eq!(info.cluster.as_ref().unwrap().replicas.len(), 2);
    assert_eq!(info.state.messages, 1);
}

fn quoted(p: &Path) -> String {
    format!("\"{}\"", p.display())
}

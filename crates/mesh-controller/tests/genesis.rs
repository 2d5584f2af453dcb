//! Genesis on disk: files and modes, refusal of a second genesis, the broker
//! configuration accepted and served by a real nats-server, and the broker
//! certificate's chain, names and fingerprint.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use mesh_bus::CertPin;
use mesh_controller::genesis::{
    BROKER_CERT, BROKER_CONF, BROKER_KEY, BUS_FILE, CA_CERT, CA_KEY, JETSTREAM_DIR, NKEY_SEED,
    SIGNING_SEED, USERS_FILE, XKEY_SEED,
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
    let g = Genesis::create_with(tmp.path(), &[], &GenesisOptions { port }).unwrap();
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

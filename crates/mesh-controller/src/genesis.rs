//! Genesis: the controller's keys, a CA, the broker's TLS certificate and the
//! broker's own configuration, made once in the controller's state directory.
//!
//! Every secret is generated here and never leaves the directory: the keys are
//! written 0600 in 0700 directories, and [`Genesis`] holds public parts only,
//! so neither its `Debug` nor any [`GenesisError`] can carry one.
//!
//! Layout under the state directory (paths relative to it):
//!
//! | path | what |
//! |---|---|
//! | [`SIGNING_SEED`] | the controller's Ed25519 signing key: hex of its 32-byte seed (0600) |
//! | [`NKEY_SEED`] | the controller's NKey user seed `SU…` (0600) |
//! | [`XKEY_SEED`] | the controller's X25519 XKey seed `SX…` (0600) |
//! | [`CA_CERT`], [`CA_KEY`] | the mesh CA (key 0600) |
//! | [`BROKER_CERT`], [`BROKER_KEY`] | the broker's TLS certificate and key (key 0600) |
//! | [`BROKER_CONF`] | the broker's configuration; it includes [`USERS_FILE`] |
//! | [`BUS_FILE`] | the broker's port and the addresses it is reached at |
//! | [`BROKER_PID`] | the broker's pid, written by the broker |
//! | [`JETSTREAM_DIR`] | the broker's JetStream store |
//!
//! The users file is not written here: its first composition (which puts the
//! controller's public key in it) belongs to the controller.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs::{DirBuilder, OpenOptions};
use std::io::Write as _;
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use rand::TryRngCore as _;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

pub const SIGNING_SEED: &str = "controller/signing.seed";
pub const NKEY_SEED: &str = "controller/nkey.seed";
pub const XKEY_SEED: &str = "controller/xkey.seed";
pub const CA_CERT: &str = "ca/ca.pem";
pub const CA_KEY: &str = "ca/ca-key.pem";
pub const BROKER_CERT: &str = "broker/cert.pem";
pub const BROKER_KEY: &str = "broker/key.pem";
pub const BROKER_CONF: &str = "broker/nats.conf";
/// Composed by the controller, beside [`BROKER_CONF`]: nats-server resolves an
/// include against the including file's directory.
pub const USERS_FILE: &str = "broker/users.conf";
pub const JETSTREAM_DIR: &str = "jetstream";
/// Where the broker is reached: its port and the addresses given at genesis
/// (public; what every token's bus URLs are made from).
pub const BUS_FILE: &str = "broker/bus.json";
/// Written by the broker itself (`pid_file`): the controller reads it each
/// time it signals a reload, so a restarted broker is still the one signalled.
pub const BROKER_PID: &str = "broker/nats.pid";

/// Everything a genesis lays out. Any of them already present means a mesh
/// was made here before: the users file and the store included, since a new
/// broker configuration beside an old users file would admit the old mesh's
/// principals, and beside an old store would adopt its streams.
const LAYOUT: &[&str] = &[
    SIGNING_SEED,
    NKEY_SEED,
    XKEY_SEED,
    CA_CERT,
    CA_KEY,
    BROKER_CERT,
    BROKER_KEY,
    BROKER_CONF,
    BUS_FILE,
    USERS_FILE,
    JETSTREAM_DIR,
];

/// Made before the files; the store directory is made after them, so a
/// genesis that failed half-way leaves nothing [`LAYOUT`] counts but what it
/// could not remove, and a retry is not refused over an empty store.
const SUBDIRS: &[&str] = &["controller", "ca", "broker"];

/// Where the broker listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenesisOptions {
    /// Client port on 127.0.0.1.
    pub port: u16,
}

impl Default for GenesisOptions {
    fn default() -> Self {
        GenesisOptions { port: 4222 }
    }
}

/// The public parts of a genesis. No secret is held, so `Debug` is safe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Genesis {
    pub dir: PathBuf,
    /// The controller's NKey user public key (`U…`): its entry in the users file.
    pub controller_nkey: String,
    /// The controller's Ed25519 signing public key, lowercase hex (32 bytes):
    /// what a token carries and a host verifies declarations with.
    pub signing_key: String,
    /// The controller's XKey public key (`X…`): what sealed values come from.
    pub xkey: String,
    /// Lowercase hex SHA-256 of the broker certificate's DER: what a token pins.
    pub cert_sha256: String,
    /// The broker's client port.
    pub port: u16,
    /// The addresses given at genesis besides 127.0.0.1 (IPs or DNS names).
    pub addresses: Vec<String>,
}

/// [`BUS_FILE`] on disk.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct BusFile {
    port: u16,
    addresses: Vec<String>,
}

impl Genesis {
    /// Where the controller itself connects: the broker listens on the
    /// loopback address in every genesis.
    pub fn local_url(&self) -> String {
        format!("tls://127.0.0.1:{}", self.port)
    }

    /// The addresses a token gives a node: those named at genesis, or the
    /// loopback one when none was (a mesh on one machine). Never loopback
    /// beside others: on another machine it names that machine's own port,
    /// where the pin would refuse whatever answers.
    pub fn bus_urls(&self) -> Vec<String> {
        if self.addresses.is_empty() {
            return vec![self.local_url()];
        }
        self.addresses
            .iter()
            .map(|a| match a.parse::<IpAddr>() {
                Ok(IpAddr::V6(ip)) => format!("tls://[{ip}]:{}", self.port),
                _ => format!("tls://{a}:{}", self.port),
            })
            .collect()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GenesisError {
    #[error(
        "{dir} already holds a genesis ({}); a second one would replace the controller's keys and the broker certificate every node pins: use the existing state directory, or choose an empty one",
        list(.files)
    )]
    AlreadyExists { dir: PathBuf, files: Vec<PathBuf> },
    #[error(
        "{address:?} is not an address the broker can be reached at: {reason}; give an IP address or a DNS name, without scheme or port"
    )]
    BadAddress {
        address: String,
        reason: &'static str,
    },
    #[error(
        "the state directory {0} holds a character the broker configuration cannot quote (`\"`, `\\` or a control character); choose another directory"
    )]
    UnquotablePath(PathBuf),
    #[error("could not {action} {path}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("could not make the mesh's certificates")]
    Certificate(#[source] rcgen::Error),
    /// The file's content is deliberately absent: it is a secret.
    #[error("{path} is not {what}; restore it from the backup of the state directory")]
    BadKeyFile { path: PathBuf, what: &'static str },
    #[error("could not read the broker certificate's fingerprint")]
    Fingerprint(#[source] mesh_bus::PinError),
}

fn list(files: &[PathBuf]) -> String {
    let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    format!("found {}", names.join(", "))
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> GenesisError {
    let path = path.to_path_buf();
    move |source| GenesisError::Io {
        action,
        path,
        source,
    }
}

/// One file to write, with the mode it gets.
struct Planned {
    rel: &'static str,
    contents: Vec<u8>,
    mode: u32,
}

impl Genesis {
    /// [`Self::create_with`] and default options (port 4222).
    pub fn create(dir: &Path, addresses: &[String]) -> Result<Genesis, GenesisError> {
        Self::create_with(dir, addresses, &GenesisOptions::default())
    }

    /// Makes a genesis in `dir` (created 0700 if missing). `addresses` are
    /// the IPs and DNS names nodes will reach the broker at, besides
    /// 127.0.0.1 and localhost, which are always in the certificate.
    ///
    /// Refuses, naming every one found and writing nothing, if any file of a
    /// genesis is already there.
    pub fn create_with(
        dir: &Path,
        addresses: &[String],
        opts: &GenesisOptions,
    ) -> Result<Genesis, GenesisError> {
        // Everything that can be refused is refused before the disk changes.
        let sans = subject_alt_names(addresses)?;
        let found: Vec<PathBuf> = LAYOUT
            .iter()
            .map(|rel| dir.join(rel))
            .filter(|p| p.symlink_metadata().is_ok())
            .collect();
        if !found.is_empty() {
            return Err(GenesisError::AlreadyExists {
                dir: dir.to_path_buf(),
                files: found,
            });
        }

        make_private_dir(dir)?;
        // Absolute paths in nats.conf: the broker resolves tls and store
        // paths against its working directory, not the config's.
        let abs = dir.canonicalize().map_err(io("resolve", dir))?;
        let planned = plan(&abs, &sans, &unique_addresses(addresses), opts)?;
        for sub in SUBDIRS {
            make_private_dir(&abs.join(sub))?;
        }
        write_all(&abs, &planned)?;
        make_private_dir(&abs.join(JETSTREAM_DIR))?;
        Self::open(&abs)
    }

    /// Reads back the public parts of the genesis in `dir`.
    pub fn open(dir: &Path) -> Result<Genesis, GenesisError> {
        let signing = read_secret(dir, SIGNING_SEED)?;
        let bad = |rel: &str, what| GenesisError::BadKeyFile {
            path: dir.join(rel),
            what,
        };
        let seed: [u8; 32] = hex::decode(signing.trim())
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| bad(SIGNING_SEED, "an Ed25519 seed (64 hex characters)"))?;
        let signing_key = hex::encode(
            ed25519_dalek::SigningKey::from_bytes(&seed)
                .verifying_key()
                .to_bytes(),
        );

        let nkey = nkeys::KeyPair::from_seed(read_secret(dir, NKEY_SEED)?.trim())
            .ok()
            .filter(|kp| matches!(kp.key_pair_type(), nkeys::KeyPairType::User))
            .ok_or_else(|| bad(NKEY_SEED, "an NKey user seed (SU…)"))?;
        let xkey = nkeys::XKey::from_seed(read_secret(dir, XKEY_SEED)?.trim())
            .map_err(|_| bad(XKEY_SEED, "an XKey seed (SX…)"))?;
        let cert_sha256 = mesh_bus::fingerprint_of_pem_file(&dir.join(BROKER_CERT))
            .map_err(GenesisError::Fingerprint)?;
        let bus_path = dir.join(BUS_FILE);
        let bus_text = std::fs::read_to_string(&bus_path).map_err(io("read", &bus_path))?;
        let bus: BusFile =
            serde_json::from_str(&bus_text).map_err(|_| GenesisError::BadKeyFile {
                path: bus_path.clone(),
                what: "the broker's port and addresses as genesis wrote them",
            })?;
        Ok(Genesis {
            dir: dir.to_path_buf(),
            controller_nkey: nkey.public_key(),
            signing_key,
            xkey: xkey.public_key(),
            cert_sha256,
            port: bus.port,
            addresses: bus.addresses,
        })
    }

    /// Moves the broker to client port `port` and, if given, to other
    /// addresses nodes reach it at: the bus file and the broker's own
    /// configuration are written anew (the broker listens there once it is
    /// started again). The certificate stays: nodes pin it, not its names.
    pub fn move_broker(
        &self,
        port: u16,
        addresses: Option<&[String]>,
    ) -> Result<Genesis, GenesisError> {
        let addresses = match addresses {
            Some(a) => {
                subject_alt_names(a)?;
                unique_addresses(a)
            }
            None => self.addresses.clone(),
        };
        let conf = broker_config(&self.dir, &GenesisOptions { port }, !addresses.is_empty())?;
        let bus =
            serde_json::to_string_pretty(&BusFile { port, addresses }).expect("bus file JSON");
        for (rel, contents) in [(BUS_FILE, format!("{bus}\n")), (BROKER_CONF, conf)] {
            let path = self.dir.join(rel);
            crate::safe_write::write_private(&path, contents.as_bytes()).map_err(|e| {
                GenesisError::Io {
                    action: "write",
                    path: path.clone(),
                    source: e.source,
                }
            })?;
            // Neither holds a secret; other users may read them as genesis left them.
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))
                .map_err(io("set the mode of", &path))?;
        }
        Self::open(&self.dir)
    }

    /// A path inside the state directory (one of this module's constants).
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }
}

fn read_secret(dir: &Path, rel: &str) -> Result<String, GenesisError> {
    let path = dir.join(rel);
    std::fs::read_to_string(&path).map_err(io("read", &path))
}

/// The SANs: 127.0.0.1 and localhost first, then each address once.
fn subject_alt_names(addresses: &[String]) -> Result<Vec<SanType>, GenesisError> {
    let mut seen = BTreeSet::new();
    let mut sans = Vec::new();
    for a in ["127.0.0.1", "localhost"]
        .into_iter()
        .chain(addresses.iter().map(String::as_str))
    {
        let bad = |reason| GenesisError::BadAddress {
            address: a.to_string(),
            reason,
        };
        let san = if let Ok(ip) = a.parse::<IpAddr>() {
            SanType::IpAddress(ip)
        } else {
            mesh_core::names::check_dns_name(a).map_err(bad)?;
            SanType::DnsName(
                a.to_ascii_lowercase()
                    .try_into()
                    .map_err(|_| bad("not ASCII"))?,
            )
        };
        // Case-folded: `Mesh.example` and `mesh.example` are one name.
        if seen.insert(a.to_ascii_lowercase()) {
            sans.push(san);
        }
    }
    Ok(sans)
}

/// Generates every key and file in memory.
/// The addresses as given, each once (case-folded), without the loopback
/// ones every genesis has.
fn unique_addresses(addresses: &[String]) -> Vec<String> {
    let mut seen = BTreeSet::from(["127.0.0.1".to_string(), "localhost".to_string()]);
    addresses
        .iter()
        .filter(|a| seen.insert(a.to_ascii_lowercase()))
        .map(|a| a.to_ascii_lowercase())
        .collect()
}

fn plan(
    dir: &Path,
    sans: &[SanType],
    addresses: &[String],
    opts: &GenesisOptions,
) -> Result<Vec<Planned>, GenesisError> {
    let mut seed = [0u8; 32];
    rand::rngs::OsRng
        .try_fill_bytes(&mut seed)
        .map_err(|e| GenesisError::Io {
            action: "draw randomness for the signing key in",
            path: dir.to_path_buf(),
            source: std::io::Error::other(e),
        })?;
    let nkey = nkeys::KeyPair::new_user();
    let xkey = nkeys::XKey::new();
    // Seeds cannot fail to encode for keys made here with their seed.
    let nkey_seed = nkey.seed().expect("a generated user key has a seed");
    let xkey_seed = xkey.seed().expect("a generated xkey has a seed");

    let cert = |e| GenesisError::Certificate(e);
    let ca_key = KeyPair::generate().map_err(cert)?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(cert)?;
    // Path length 0: the CA signs the broker's certificate, never another CA.
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "mesh CA");
    let ca_cert = ca_params.self_signed(&ca_key).map_err(cert)?;
    let ca_key_pem = ca_key.serialize_pem();
    let issuer = Issuer::new(ca_params, ca_key);

    let broker_key = KeyPair::generate().map_err(cert)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(cert)?;
    params.subject_alt_names = sans.to_vec();
    params
        .distinguished_name
        .push(DnType::CommonName, "mesh broker");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let broker_cert = params.signed_by(&broker_key, &issuer).map_err(cert)?;

    let conf = broker_config(dir, opts, !addresses.is_empty())?;
    let bus = serde_json::to_string_pretty(&BusFile {
        port: opts.port,
        addresses: addresses.to_vec(),
    })
    .expect("bus file JSON");
    Ok(vec![
        Planned {
            rel: BUS_FILE,
            contents: format!("{bus}\n").into_bytes(),
            mode: 0o644,
        },
        Planned {
            rel: SIGNING_SEED,
            contents: format!("{}\n", hex::encode(seed)).into_bytes(),
            mode: 0o600,
        },
        Planned {
            rel: NKEY_SEED,
            contents: format!("{nkey_seed}\n").into_bytes(),
            mode: 0o600,
        },
        Planned {
            rel: XKEY_SEED,
            contents: format!("{xkey_seed}\n").into_bytes(),
            mode: 0o600,
        },
        Planned {
            rel: CA_CERT,
            contents: ca_cert.pem().into_bytes(),
            mode: 0o644,
        },
        Planned {
            rel: CA_KEY,
            contents: ca_key_pem.into_bytes(),
            mode: 0o600,
        },
        Planned {
            rel: BROKER_CERT,
            contents: broker_cert.pem().into_bytes(),
            mode: 0o644,
        },
        Planned {
            rel: BROKER_KEY,
            contents: broker_key.serialize_pem().into_bytes(),
            mode: 0o600,
        },
        Planned {
            rel: BROKER_CONF,
            contents: conf.into_bytes(),
            mode: 0o644,
        },
    ])
}

/// The broker's own configuration: listen, TLS, JetStream, its pid file, and
/// the users file by bare name. Loopback only, unless other addresses were
/// named: then every interface, or the nodes given those addresses would
/// find nothing listening there.
fn broker_config(
    dir: &Path,
    opts: &GenesisOptions,
    reached_elsewhere: bool,
) -> Result<String, GenesisError> {
    let quoted = |rel: &str| quote(&dir.join(rel));
    let mut c = String::new();
    c.push_str("# The broker's own configuration, written once by genesis.\n");
    c.push_str("# Who may connect is in users.conf, composed by the controller.\n");
    let host = if reached_elsewhere {
        "0.0.0.0"
    } else {
        "127.0.0.1"
    };
    let _ = writeln!(c, "listen: \"{host}:{}\"", opts.port);
    let _ = writeln!(c, "pid_file: {}", quoted(BROKER_PID)?);
    // No `verify: true`: it demands a client certificate, and mesh clients
    // authenticate by NKey over server-authenticated TLS. A handshake may
    // take 10 s, not the server's default 2: a broker restarted under
    // thousands of hosts handshakes with all of them at once, and each one
    // timed out backs off and comes again (a storm of 10,000 hosts logged
    // 10,709 timeouts at the default).
    let _ = writeln!(
        c,
        "tls {{\n  cert_file: {}\n  key_file: {}\n  timeout: 10\n}}",
        quoted(BROKER_CERT)?,
        quoted(BROKER_KEY)?
    );
    let _ = writeln!(
        c,
        "jetstream {{\n  store_dir: {}\n}}",
        quoted(JETSTREAM_DIR)?
    );
    // Bare name: nats-server joins even an absolute include path onto this
    // file's directory.
    c.push_str("include users.conf\n");
    Ok(c)
}

/// A double-quoted config string. Refuses what the config parser would read
/// differently from the path on disk.
fn quote(p: &Path) -> Result<String, GenesisError> {
    let s = p
        .to_str()
        .ok_or_else(|| GenesisError::UnquotablePath(p.to_path_buf()))?;
    if s.chars().any(|c| c == '"' || c == '\\' || c.is_control()) {
        return Err(GenesisError::UnquotablePath(p.to_path_buf()));
    }
    Ok(format!("\"{s}\""))
}

fn make_private_dir(dir: &Path) -> Result<(), GenesisError> {
    match DirBuilder::new().mode(0o700).recursive(true).create(dir) {
        Ok(()) => {}
        Err(e) => return Err(io("create", dir)(e)),
    }
    // An existing directory keeps its mode through `create`; it is about to
    // hold keys, so it is narrowed too (the umask may also have widened it
    // less than asked, never more).
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(io("restrict to 0700", dir))
}

/// Writes every planned file with `create_new`, so a concurrent genesis can
/// never overwrite a key; on failure removes what it wrote.
fn write_all(dir: &Path, planned: &[Planned]) -> Result<(), GenesisError> {
    let mut written = Vec::new();
    for p in planned {
        let path = dir.join(p.rel);
        let result = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(p.mode)
            .open(&path)
            .and_then(|mut f| f.write_all(&p.contents).and_then(|()| f.sync_all()));
        if let Err(e) = result {
            for w in &written {
                let _ = std::fs::remove_file(w);
            }
            // Not created by us: leave a file someone else made in place.
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                let _ = std::fs::remove_file(&path);
            }
            return Err(io("write", &path)(e));
        }
        written.push(path);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_become_sans_once_each_after_the_local_ones() {
        let sans = subject_alt_names(&[
            "10.0.0.7".into(),
            "Ctl.Example".into(),
            "ctl.example".into(),
            "localhost".into(),
            "::1".into(),
        ])
        .unwrap();
        assert_eq!(
            sans,
            vec![
                SanType::IpAddress([127, 0, 0, 1].into()),
                SanType::DnsName("localhost".try_into().unwrap()),
                SanType::IpAddress([10, 0, 0, 7].into()),
                SanType::DnsName("ctl.example".try_into().unwrap()),
                SanType::IpAddress("::1".parse().unwrap()),
            ]
        );
    }

    #[test]
    fn a_token_names_the_given_addresses_or_loopback_alone() {
        let g = |addresses: &[&str]| Genesis {
            dir: "/s".into(),
            controller_nkey: String::new(),
            signing_key: String::new(),
            xkey: String::new(),
            cert_sha256: String::new(),
            port: 4222,
            addresses: addresses.iter().map(|a| a.to_string()).collect(),
        };
        assert_eq!(g(&[]).bus_urls(), ["tls://127.0.0.1:4222"]);
        assert_eq!(g(&["10.0.0.5"]).local_url(), "tls://127.0.0.1:4222");
        assert_eq!(
            g(&["10.0.0.5", "ctl.example", "::1"]).bus_urls(),
            [
                "tls://10.0.0.5:4222",
                "tls://ctl.example:4222",
                "tls://[::1]:4222"
            ]
        );
        assert_eq!(
            unique_addresses(&[
                "Ctl.Example".into(),
                "ctl.example".into(),
                "localhost".into(),
                "127.0.0.1".into()
            ]),
            ["ctl.example"]
        );
    }

    #[test]
    fn an_address_that_is_no_host_is_refused_naming_it() {
        for (a, why) in [
            ("tls://10.0.0.1", "scheme"),
            ("10.0.0.1:4222", "port"),
            ("ctl.example:4222", "port"),
            ("", "1 to 253"),
            ("a..b", "label"),
            ("ctl example", "only letters"),
            ("-ctl.example", "start or end"),
            ("10.0.0.256", "IP address"),
        ] {
            let err = subject_alt_names(&[a.to_string()]).unwrap_err();
            assert!(matches!(err, GenesisError::BadAddress { .. }), "{a}: {err}");
            let msg = err.to_string();
            assert!(
                msg.contains(&format!("{a:?}")) && msg.contains(why),
                "{a}: {msg}"
            );
        }
    }

    #[test]
    fn a_path_the_config_cannot_quote_is_refused() {
        for p in ["/tmp/a\"b", "/tmp/a\\b", "/tmp/a\nb"] {
            assert!(matches!(
                quote(Path::new(p)),
                Err(GenesisError::UnquotablePath(_))
            ));
        }
        assert_eq!(
            quote(Path::new("/var/lib/mesh")).unwrap(),
            "\"/var/lib/mesh\""
        );
    }

    #[test]
    fn the_broker_config_has_no_client_verification_and_includes_by_bare_name() {
        let c = broker_config(Path::new("/s"), &GenesisOptions { port: 4999 }, false).unwrap();
        assert!(c.contains("listen: \"127.0.0.1:4999\""), "{c}");
        assert!(c.contains("pid_file: \"/s/broker/nats.pid\""), "{c}");
        let c = broker_config(Path::new("/s"), &GenesisOptions { port: 4999 }, true).unwrap();
        assert!(c.contains("listen: \"0.0.0.0:4999\""), "{c}");
        assert!(c.contains("cert_file: \"/s/broker/cert.pem\""), "{c}");
        assert!(c.contains("key_file: \"/s/broker/key.pem\""), "{c}");
        assert!(c.contains("store_dir: \"/s/jetstream\""), "{c}");
        assert!(!c.contains("verify"), "{c}");
        // A storm of handshakes is given time (the server's default is 2 s).
        assert!(
            c.contains("  key_file: \"/s/broker/key.pem\"\n  timeout: 10\n}"),
            "{c}"
        );
        assert!(c.lines().any(|l| l == "include users.conf"), "{c}");
    }
}

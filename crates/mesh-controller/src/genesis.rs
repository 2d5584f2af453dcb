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
//! | [`BUS_FILE`] | the broker's port, the addresses it is reached at, its number of servers |
//! | [`BROKER_PID`] | the broker's pid, written by the broker |
//! | [`JETSTREAM_DIR`] | the broker's JetStream store |
//!
//! A mesh on RabbitMQ (`bus` in [`BUS_FILE`] is `amqp`) has, instead of the
//! NATS configuration and store, [`RABBITMQ_CONF`], [`RABBITMQ_DEFINITIONS`]
//! (the controller's user, from a password hash; 0600), [`RABBITMQ_PLUGINS`]
//! and the data directory [`RABBITMQ_DIR`] (`genesis/rabbitmq_conf.rs`).
//!
//! A broker of N > 1 servers (`replicas`, a NATS cluster) has instead, per
//! server i, `broker/nats-i.conf`, `broker/nats-i.pid` and the store
//! `jetstream/server-i`; their ports are told in `genesis/broker_conf.rs`.
//!
//! The users file is not written here: its first composition (which puts the
//! controller's public key in it) belongs to the controller.

use std::collections::BTreeSet;
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

mod broker_conf;
mod rabbitmq_conf;

pub use broker_conf::{CLUSTER_PORT, MAX_REPLICAS, Route, Server};
use broker_conf::{broker_config, check_cluster, servers};
pub use mesh_core::bus::BusKind;
pub use rabbitmq_conf::{
    AmqpPorts, CONSUMER_TIMEOUT_MS, RABBITMQ_CONF, RABBITMQ_DEFINITIONS, RABBITMQ_DIR,
    RABBITMQ_PLUGINS,
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
    RABBITMQ_CONF,
    RABBITMQ_DEFINITIONS,
    RABBITMQ_DIR,
];

/// Made before the files; the store directory is made after them, so a
/// genesis that failed half-way leaves nothing [`LAYOUT`] counts but what it
/// could not remove, and a retry is not refused over an empty store.
const SUBDIRS: &[&str] = &["controller", "ca", "broker"];

/// Where the broker listens, and how many servers it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenesisOptions {
    /// Client port on 127.0.0.1 (the first server's, in a cluster on this
    /// machine; every server's, in a cluster over machines).
    pub port: u16,
    /// Servers of the broker: 1, or an odd number up to [`MAX_REPLICAS`]
    /// clustered.
    pub replicas: u8,
    /// The bus the mesh runs on, recorded here for good.
    pub bus: BusKind,
    /// RabbitMQ's other ports ([`AmqpPorts::after`] the port when `None`).
    pub amqp_ports: Option<AmqpPorts>,
}

impl Default for GenesisOptions {
    fn default() -> Self {
        GenesisOptions {
            port: 4222,
            replicas: 1,
            bus: BusKind::Nats,
            amqp_ports: None,
        }
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
    /// The addresses given at genesis besides 127.0.0.1 (IPs or DNS names);
    /// in a cluster over machines, server i's machine is the i-th.
    pub addresses: Vec<String>,
    /// Servers of the broker: 1, or the size of its cluster.
    pub replicas: u8,
    /// The bus the mesh runs on: the one place it is recorded.
    pub bus: BusKind,
    /// A RabbitMQ broker's other ports; `None` on NATS.
    pub amqp_ports: Option<AmqpPorts>,
}

/// [`BUS_FILE`] on disk.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct BusFile {
    port: u16,
    addresses: Vec<String>,
    /// Absent for a single server: its file stays as it was before clusters.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    replicas: u8,
    /// Absent for NATS: its file stays as it was before a second bus.
    #[serde(default, skip_serializing_if = "is_nats")]
    bus: BusKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    amqp: Option<AmqpPorts>,
}

fn is_nats(b: &BusKind) -> bool {
    *b == BusKind::Nats
}

fn one() -> u8 {
    1
}

fn is_one(n: &u8) -> bool {
    *n == 1
}

impl Genesis {
    /// Where the controller itself connects: the broker listens on the
    /// loopback address in every genesis.
    pub fn local_url(&self) -> String {
        self.bus.address("127.0.0.1", self.port)
    }

    /// The addresses a token gives a node: those named at genesis, or the
    /// loopback one when none was (a mesh on one machine). Never loopback
    /// beside others: on another machine it names that machine's own port,
    /// where the pin would refuse whatever answers.
    ///
    /// In a cluster, every server's URL.
    /// A person's login token: this mesh's bus (`moved`: the addresses of
    /// the bus the mesh moved onto, if it did) and pin, and the login.
    pub fn person_token(
        &self,
        login: mesh_store::IssuedLogin,
        moved: Option<Vec<String>>,
    ) -> mesh_core::secret::Secret {
        mesh_core::token::PersonToken {
            bus_urls: moved.unwrap_or_else(|| self.bus_urls()),
            cert_sha256: self.cert_sha256.clone(),
            person: login.person,
            login_seed: login.secret,
            expires_at: u64::try_from(login.expires_at).unwrap_or(0),
        }
        .encode()
    }

    pub fn bus_urls(&self) -> Vec<String> {
        if self.replicas > 1 {
            return self.local_urls();
        }
        if self.addresses.is_empty() {
            return vec![self.local_url()];
        }
        self.addresses
            .iter()
            .map(|a| broker_conf::url(self.bus.scheme(), a, self.port))
            .collect()
    }

    /// Every server of the broker: one, or each of its cluster's.
    pub fn servers(&self) -> Vec<Server> {
        let mut all = servers(self.port, &self.addresses, self.replicas);
        // One server on RabbitMQ; its address is of its scheme.
        if self.bus == BusKind::Amqp {
            for s in &mut all {
                s.local_url = self.local_url();
            }
        }
        all
    }

    /// The environment `rabbitmq-server` runs in for this genesis; `None` on NATS.
    pub fn rabbitmq_env(&self) -> Option<Vec<(&'static str, std::ffi::OsString)>> {
        self.amqp_ports.map(|p| rabbitmq_conf::env(&self.dir, &p))
    }

    /// `https://127.0.0.1:<port>`: RabbitMQ's management API, which only the
    /// controller uses; `None` on NATS.
    pub fn management_url(&self) -> Option<String> {
        self.amqp_ports
            .map(|p| format!("https://127.0.0.1:{}", p.management))
    }

    /// Every server's URL as this machine reaches it: the loopback one of a
    /// single server or of each server here, the address of each machine of
    /// a cluster over machines.
    pub fn local_urls(&self) -> Vec<String> {
        self.servers().into_iter().map(|s| s.local_url).collect()
    }

    /// Every server's configuration ([`BROKER_CONF`] for a single server).
    pub fn broker_configs(&self) -> Vec<PathBuf> {
        self.servers().iter().map(|s| self.path(&s.conf)).collect()
    }

    /// Every server's pid file ([`BROKER_PID`] for a single server).
    pub fn broker_pid_files(&self) -> Vec<PathBuf> {
        self.servers()
            .iter()
            .map(|s| self.path(&s.pid_file))
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
    #[error(
        "--replicas {0} is no size of broker: give 1 for a single server, or 3, 5 or 7 for a cluster (it acts while a majority of its servers is up)"
    )]
    BadReplicas(u8),
    #[error(
        "--replicas {replicas} takes {replicas} --address (one per server) or none (all on this machine); {given} given"
    )]
    ReplicaAddresses { replicas: u8, given: usize },
    #[error(
        "{address:?} names a server's machine twice, or this machine by its loopback name: with --replicas, each --address is another server's machine (give none to run every server on this machine)"
    )]
    ServerAddress { address: String },
    #[error("--port {port} does not suit a cluster of {replicas}: {why}")]
    ClusterPort {
        port: u16,
        replicas: u8,
        why: String,
    },
    #[error(
        "moving a broker of {replicas} clustered servers is not supported yet: every server's routes and the names its peers check would change at once; the broker stays where genesis put it"
    )]
    ClusterMove { replicas: u8 },
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
    #[error(
        "a mesh on RabbitMQ has one broker server: --replicas {0} is a NATS cluster (give --bus nats, or leave out --replicas)"
    )]
    AmqpReplicas(u8),
    #[error("--port {port} does not suit RabbitMQ: {why}")]
    AmqpPorts { port: u16, why: String },
    #[error(
        "moving a RabbitMQ broker is not supported yet: its listeners and the management API are in {0}; edit them there and restart it"
    )]
    AmqpMove(PathBuf),
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
    rel: String,
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
        let unique = unique_addresses(addresses);
        check_cluster(opts.port, opts.replicas, addresses, &unique)?;
        let amqp_ports = match opts.bus {
            BusKind::Nats => None,
            BusKind::Amqp if opts.replicas > 1 => {
                return Err(GenesisError::AmqpReplicas(opts.replicas));
            }
            BusKind::Amqp => {
                let ports = match opts.amqp_ports {
                    Some(p) => p,
                    None => AmqpPorts::after(opts.port)?,
                };
                ports.check(opts.port)?;
                Some(ports)
            }
        };
        let servers = servers(opts.port, &unique, opts.replicas);
        // A cluster's configurations count too, after a single server's.
        let confs = servers.iter().map(|s| s.conf.as_str());
        let found: Vec<PathBuf> = LAYOUT
            .iter()
            .copied()
            .chain(confs.filter(|c| !LAYOUT.contains(c)))
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
        let planned = plan(&abs, &sans, &unique, opts, amqp_ports, &servers)?;
        for sub in SUBDIRS {
            make_private_dir(&abs.join(sub))?;
        }
        write_all(&abs, &planned)?;
        make_private_dir(&abs.join(match opts.bus {
            BusKind::Nats => JETSTREAM_DIR,
            BusKind::Amqp => RABBITMQ_DIR,
        }))?;
        for s in servers.iter().filter(|s| s.store_dir != JETSTREAM_DIR) {
            make_private_dir(&abs.join(&s.store_dir))?;
        }
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
        let bus = serde_json::from_str::<BusFile>(&bus_text)
            .ok()
            .filter(|b| (b.bus == BusKind::Amqp) == b.amqp.is_some())
            .filter(|b| {
                check_cluster(
                    b.port,
                    b.replicas,
                    &b.addresses,
                    &unique_addresses(&b.addresses),
                )
                .is_ok()
            })
            .ok_or_else(|| GenesisError::BadKeyFile {
                path: bus_path.clone(),
                what: "the broker's port, addresses and servers as genesis wrote them",
            })?;
        Ok(Genesis {
            dir: dir.to_path_buf(),
            controller_nkey: nkey.public_key(),
            signing_key,
            xkey: xkey.public_key(),
            cert_sha256,
            port: bus.port,
            addresses: bus.addresses,
            replicas: bus.replicas,
            bus: bus.bus,
            amqp_ports: bus.amqp,
        })
    }

    /// Moves the broker to client port `port` and, if given, to other
    /// addresses nodes reach it at: the bus file and the broker's own
    /// configuration are written anew (the broker listens there once it is
    /// started again). The certificate stays: nodes pin it, not its names.
    /// A cluster is refused: its peers check each other's names.
    pub fn move_broker(
        &self,
        port: u16,
        addresses: Option<&[String]>,
    ) -> Result<Genesis, GenesisError> {
        if self.bus == BusKind::Amqp {
            return Err(GenesisError::AmqpMove(self.path(RABBITMQ_CONF)));
        }
        if self.replicas > 1 {
            return Err(GenesisError::ClusterMove {
                replicas: self.replicas,
            });
        }
        let addresses = match addresses {
            Some(a) => {
                subject_alt_names(a)?;
                unique_addresses(a)
            }
            None => self.addresses.clone(),
        };
        let server = &servers(port, &addresses, 1)[0];
        let conf = broker_config(&self.dir, server, std::slice::from_ref(server))?;
        let bus = serde_json::to_string_pretty(&BusFile {
            port,
            addresses,
            replicas: 1,
            bus: BusKind::Nats,
            amqp: None,
        })
        .expect("bus file JSON");
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

/// Generates every key and file in memory.
fn plan(
    dir: &Path,
    sans: &[SanType],
    addresses: &[String],
    opts: &GenesisOptions,
    amqp_ports: Option<AmqpPorts>,
    servers: &[Server],
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
    // ClientAuth too, even for a single server: a cluster's servers present
    // it to each other on their routes, and nodes pin this certificate, so
    // one made without it could never become a cluster's.
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let broker_cert = params.signed_by(&broker_key, &issuer).map_err(cert)?;

    let confs = match amqp_ports {
        None => servers
            .iter()
            .map(|s| {
                Ok(Planned {
                    rel: s.conf.clone(),
                    contents: broker_config(dir, s, servers)?.into_bytes(),
                    mode: 0o644,
                })
            })
            .collect::<Result<Vec<_>, GenesisError>>()?,
        Some(ports) => {
            rabbitmq_conf::files(dir, opts.port, &ports, !addresses.is_empty(), &nkey_seed)
                .into_iter()
                .map(|(rel, text)| Planned {
                    rel: rel.into(),
                    contents: text.into_bytes(),
                    // The definitions hold the controller's password hash.
                    mode: if rel == RABBITMQ_DEFINITIONS {
                        0o600
                    } else {
                        0o644
                    },
                })
                .collect()
        }
    };
    let bus = serde_json::to_string_pretty(&BusFile {
        port: opts.port,
        addresses: addresses.to_vec(),
        replicas: opts.replicas,
        bus: opts.bus,
        amqp: amqp_ports,
    })
    .expect("bus file JSON");
    let files = vec![
        Planned {
            rel: BUS_FILE.into(),
            contents: format!("{bus}\n").into_bytes(),
            mode: 0o644,
        },
        Planned {
            rel: SIGNING_SEED.into(),
            contents: format!("{}\n", hex::encode(seed)).into_bytes(),
            mode: 0o600,
        },
        Planned {
            rel: NKEY_SEED.into(),
            contents: format!("{nkey_seed}\n").into_bytes(),
            mode: 0o600,
        },
        Planned {
            rel: XKEY_SEED.into(),
            contents: format!("{xkey_seed}\n").into_bytes(),
            mode: 0o600,
        },
        Planned {
            rel: CA_CERT.into(),
            contents: ca_cert.pem().into_bytes(),
            mode: 0o644,
        },
        Planned {
            rel: CA_KEY.into(),
            contents: ca_key_pem.into_bytes(),
            mode: 0o600,
        },
        Planned {
            rel: BROKER_CERT.into(),
            contents: broker_cert.pem().into_bytes(),
            mode: 0o644,
        },
        Planned {
            rel: BROKER_KEY.into(),
            contents: broker_key.serialize_pem().into_bytes(),
            mode: 0o600,
        },
    ];
    Ok(files.into_iter().chain(confs).collect())
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
        let path = dir.join(&p.rel);
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
mod tests;

//! The host's state directory (0700): its NKey and XKey seeds (0600, made
//! before the enrolment request is sent, so a crash after the controller
//! recorded the public keys cannot lose them) and, once enrolled, `host.json`
//! with the public facts the host runs on.

use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use mesh_bus::{BusConfig, CertPin, ClientCredential, Secret};
use mesh_core::authority::PrincipalKind;
use mesh_core::names::Name;
use mesh_core::subjects;
use serde::{Deserialize, Serialize};

/// The host's NKey user seed (`SU…`).
pub const NKEY_SEED_FILE: &str = "nkey.seed";
/// The host's X25519 sealing seed (`SX…`).
pub const XKEY_SEED_FILE: &str = "xkey.seed";
/// Written once enrolled; public facts only.
pub const HOST_FILE: &str = "host.json";

/// What is wrong with a state directory. Never carries a file's contents:
/// they may be a seed.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("could not {action} {path}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{dir} holds no enrolled host ({HOST_FILE} is missing); enrol first with `mesh host --token TOKEN --state {dir}`"
    )]
    NotEnrolled { dir: PathBuf },
    #[error(
        "{path} is missing although the host is enrolled; the state directory is incomplete: restore it from a backup, or forget the node on the controller and enrol again into an empty directory"
    )]
    Missing { path: PathBuf },
    #[error(
        "{path} has mode {mode:o}, open to other users; it holds a secret: make it 0600 (`chmod 600 {path}`)"
    )]
    FileMode { path: PathBuf, mode: u32 },
    #[error(
        "the state directory {path} has mode {mode:o}, open to other users; make it 0700 (`chmod 700 {path}`)"
    )]
    DirMode { path: PathBuf, mode: u32 },
    #[error(
        "{path} does not hold an NKey {kind} seed; the file is damaged: restore it from a backup, or forget the node on the controller and enrol again into an empty directory"
    )]
    BadSeed { path: PathBuf, kind: &'static str },
    #[error(
        "{path} is not a host record ({reason}); restore it from a backup, or enrol again into an empty directory"
    )]
    BadRecord { path: PathBuf, reason: String },
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StateError {
    let path = path.to_path_buf();
    move |source| StateError::Io {
        action,
        path,
        source,
    }
}

/// The host's own keys. Debug shows the public keys only.
#[derive(Clone)]
pub struct HostKeys {
    nkey: Secret,
    xkey: Secret,
    host_key: String,
    xkey_public: String,
}

impl std::fmt::Debug for HostKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostKeys")
            .field("host_key", &self.host_key)
            .field("xkey", &self.xkey_public)
            .finish_non_exhaustive()
    }
}

impl HostKeys {
    /// The NKey user public key (`U…`).
    pub fn host_key(&self) -> &str {
        &self.host_key
    }

    /// The X25519 public key (`X…`).
    pub fn xkey(&self) -> &str {
        &self.xkey_public
    }

    pub fn nkey_seed(&self) -> &Secret {
        &self.nkey
    }

    pub fn xkey_seed(&self) -> &Secret {
        &self.xkey
    }

    /// Reads the seeds in `dir`, generating and writing (atomically, 0600)
    /// whichever is absent. The directory is created 0700 if missing.
    pub fn load_or_create(dir: &Path) -> Result<HostKeys, StateError> {
        ensure_dir(dir)?;
        let nkey_path = dir.join(NKEY_SEED_FILE);
        if !nkey_path.exists() {
            let kp = nkeys::KeyPair::new_user();
            let seed = kp.seed().map_err(|_| StateError::BadSeed {
                path: nkey_path.clone(),
                kind: "user",
            })?;
            write_private(&nkey_path, seed.as_bytes())?;
        }
        let xkey_path = dir.join(XKEY_SEED_FILE);
        if !xkey_path.exists() {
            let seed = nkeys::XKey::new().seed().map_err(|_| StateError::BadSeed {
                path: xkey_path.clone(),
                kind: "curve (X25519)",
            })?;
            write_private(&xkey_path, seed.as_bytes())?;
        }
        HostKeys::load(dir)
    }

    /// Reads and checks both seeds (present, 0600, parseable).
    pub fn load(dir: &Path) -> Result<HostKeys, StateError> {
        let nkey_path = dir.join(NKEY_SEED_FILE);
        let nkey = read_secret(&nkey_path)?;
        let host_key = nkeys::KeyPair::from_seed(nkey.expose())
            .ok()
            .filter(|kp| matches!(kp.key_pair_type(), nkeys::KeyPairType::User))
            .map(|kp| kp.public_key())
            .ok_or(StateError::BadSeed {
                path: nkey_path,
                kind: "user",
            })?;
        let xkey_path = dir.join(XKEY_SEED_FILE);
        let xkey = read_secret(&xkey_path)?;
        let xkey_public = nkeys::XKey::from_seed(xkey.expose())
            .map(|k| k.public_key())
            .map_err(|_| StateError::BadSeed {
                path: xkey_path,
                kind: "curve (X25519)",
            })?;
        Ok(HostKeys {
            nkey,
            xkey,
            host_key,
            xkey_public,
        })
    }
}

/// `host.json` on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostRecord {
    node: Name,
    bus_urls: Vec<String>,
    cert_sha256: String,
    controller_key: String,
    /// Unix milliseconds.
    enrolled_at: u64,
}

/// An enrolled host: public parts only (the seeds stay in their files and
/// are read when a connection needs them), so Debug is safe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostState {
    pub dir: PathBuf,
    pub node: Name,
    pub bus_urls: Vec<String>,
    /// Lowercase hex SHA-256 of the broker certificate's DER: the pin.
    pub cert_sha256: String,
    /// The controller's Ed25519 signing public key (hex).
    pub controller_key: String,
}

impl HostState {
    /// Opens an enrolled state directory: `host.json` and both seeds must be
    /// there, the seeds 0600 and readable as keys.
    pub fn open(dir: &Path) -> Result<HostState, StateError> {
        let path = dir.join(HOST_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StateError::NotEnrolled {
                    dir: dir.to_path_buf(),
                });
            }
            Err(e) => return Err(io_err("read", &path)(e)),
        };
        check_dir_mode(dir)?;
        let record: HostRecord =
            serde_json::from_slice(&bytes).map_err(|e| StateError::BadRecord {
                path: path.clone(),
                // Category and place only: the text could be anything.
                reason: format!(
                    "{} at line {} column {}",
                    match e.classify() {
                        serde_json::error::Category::Data =>
                            "a field is missing, unknown or of the wrong type",
                        _ => "malformed JSON",
                    },
                    e.line(),
                    e.column()
                ),
            })?;
        if record.bus_urls.is_empty() {
            return Err(StateError::BadRecord {
                path,
                reason: "it names no bus address".into(),
            });
        }
        if CertPin::from_hex(&record.cert_sha256).is_err() {
            return Err(StateError::BadRecord {
                path,
                reason: "cert_sha256 is not a SHA-256".into(),
            });
        }
        for file in [NKEY_SEED_FILE, XKEY_SEED_FILE] {
            let p = dir.join(file);
            if !p.exists() {
                return Err(StateError::Missing { path: p });
            }
        }
        HostKeys::load(dir)?;
        Ok(HostState {
            dir: absolute(dir)?,
            node: record.node,
            bus_urls: record.bus_urls,
            cert_sha256: record.cert_sha256,
            controller_key: record.controller_key,
        })
    }

    /// Records an enrolment: writes `host.json` (atomically, 0600).
    pub fn record(
        dir: &Path,
        node: Name,
        bus_urls: Vec<String>,
        cert_sha256: String,
        controller_key: String,
    ) -> Result<HostState, StateError> {
        let record = HostRecord {
            node,
            bus_urls,
            cert_sha256,
            controller_key,
            enrolled_at: unix_ms(),
        };
        // Strings and a number: serialising cannot fail.
        let mut json = serde_json::to_vec_pretty(&record).expect("host record JSON");
        json.push(b'\n');
        write_private(&dir.join(HOST_FILE), &json)?;
        Ok(HostState {
            dir: absolute(dir)?,
            node: record.node,
            bus_urls: record.bus_urls,
            cert_sha256: record.cert_sha256,
            controller_key: record.controller_key,
        })
    }

    /// Records the broker addresses a declaration names (the broker moved):
    /// `host.json` keeps everything else, the enrolment included, so the
    /// host starts again there without enrolling again.
    pub fn record_bus_urls(&self, urls: &[String]) -> Result<(), StateError> {
        let path = self.dir.join(HOST_FILE);
        let bytes = std::fs::read(&path).map_err(io_err("read", &path))?;
        let mut record: HostRecord =
            serde_json::from_slice(&bytes).map_err(|_| StateError::BadRecord {
                path: path.clone(),
                reason: "it no longer reads as the host's record".into(),
            })?;
        record.bus_urls = urls.to_vec();
        let mut json = serde_json::to_vec_pretty(&record).expect("host record JSON");
        json.push(b'\n');
        write_private(&path, &json)
    }

    /// The host's principal name, `host_<node>`.
    pub fn principal(&self) -> String {
        PrincipalKind::Host {
            node: self.node.clone(),
        }
        .principal_name()
    }

    /// Connecting as this host to the first bus address: its own seed, the
    /// pinned certificate, and its private inbox prefix.
    pub fn bus_config(&self) -> Result<BusConfig, StateError> {
        let url = self.bus_urls.first().ok_or_else(|| StateError::BadRecord {
            path: self.dir.join(HOST_FILE),
            reason: "it names no bus address".into(),
        })?;
        self.bus_config_for(url)
    }

    /// [`Self::bus_config`] for one of the host's bus addresses.
    pub fn bus_config_for(&self, url: &str) -> Result<BusConfig, StateError> {
        let keys = HostKeys::load(&self.dir)?;
        let pin = CertPin::from_hex(&self.cert_sha256).map_err(|_| StateError::BadRecord {
            path: self.dir.join(HOST_FILE),
            reason: "cert_sha256 is not a SHA-256".into(),
        })?;
        Ok(host_bus_config(
            url,
            &self.node,
            keys.nkey_seed().clone(),
            pin,
        ))
    }
}

/// How a host of `node` connects: also used during enrolment, before
/// `host.json` exists, to learn that it was admitted.
pub(crate) fn host_bus_config(url: &str, node: &Name, seed: Secret, pin: CertPin) -> BusConfig {
    let principal = PrincipalKind::Host { node: node.clone() }.principal_name();
    BusConfig {
        url: url.to_string(),
        inbox_prefix: Some(subjects::inbox_prefix(&principal)),
        principal,
        credential: ClientCredential::NKey(seed),
        ca_file: None,
        pin: Some(pin),
    }
}

pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `dir` made absolute against the working directory: every path under it
/// goes to modules (`MESH_NKEY_FILE`, their working directory), which run
/// in directories of their own, where a relative one names nothing.
fn absolute(dir: &Path) -> Result<PathBuf, StateError> {
    std::path::absolute(dir).map_err(io_err("resolve", dir))
}

/// Creates `dir` 0700 if missing, and makes an existing one 0700: the keys
/// are about to be written into it (an operator's `mkdir` under umask 022
/// would otherwise leave it listable by everyone).
pub(crate) fn ensure_dir(dir: &Path) -> Result<(), StateError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_err("create the state directory", dir))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(io_err("set the mode of", dir))?;
    check_dir_mode(dir)
}

fn check_dir_mode(dir: &Path) -> Result<(), StateError> {
    let meta = std::fs::metadata(dir).map_err(io_err("read the state directory", dir))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(StateError::DirMode {
            path: dir.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// A secret file: must be private, and its text is trimmed of the newline
/// an editor may have added.
fn read_secret(path: &Path) -> Result<Secret, StateError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(StateError::Missing {
                path: path.to_path_buf(),
            });
        }
        Err(e) => return Err(io_err("read", path)(e)),
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(StateError::FileMode {
            path: path.to_path_buf(),
            mode,
        });
    }
    let text = std::fs::read_to_string(path).map_err(io_err("read", path))?;
    Ok(Secret::new(text.trim()))
}

/// Writes `contents` to `path` with mode 0600: a temporary file in the same
/// directory, synced, renamed over `path`, then the directory synced, so a
/// crash leaves the old file or the new one, never half of either.
pub fn write_private(path: &Path, contents: &[u8]) -> Result<(), StateError> {
    mesh_files::write_private(path, contents).map_err(|e| StateError::Io {
        action: e.action,
        path: e.path,
        source: e.source,
    })
}

/// Node n1 enrolled in `dir` on `tls://127.0.0.1:4222`, for tests.
#[cfg(test)]
pub(crate) fn enrolled(dir: &Path) -> HostState {
    HostKeys::load_or_create(dir).unwrap();
    HostState::record(
        dir,
        Name::new("n1").unwrap(),
        vec!["tls://127.0.0.1:4222".into()],
        "ab".repeat(32),
        "0c".repeat(32),
    )
    .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    use super::enrolled;

    #[test]
    fn keys_are_made_private_in_a_private_directory_and_reused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        let keys = HostKeys::load_or_create(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        for f in [NKEY_SEED_FILE, XKEY_SEED_FILE] {
            assert_eq!(mode(&dir.join(f)), 0o600, "{f}");
        }
        let nkey = std::fs::read_to_string(dir.join(NKEY_SEED_FILE)).unwrap();
        assert!(nkey.starts_with("SU"));
        assert!(
            std::fs::read_to_string(dir.join(XKEY_SEED_FILE))
                .unwrap()
                .starts_with("SX")
        );
        assert!(keys.host_key().starts_with('U') && keys.xkey().starts_with('X'));
        // A retried enrolment keeps the keys the controller may have recorded.
        let again = HostKeys::load_or_create(&dir).unwrap();
        assert_eq!(again.host_key(), keys.host_key());
        assert_eq!(again.xkey(), keys.xkey());
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        let debug = format!("{keys:?}");
        assert!(!debug.contains(&nkey.trim()[2..]), "{debug}");
    }

    #[test]
    fn an_atomic_write_replaces_the_whole_file_with_mode_0600() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("f");
        std::fs::write(&p, "old and longer").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert_eq!(mode(&p), 0o600);
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
        let err = write_private(&tmp.path().join("missing/f"), b"x").unwrap_err();
        assert!(err.to_string().contains("missing"), "{err}");
    }

    #[test]
    fn host_json_is_public_and_open_reads_it_back() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("s");
        let state = enrolled(&dir);
        let seed = std::fs::read_to_string(dir.join(NKEY_SEED_FILE)).unwrap();
        let xseed = std::fs::read_to_string(dir.join(XKEY_SEED_FILE)).unwrap();
        let json = std::fs::read_to_string(dir.join(HOST_FILE)).unwrap();
        assert!(!json.contains(seed.trim()) && !json.contains("SU") && !json.contains("SX"));
        assert!(!json.contains(xseed.trim()));
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let mut keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "bus_urls",
                "cert_sha256",
                "controller_key",
                "enrolled_at",
                "node"
            ]
        );
        assert_eq!(HostState::open(&dir).unwrap(), state);
        let debug = format!("{state:?}");
        assert!(!debug.contains(&seed.trim()[2..]), "{debug}");
        let cfg = state.bus_config().unwrap();
        assert_eq!(cfg.principal, "host_n1");
        assert_eq!(cfg.inbox_prefix.as_deref(), Some("_INBOX.host_n1"));
        assert_eq!(cfg.pin.unwrap().to_hex(), "ab".repeat(32));
        let debug = format!("{cfg:?}");
        assert!(!debug.contains(&seed.trim()[2..]), "{debug}");
    }

    #[test]
    fn open_names_the_path_and_the_remedy() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = &tmp.path().join("s");
        let err = HostState::open(dir).unwrap_err();
        assert!(matches!(err, StateError::NotEnrolled { .. }), "{err}");
        assert!(err.to_string().contains("--token"), "{err}");
        assert!(err.to_string().contains(&dir.display().to_string()));

        enrolled(dir);
        let nkey = dir.join(NKEY_SEED_FILE);
        std::fs::set_permissions(&nkey, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = HostState::open(dir).unwrap_err();
        assert!(
            matches!(err, StateError::FileMode { mode: 0o644, .. }),
            "{err}"
        );
        assert!(
            err.to_string().contains(&nkey.display().to_string()),
            "{err}"
        );
        assert!(err.to_string().contains("chmod 600"), "{err}");

        let secret = "SUnot-a-seed-SECRETISH";
        write_private(&nkey, secret.as_bytes()).unwrap();
        let err = HostState::open(dir).unwrap_err();
        assert!(
            matches!(err, StateError::BadSeed { kind: "user", .. }),
            "{err}"
        );
        assert!(
            err.to_string().contains(&nkey.display().to_string()),
            "{err}"
        );
        assert!(
            !err.to_string().contains("SECRETISH") && !format!("{err:?}").contains("SECRETISH")
        );

        // An account seed is a seed, but not a user's.
        let account = nkeys::KeyPair::new_account().seed().unwrap();
        write_private(&nkey, account.as_bytes()).unwrap();
        assert!(matches!(
            HostState::open(dir).unwrap_err(),
            StateError::BadSeed { .. }
        ));

        std::fs::remove_file(&nkey).unwrap();
        let err = HostState::open(dir).unwrap_err();
        assert!(matches!(err, StateError::Missing { .. }), "{err}");
        assert!(
            err.to_string().contains(&nkey.display().to_string()),
            "{err}"
        );

        let xkey = dir.join(XKEY_SEED_FILE);
        HostKeys::load_or_create(dir).unwrap();
        write_private(&xkey, nkeys::KeyPair::new_user().seed().unwrap().as_bytes()).unwrap();
        let err = HostState::open(dir).unwrap_err();
        assert!(matches!(err, StateError::BadSeed { .. }), "{err}");
        assert!(
            err.to_string().contains(&xkey.display().to_string()),
            "{err}"
        );

        write_private(&dir.join(HOST_FILE), b"{\"node\": 1}").unwrap();
        let err = HostState::open(dir).unwrap_err();
        assert!(matches!(err, StateError::BadRecord { .. }), "{err}");
        assert!(err.to_string().contains(HOST_FILE), "{err}");
    }

    #[test]
    fn a_directory_open_to_others_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("s");
        enrolled(&dir);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = HostState::open(&dir).unwrap_err();
        assert!(
            matches!(err, StateError::DirMode { mode: 0o755, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("chmod 700"), "{err}");
        // Making keys (a retried enrolment) closes it again.
        HostKeys::load_or_create(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        HostState::open(&dir).unwrap();
    }
}

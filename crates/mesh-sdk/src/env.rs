//! The environment a module is started with, read and checked.

use std::path::PathBuf;
use std::time::Duration;

use mesh_bus::{CertPin, Secret};
use mesh_core::authority::PrincipalKind;
use mesh_core::bus::BusKind;
use mesh_core::names::Name;
use mesh_core::subjects;

use crate::SdkError;

/// Comma-separated broker addresses of one bus: `tls://host:port` (NATS)
/// or `amqps://host:port` (RabbitMQ).
pub const ENV_BUS_URLS: &str = "MESH_BUS_URLS";
/// Hex SHA-256 of the broker certificate's DER.
pub const ENV_BUS_PIN: &str = "MESH_BUS_PIN";
/// Path of the module's NKey user seed file.
pub const ENV_NKEY_FILE: &str = "MESH_NKEY_FILE";
/// The module's private inbox prefix.
pub const ENV_INBOX_PREFIX: &str = "MESH_INBOX_PREFIX";
/// The node's name.
pub const ENV_NODE: &str = "MESH_NODE";
/// The module's name.
pub const ENV_MODULE: &str = "MESH_MODULE";
/// Where [`crate::Module::ready`] says the module is ready (a host that
/// checks none may set none).
pub const ENV_READY_FILE: &str = "MESH_READY_FILE";

/// How long [`Module::emit`] waits for the stream's acknowledgement by
/// default. Short on purpose: a refused publish is answered by silence (the
/// server drops it), and a module should learn that while its operator is
/// still looking.
pub const DEFAULT_ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest seed file read; a user seed is 58 characters, so anything much
/// bigger is not one (and is not read into memory whole).
pub(crate) const MAX_SEED_FILE_BYTES: u64 = 4096;

/// Everything a module needs to connect, as read from its environment.
#[derive(Debug, Clone)]
pub struct ModuleEnv {
    pub bus_urls: Vec<String>,
    pub pin: CertPin,
    pub nkey_file: PathBuf,
    pub inbox_prefix: String,
    pub node: Name,
    pub module: Name,
    /// Not from the environment: [`DEFAULT_ACK_TIMEOUT`] unless set here.
    pub ack_timeout: Duration,
    /// `MESH_READY_FILE`, if the host gave one.
    pub ready_file: Option<PathBuf>,
}

const HINT_URLS: &str = "set it to the broker's tls://host:port (NATS) or amqps://host:port (RabbitMQ) addresses, comma-separated, all of one bus (the host sets it when it starts a module)";
const HINT_PIN: &str = "set it to the 64 lowercase hex digits of the SHA-256 of the broker certificate's DER (the host sets it when it starts a module)";
const HINT_NKEY: &str = "set it to the path of the module's NKey seed file (the host makes it and sets it when it starts a module)";
const HINT_INBOX: &str =
    "set it to _INBOX.module_<node>_<module> (the host sets it when it starts a module)";
const HINT_NODE: &str =
    "set it to the name of the node the module runs on (the host sets it when it starts a module)";
const HINT_MODULE: &str = "set it to the module's name, as its manifest declares it (the host sets it when it starts a module)";

impl ModuleEnv {
    /// Reads the module's environment (see the crate docs).
    pub fn from_env() -> Result<ModuleEnv, SdkError> {
        ModuleEnv::from_lookup(|var| std::env::var(var).ok())
    }

    /// [`ModuleEnv::from_env`] over any lookup (a map in tests). An empty
    /// value counts as unset: `MESH_NODE=` is a mistake, not a name.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<ModuleEnv, SdkError> {
        let get = |var: &'static str, hint: &'static str| {
            lookup(var)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .ok_or(SdkError::Missing { var, hint })
        };
        let invalid = |var, hint, reason: String| SdkError::Invalid { var, reason, hint };

        let node = get(ENV_NODE, HINT_NODE)?;
        let node = Name::new(node).map_err(|e| invalid(ENV_NODE, HINT_NODE, e.to_string()))?;
        let module = get(ENV_MODULE, HINT_MODULE)?;
        let module =
            Name::new(module).map_err(|e| invalid(ENV_MODULE, HINT_MODULE, e.to_string()))?;

        let urls = get(ENV_BUS_URLS, HINT_URLS)?;
        let bus_urls: Vec<String> = urls
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_string)
            .collect();
        if bus_urls.is_empty() {
            return Err(invalid(
                ENV_BUS_URLS,
                HINT_URLS,
                format!("{urls:?} names no address"),
            ));
        }
        // Checked here as well as at connect: the pin only means something
        // over TLS, and the variable is the place to point at.
        let mut kinds = Vec::new();
        for url in &bus_urls {
            let shown = if url.contains('@') {
                "an address carrying credentials".to_string()
            } else {
                format!("{url:?} is not a tls:// or amqps:// address")
            };
            let kind = BusKind::of_address(&url.to_ascii_lowercase())
                .ok_or_else(|| invalid(ENV_BUS_URLS, HINT_URLS, shown))?;
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        if kinds.len() > 1 {
            return Err(invalid(
                ENV_BUS_URLS,
                HINT_URLS,
                format!("{urls:?} names both buses; a mesh runs on one"),
            ));
        }

        let pin_hex = get(ENV_BUS_PIN, HINT_PIN)?;
        let pin = if pin_hex.len() == 64
            && pin_hex
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            CertPin::from_hex(&pin_hex)
                .map_err(|e| invalid(ENV_BUS_PIN, HINT_PIN, e.to_string()))?
        } else {
            return Err(invalid(
                ENV_BUS_PIN,
                HINT_PIN,
                format!(
                    "not 64 lowercase hex digits ({} characters)",
                    pin_hex.chars().count()
                ),
            ));
        };

        let nkey_file = PathBuf::from(get(ENV_NKEY_FILE, HINT_NKEY)?);

        let inbox_prefix = get(ENV_INBOX_PREFIX, HINT_INBOX)?;
        // The only inbox the module's grants allow: any other and every
        // reply (the stream's acknowledgement first) would be refused, far
        // from the cause.
        let expected = subjects::inbox_prefix(&principal(&node, &module));
        if inbox_prefix != expected {
            return Err(invalid(
                ENV_INBOX_PREFIX,
                HINT_INBOX,
                format!(
                    "{inbox_prefix:?}, but module {module} on node {node} receives only under {expected:?}"
                ),
            ));
        }

        Ok(ModuleEnv {
            bus_urls,
            pin,
            nkey_file,
            inbox_prefix,
            node,
            module,
            ack_timeout: DEFAULT_ACK_TIMEOUT,
            ready_file: lookup(ENV_READY_FILE)
                .filter(|v| !v.trim().is_empty())
                .map(PathBuf::from),
        })
    }

    /// The module's principal name on the bus, `module_<node>_<module>`.
    pub fn principal(&self) -> String {
        principal(&self.node, &self.module)
    }
}

fn principal(node: &Name, module: &Name) -> String {
    PrincipalKind::Module {
        node: node.clone(),
        module: module.clone(),
    }
    .principal_name()
}

/// Reads the seed file, refusing one others may read: the seed is the
/// module's identity on the bus.
pub(crate) fn read_seed(path: &std::path::Path) -> Result<Secret, SdkError> {
    use std::io::Read as _;
    use std::os::unix::fs::PermissionsExt as _;

    let read_err = |source| SdkError::ReadSeed {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let mode = file.metadata().map_err(read_err)?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(SdkError::SeedMode {
            path: path.to_path_buf(),
            mode,
        });
    }
    let mut text = String::new();
    file.take(MAX_SEED_FILE_BYTES)
        .read_to_string(&mut text)
        .map_err(read_err)?;
    let seed = text.trim();
    let is_user_seed = nkeys::KeyPair::from_seed(seed)
        .map(|kp| matches!(kp.key_pair_type(), nkeys::KeyPairType::User))
        .unwrap_or(false);
    if !is_user_seed {
        return Err(SdkError::BadSeed {
            path: path.to_path_buf(),
        });
    }
    Ok(Secret::new(seed))
}

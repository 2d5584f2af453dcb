//! mesh-sdk: what a module links to. Today: connecting as the module's own
//! principal and emitting its events; consuming, tools and seat work come
//! later.
//!
//! # The environment a module is started with
//!
//! A host's process driver starts every module with these variables (the
//! contract; a module in another language reads the same ones):
//!
//! | variable | value |
//! |---|---|
//! | `MESH_BUS_URLS` | comma-separated `tls://host:port` broker addresses, tried in order |
//! | `MESH_BUS_PIN` | lowercase hex SHA-256 of the broker certificate's DER bytes: the module trusts exactly that certificate, as its host does (there is no CA file on a node) |
//! | `MESH_NKEY_FILE` | path of the module's NKey user seed file (`SU…`, mode 0600, made by its host); the seed never travels in the environment |
//! | `MESH_INBOX_PREFIX` | the module's private inbox prefix, `_INBOX.module_<node>_<module>`: replies (a JetStream publish's acknowledgement among them) are granted there and nowhere else |
//! | `MESH_NODE` | the node's name |
//! | `MESH_MODULE` | the module's name |
//!
//! [`Module::connect`] reads them ([`ModuleEnv::from_env`]); a missing or
//! invalid one is an error naming the variable and what to set.
//!
//! # Events
//!
//! [`Module::emit`] publishes an [`EventEnvelope`] as JSON on
//! `mesh.mod.<module>.event.<event>` through JetStream and returns once the
//! `EVENTS` stream has stored it. The bus lets a module publish only the
//! events its manifest declares under `[events] emits`; any other is refused
//! by the server, and `emit` says so, naming the event.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::context::PublishErrorKind;
use async_nats::{Client, Event, ServerError};
use mesh_bus::{BusConfig, CertPin, ClientCredential, ConnectError, Secret};
use mesh_core::authority::PrincipalKind;
use mesh_core::event::{EventEnvelope, EventError};
use mesh_core::names::{Name, NameError};
use mesh_core::subjects::{self, EventSelector};
use tokio::sync::broadcast;

pub use mesh_core::event;

/// Comma-separated `tls://host:port` broker addresses.
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

/// How long [`Module::emit`] waits for the stream's acknowledgement by
/// default. Short on purpose: a refused publish is answered by silence (the
/// server drops it), and a module should learn that while its operator is
/// still looking.
pub const DEFAULT_ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest seed file read; a user seed is 58 characters, so anything much
/// bigger is not one (and is not read into memory whole).
const MAX_SEED_FILE_BYTES: u64 = 4096;

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
}

/// What went wrong, worded for the operator who reads a module's last log
/// line.
#[derive(Debug, thiserror::Error)]
pub enum SdkError {
    #[error("{var} is not set; {hint}")]
    Missing {
        var: &'static str,
        hint: &'static str,
    },
    #[error("{var} is invalid: {reason}; {hint}")]
    Invalid {
        var: &'static str,
        reason: String,
        hint: &'static str,
    },
    #[error("could not read the NKey seed file {path} (MESH_NKEY_FILE)")]
    ReadSeed {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the NKey seed file {path} (MESH_NKEY_FILE) may be read by others (mode {mode:03o}); it must be mode 0600"
    )]
    SeedMode { path: PathBuf, mode: u32 },
    #[error("the file {path} (MESH_NKEY_FILE) does not hold an NKey user seed (SU…)")]
    BadSeed { path: PathBuf },
    #[error("could not connect to the bus as {principal} at {urls}")]
    Connect {
        principal: String,
        urls: String,
        #[source]
        source: ConnectError,
    },
    #[error("{event:?} is not a valid event name")]
    BadEventName {
        event: String,
        #[source]
        source: NameError,
    },
    #[error("event {event:?} cannot be sent")]
    Envelope {
        event: String,
        #[source]
        source: EventError,
    },
    #[error(
        "the bus refused event {event:?} of module {module} ({subject}): the module's manifest must declare it under [events] emits"
    )]
    Refused {
        event: String,
        module: Name,
        subject: String,
    },
    #[error(
        "event {event:?} of module {module} was not acknowledged within {timeout:?} ({subject}): the module's manifest must declare it under [events] emits (a refused publish goes unanswered), and the EVENTS stream must exist"
    )]
    NoAck {
        event: String,
        module: Name,
        subject: String,
        timeout: Duration,
    },
    #[error("event {event:?} of module {module} was not stored ({subject})")]
    Publish {
        event: String,
        module: Name,
        subject: String,
        #[source]
        source: async_nats::jetstream::context::PublishError,
    },
}

const HINT_URLS: &str = "set it to the broker's tls://host:port addresses, comma-separated (the host sets it when it starts a module)";
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
        if let Some(bad) = bus_urls
            .iter()
            .find(|u| !u.to_ascii_lowercase().starts_with("tls://") || u.contains('@'))
        {
            let shown = if bad.contains('@') {
                "an address carrying credentials".to_string()
            } else {
                format!("{bad:?} is not a tls:// address")
            };
            return Err(invalid(ENV_BUS_URLS, HINT_URLS, shown));
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
fn read_seed(path: &std::path::Path) -> Result<Secret, SdkError> {
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

/// A module connected to the bus as its own principal.
#[derive(Debug)]
pub struct Module {
    client: Client,
    js: async_nats::jetstream::Context,
    node: Name,
    module: Name,
    ack_timeout: Duration,
    /// The server's error messages on this connection: a refused publish is
    /// reported here (`Permissions Violation for Publish to "…"`), not on the
    /// publish itself.
    server_errors: broadcast::Sender<String>,
}

impl Module {
    /// Connects from the environment the host started the module with.
    pub async fn connect() -> Result<Module, SdkError> {
        Module::connect_with(&ModuleEnv::from_env()?).await
    }

    /// Connects as `env` describes: each address in turn, pinning the
    /// broker's certificate, with the module's seed and inbox prefix.
    pub async fn connect_with(env: &ModuleEnv) -> Result<Module, SdkError> {
        let seed = read_seed(&env.nkey_file)?;
        let principal = env.principal();
        let (server_errors, _) = broadcast::channel(64);
        let mut last = None;
        for url in &env.bus_urls {
            let cfg = BusConfig {
                url: url.clone(),
                principal: principal.clone(),
                credential: ClientCredential::NKey(seed.clone()),
                ca_file: None,
                inbox_prefix: Some(env.inbox_prefix.clone()),
                pin: Some(env.pin),
            };
            let tx = server_errors.clone();
            let connected = mesh_bus::connect_with(&cfg, move |opts| {
                opts.event_callback(move |event| {
                    let tx = tx.clone();
                    async move {
                        if let Event::ServerError(ServerError::Other(e)) = event {
                            // No receiver means no emit is waiting: nothing to tell.
                            let _ = tx.send(e);
                        }
                    }
                })
            })
            .await;
            match connected {
                Ok(client) => {
                    let js = async_nats::jetstream::context::ContextBuilder::new()
                        .timeout(env.ack_timeout)
                        .build(client.clone());
                    return Ok(Module {
                        client,
                        js,
                        node: env.node.clone(),
                        module: env.module.clone(),
                        ack_timeout: env.ack_timeout,
                        server_errors,
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(SdkError::Connect {
            principal,
            urls: env.bus_urls.join(","),
            source: last.expect("from_lookup refuses an empty address list"),
        })
    }

    /// Emits `event` with `payload`: a JetStream publish of an
    /// [`EventEnvelope`] on `mesh.mod.<module>.event.<event>`, returning once
    /// `EVENTS` has acknowledged storing it. An event the manifest does not
    /// declare is refused by the server; that is reported as
    /// [`SdkError::Refused`] as soon as the server says so, or as
    /// [`SdkError::NoAck`] after the acknowledgement timeout.
    pub async fn emit(&self, event: &str, payload: serde_json::Value) -> Result<(), SdkError> {
        let name = Name::new(event).map_err(|source| SdkError::BadEventName {
            event: event.to_string(),
            source,
        })?;
        let subject = subjects::module_event(&self.module, &EventSelector::Named(name));
        let envelope = EventEnvelope {
            id: hex::encode(rand::random::<[u8; 16]>()),
            module: self.module.clone(),
            node: self.node.clone(),
            at: now_ms(),
            payload,
        };
        let bytes = envelope.to_json().map_err(|source| SdkError::Envelope {
            event: event.to_string(),
            source,
        })?;

        // Listening before publishing, so the refusal cannot slip past.
        let mut errors = self.server_errors.subscribe();
        let wanted = format!("permissions violation for publish to \"{subject}\"");
        let refused = async {
            loop {
                match errors.recv().await {
                    Ok(e) if e.to_lowercase().contains(&wanted) => return,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    // The sender lives in self; never reached while we borrow it.
                    Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
                }
            }
        };
        let stored = async {
            let ack = self.js.publish(subject.clone(), bytes.into()).await?;
            ack.await
        };
        tokio::select! {
            () = refused => Err(SdkError::Refused {
                event: event.to_string(),
                module: self.module.clone(),
                subject: subject.clone(),
            }),
            r = tokio::time::timeout(self.ack_timeout, stored) => match r {
                Ok(Ok(_ack)) => Ok(()),
                Ok(Err(e)) if e.kind() != PublishErrorKind::TimedOut => Err(SdkError::Publish {
                    event: event.to_string(),
                    module: self.module.clone(),
                    subject: subject.clone(),
                    source: e,
                }),
                Ok(Err(_)) | Err(_) => Err(SdkError::NoAck {
                    event: event.to_string(),
                    module: self.module.clone(),
                    subject: subject.clone(),
                    timeout: self.ack_timeout,
                }),
            },
        }
    }

    pub fn node(&self) -> &Name {
        &self.node
    }

    pub fn module(&self) -> &Name {
        &self.module
    }

    /// The underlying connection, for what the SDK does not cover yet.
    pub fn client(&self) -> &Client {
        &self.client
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        // A clock before 1970 is wrong, but not a reason to lose the event.
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;

//! A module's connection as its own principal, and its events.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mesh_bus::seam::{Bus, SeamError};
use mesh_bus::{BusConfig, ClientCredential};
use mesh_core::event::EventEnvelope;
use mesh_core::names::Name;
use mesh_core::subjects::{self, EventSelector};

use crate::env::read_seed;
use crate::refusal::{Denied, ServerErrors};
use crate::{ModuleEnv, SdkError};

/// A module connected to the bus as its own principal.
pub struct Module {
    /// Shared with the tasks answering its tools.
    bus: Arc<Bus>,
    node: Name,
    module: Name,
    ack_timeout: Duration,
    ready_file: Option<std::path::PathBuf>,
    /// On NATS, the server's error messages on this connection: a refused
    /// publish is reported there (`Permissions Violation for Publish to
    /// "…"`), not on the publish itself. AMQP refuses the operation itself.
    server_errors: Option<ServerErrors>,
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("bus", &self.bus.kind())
            .field("node", &self.node)
            .field("module", &self.module)
            .finish()
    }
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
            let (errors, tune) = ServerErrors::listening();
            match Bus::connect_with(&cfg, tune).await {
                Ok(bus) => {
                    return Ok(Module {
                        server_errors: matches!(bus, Bus::Nats(_)).then_some(errors),
                        bus: Arc::new(bus),
                        node: env.node.clone(),
                        module: env.module.clone(),
                        ack_timeout: env.ack_timeout,
                        ready_file: env.ready_file.clone(),
                    });
                }
                Err(e) => last = Some(Box::new(e)),
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
        let name = event_name(event)?;
        let subject = subjects::module_event(&self.module, &EventSelector::Named(name));
        self.publish_event(event, subject, payload).await
    }

    /// Emits `event` of a mesh-scoped seat this module holds:
    /// `mesh.seat.<seat>.event.<event>`.
    pub async fn emit_seat(
        &self,
        seat: &str,
        event: &str,
        payload: serde_json::Value,
    ) -> Result<(), SdkError> {
        let seat = crate::name("seat", seat)?;
        let name = event_name(event)?;
        let subject = subjects::seat_event(&seat, &EventSelector::Named(name));
        self.publish_event(event, subject, payload).await
    }

    /// Emits `event` of a node-scoped seat this module holds, as this
    /// node's holder: `mesh.seat.<seat>.node.<node>.event.<event>`. The
    /// server admits it on this node's subject only, so who reads it knows
    /// which node spoke without trusting the envelope.
    pub async fn emit_node_seat(
        &self,
        seat: &str,
        event: &str,
        payload: serde_json::Value,
    ) -> Result<(), SdkError> {
        let seat = crate::name("seat", seat)?;
        let name = event_name(event)?;
        let subject = subjects::seat_node_event(&seat, &self.node, &EventSelector::Named(name));
        self.publish_event(event, subject, payload).await
    }

    async fn publish_event(
        &self,
        event: &str,
        subject: String,
        payload: serde_json::Value,
    ) -> Result<(), SdkError> {
        let bytes = self
            .envelope(payload)
            .to_json()
            .map_err(|source| SdkError::Envelope {
                event: event.to_string(),
                source,
            })?;
        // Listening before publishing, so the refusal cannot slip past.
        let refused = self.refusal(Denied::Publish, &subject);
        let refused_now = || SdkError::Refused {
            event: event.to_string(),
            module: self.module.clone(),
            subject: subject.clone(),
        };
        let no_ack = || SdkError::NoAck {
            event: event.to_string(),
            module: self.module.clone(),
            subject: subject.clone(),
            timeout: self.ack_timeout,
        };
        let stored = self.bus.publish_stored(&subject, &bytes);
        tokio::select! {
            () = refused => Err(refused_now()),
            r = tokio::time::timeout(self.ack_timeout, stored) => match r {
                Ok(Ok(())) => Ok(()),
                // AMQP keeps an event for its consumers' queues only: one
                // that nobody consumes has nowhere to wait, which is no
                // failure of the module's (NATS keeps it in EVENTS).
                Ok(Err(SeamError::Unroutable { .. })) => Ok(()),
                Ok(Err(e)) if e.is_access_refused() => Err(refused_now()),
                Ok(Err(e)) if crate::error::timed_out(&e) => Err(no_ack()),
                Ok(Err(source)) => Err(SdkError::Publish {
                    event: event.to_string(),
                    module: self.module.clone(),
                    subject: subject.clone(),
                    source,
                }),
                Err(_) => Err(no_ack()),
            },
        }
    }

    /// A fresh envelope from this module on this node: events and work
    /// travel in the same one.
    pub(crate) fn envelope(&self, payload: serde_json::Value) -> EventEnvelope {
        EventEnvelope {
            id: hex::encode(rand::random::<[u8; 16]>()),
            module: self.module.clone(),
            node: self.node.clone(),
            at: now_ms(),
            payload,
        }
    }

    /// Resolves once the server refuses this connection `what` on
    /// `subject`: heard on NATS's connection; never on AMQP, whose refusal
    /// is the operation's own error.
    pub(crate) fn refusal(
        &self,
        what: Denied,
        subject: &str,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let heard = self
            .server_errors
            .as_ref()
            .map(|e| e.refusal(what, subject));
        async move {
            match heard {
                Some(refused) => refused.await,
                None => std::future::pending().await,
            }
        }
    }

    /// This module's connection to the bus, for what the SDK does not
    /// cover (the build machine's artifact store on NATS). Every operation
    /// on it is still held to this module's grants by the bus.
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    pub(crate) fn shared_bus(&self) -> Arc<Bus> {
        self.bus.clone()
    }

    pub(crate) fn ack_timeout(&self) -> Duration {
        self.ack_timeout
    }

    /// This module's principal name on the bus, `module_<node>_<module>`.
    pub fn principal(&self) -> String {
        mesh_core::authority::PrincipalKind::Module {
            node: self.node.clone(),
            module: self.module.clone(),
        }
        .principal_name()
    }

    /// Says the module is ready: its host's `sdk = true` check (`[health]`)
    /// passes from now until the process ends. Call it once the module
    /// serves what it is for (its tools bound, its consumers listening).
    /// Nothing to do when the host set no `MESH_READY_FILE`.
    pub fn ready(&self) -> Result<(), SdkError> {
        let Some(path) = &self.ready_file else {
            return Ok(());
        };
        std::fs::write(path, format!("{}\n", std::process::id())).map_err(|source| {
            SdkError::Ready {
                path: path.clone(),
                source,
            }
        })
    }

    pub fn node(&self) -> &Name {
        &self.node
    }

    pub fn module(&self) -> &Name {
        &self.module
    }
}

fn event_name(event: &str) -> Result<Name, SdkError> {
    Name::new(event).map_err(|source| SdkError::BadEventName {
        event: event.to_string(),
        source,
    })
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        // A clock before 1970 is wrong, but not a reason to lose the event.
        .unwrap_or(0)
}

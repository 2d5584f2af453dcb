//! One way for every principal to reach the mesh's bus, whichever it is:
//! the addresses say which ([`mesh_core::bus`]), the principal's NKey seed
//! is its credential on both (signing NATS's nonce, or making its RabbitMQ
//! password: [`amqp::password_of`]).

use mesh_core::authority::amqp;
use mesh_core::bus::BusKind;

use super::{AmqpSide, Bus, NatsSide};
use crate::amqp::{AmqpConfig, AmqpConnectError, Trust};
use crate::{BusConfig, ClientCredential, ConnectError, Secret};

#[derive(Debug, thiserror::Error)]
pub enum SeamConnectError {
    #[error(
        "{url:?} is no bus address: write tls://HOST:PORT (NATS) or amqps://HOST:PORT (RabbitMQ)"
    )]
    NotAnAddress { url: String },
    #[error(
        "the addresses {urls:?} name both buses: a mesh runs on one; give only the {kind} ones"
    )]
    BothBuses { urls: String, kind: BusKind },
    #[error("an AMQP connection trusts a CA or a pinned certificate, and {principal} has neither")]
    NoTrust { principal: String },
    #[error(transparent)]
    Nats(#[from] ConnectError),
    #[error(transparent)]
    Amqp(#[from] AmqpConnectError),
}

/// Which bus `cfg.url` (comma-separated addresses) names; all of one kind.
pub fn kind_of(cfg: &BusConfig) -> Result<BusKind, SeamConnectError> {
    let mut kinds = cfg.url.split(',').map(|u| {
        BusKind::of_address(u.trim()).ok_or_else(|| SeamConnectError::NotAnAddress {
            url: crate::connect::shown(u.trim()),
        })
    });
    let first = kinds
        .next()
        .unwrap_or_else(|| Err(SeamConnectError::NotAnAddress { url: String::new() }))?;
    for k in kinds {
        if k? != first {
            return Err(SeamConnectError::BothBuses {
                urls: cfg.url.clone(),
                kind: first,
            });
        }
    }
    Ok(first)
}

/// The AMQP configuration `cfg` names: its first address (a RabbitMQ
/// cluster's nodes share the queues; the rest are for a reconnect), the
/// password made from the seed.
pub fn amqp_config(cfg: &BusConfig) -> Result<AmqpConfig, SeamConnectError> {
    let first = cfg.url.split(',').next().unwrap_or_default().trim();
    let not_one = || SeamConnectError::NotAnAddress {
        url: crate::connect::shown(first),
    };
    let rest = first.strip_prefix("amqps://").ok_or_else(not_one)?;
    let (host, port) = rest.rsplit_once(':').ok_or_else(not_one)?;
    let port: u16 = port.trim_end_matches('/').parse().map_err(|_| not_one())?;
    let trust = match (&cfg.pin, &cfg.ca_file) {
        (Some(pin), _) => Trust::Pin(*pin),
        (None, Some(ca)) => Trust::Ca(ca.clone()),
        (None, None) => {
            return Err(SeamConnectError::NoTrust {
                principal: cfg.principal.clone(),
            });
        }
    };
    let (user, password) = match &cfg.credential {
        ClientCredential::NKey(seed) => (
            cfg.principal.clone(),
            Secret::new(amqp::password_of(seed.expose())),
        ),
        ClientCredential::Password { user, password } => (user.clone(), password.clone()),
    };
    Ok(AmqpConfig {
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port,
        user,
        password,
        trust,
    })
}

impl Bus {
    /// Connects as `cfg`'s principal to the bus its addresses name.
    pub async fn connect(cfg: &BusConfig) -> Result<Bus, SeamConnectError> {
        Bus::connect_with(cfg, |opts| opts).await
    }

    /// [`Bus::connect`], letting a NATS client add behaviour on top of what
    /// is decided here ([`crate::connect_with`]): an event callback hearing
    /// the server refuse (NATS says it on the connection, not on the
    /// operation; AMQP on the operation, so it needs none), a reconnect
    /// policy.
    pub async fn connect_with(
        cfg: &BusConfig,
        nats: impl FnOnce(async_nats::ConnectOptions) -> async_nats::ConnectOptions,
    ) -> Result<Bus, SeamConnectError> {
        match kind_of(cfg)? {
            BusKind::Nats => Ok(Bus::Nats(NatsSide::new(
                crate::connect_with(cfg, nats).await?,
            ))),
            BusKind::Amqp => {
                let conn = crate::amqp::connect(&amqp_config(cfg)?).await?;
                let side = AmqpSide::new(conn, &cfg.principal);
                Ok(Bus::Amqp(match &cfg.inbox_prefix {
                    Some(p) => side.with_inbox_prefix(p),
                    None => side,
                }))
            }
        }
    }
}

/// What a principal announces on an AMQP mesh beside its public key: the
/// salted hash of the password its seed makes.
pub fn announce(seed: &Secret) -> String {
    amqp::announced_hash(seed.expose())
}

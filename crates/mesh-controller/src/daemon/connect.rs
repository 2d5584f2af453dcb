//! How the controller reaches the broker and checks the store is its own:
//! its bus configuration from the genesis, the key check, and a connect
//! that retries until the broker answers.

use std::time::Duration;

use mesh_bus::seam::Bus;
use mesh_bus::{BusConfig, CertPin, ClientCredential, Secret};
use mesh_core::authority::CONTROLLER;
use mesh_core::bus::BusKind;
use mesh_core::subjects;
use mesh_store::{Store, principal};
use tracing::warn;

use super::{DaemonError, error_chain};
use crate::genesis::{self, Genesis, GenesisError};

/// The controller's bus configuration: its own key, its own inbox, the
/// broker certificate pinned (it is in the state directory; nothing else is
/// trusted, not even the mesh CA's other certificates).
pub(super) fn bus_config(genesis: &Genesis) -> Result<BusConfig, DaemonError> {
    let seed_path = genesis.path(genesis::NKEY_SEED);
    let seed = std::fs::read_to_string(&seed_path).map_err(|source| GenesisError::Io {
        action: "read",
        path: seed_path,
        source,
    })?;
    Ok(BusConfig {
        // Every server of a cluster: the controller fails over among them.
        url: genesis.local_urls().join(","),
        principal: CONTROLLER.into(),
        credential: ClientCredential::NKey(Secret::new(seed.trim())),
        ca_file: None,
        inbox_prefix: Some(subjects::inbox_prefix(CONTROLLER)),
        pin: Some(CertPin::from_hex(&genesis.cert_sha256)?),
    })
}

/// A seed file of the genesis, trimmed.
pub(super) fn read_seed(genesis: &Genesis, rel: &str) -> Result<Secret, DaemonError> {
    let path = genesis.path(rel);
    let text = std::fs::read_to_string(&path).map_err(|source| GenesisError::Io {
        action: "read",
        path,
        source,
    })?;
    Ok(Secret::new(text.trim()))
}

/// Refuses a store another genesis made: its records would be composed into
/// a users file whose controller key this process cannot use.
pub(super) async fn check_controller_key(
    store: &Store,
    genesis: &Genesis,
) -> Result<(), DaemonError> {
    store
        .adopt_controller_key_if_absent(&genesis.controller_nkey)
        .await?;
    let recorded = store
        .credential(principal::CONTROLLER)
        .await?
        .map(|c| c.credential);
    match recorded {
        Some(mesh_core::users_file::UserCredential::NKey(k)) if k == genesis.controller_nkey => {
            // What RabbitMQ admits it by (the hash genesis gave the broker).
            // On RabbitMQ only: two controllers of `mesh up --ha` starting
            // at once would both write it, and PostgreSQL ends one of them
            // as a deadlock.
            if genesis.bus == BusKind::Amqp {
                let seed = read_seed(genesis, genesis::NKEY_SEED)?;
                store
                    .record_amqp_hashes(&std::collections::BTreeMap::from([(
                        k,
                        mesh_core::authority::amqp::announced_hash(seed.expose()),
                    )]))
                    .await?;
            }
            Ok(())
        }
        other => Err(DaemonError::ForeignStore {
            recorded: match other {
                Some(mesh_core::users_file::UserCredential::NKey(k)) => k,
                _ => "none usable".into(),
            },
            genesis: genesis.controller_nkey.clone(),
            dir: genesis.dir.clone(),
        }),
    }
}

/// How long a stop waits for the bus connection to drain and close.
pub(super) const CLOSE_WITHIN: Duration = Duration::from_secs(2);

/// Connects, retrying with backoff: the broker may start after the
/// controller (or be restarting). Each refusal is logged with its reason.
/// `closed` hears a NATS connection's end.
pub(super) async fn connect(bus: &BusConfig, closed: &mesh_bus::Closed) -> Bus {
    let mut waits = retry_waits();
    loop {
        let connected = match mesh_bus::seam::kind_of(bus) {
            Ok(BusKind::Nats) => {
                let closed = closed.clone();
                mesh_bus::connect_with(bus, |o| {
                    o.event_callback(move |event| {
                        closed.note(&event);
                        async {}
                    })
                })
                .await
                .map(|c| Bus::Nats(mesh_bus::seam::NatsSide::new(c)))
                .map_err(|e| error_chain(&e))
            }
            _ => Bus::connect(bus).await.map_err(|e| error_chain(&e)),
        };
        match connected {
            Ok(c) => return c,
            Err(e) => {
                let wait = waits.next().unwrap_or(Duration::from_secs(5));
                warn!(error = %e, retry_in = ?wait, "cannot reach the broker yet");
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// Waits between retries: doubling from 100 ms to 5 s, jittered so that
/// what restarts together does not retry in step.
pub(crate) fn retry_waits() -> impl Iterator<Item = Duration> {
    use backon::BackoffBuilder as _;
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(5))
        .with_jitter()
        .without_max_times()
        .build()
}

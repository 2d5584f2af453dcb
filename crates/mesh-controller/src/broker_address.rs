//! `broker set-address`, one path for the CLI on the controller's machine
//! and the controller serving an admin: the addresses recorded first (a
//! store that refuses leaves the genesis as it was), then the broker's
//! configuration written anew where the genesis keeps it.

use std::path::PathBuf;

use mesh_store::{Store, StoreError};

use crate::genesis::{BROKER_CONF, Genesis, GenesisError};

/// Why the broker was not moved.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    #[error(transparent)]
    Genesis(#[from] GenesisError),
    #[error("recording the broker's addresses")]
    Store(#[from] StoreError),
}

/// What was recorded, and where the broker's configuration is now.
#[derive(Debug)]
pub struct Moved {
    pub urls: Vec<String>,
    /// The configuration to start the broker again on, or why it was not
    /// written (the addresses are recorded either way).
    pub conf: Result<PathBuf, GenesisError>,
}

/// Records the broker's new port (and addresses, if given) for every node
/// to follow, then writes its configuration.
pub async fn set_broker_address(
    genesis: &Genesis,
    store: &Store,
    port: u16,
    addresses: Option<&[String]>,
) -> Result<Moved, MoveError> {
    // Refused before anything is written: the store would hold addresses
    // no server of the cluster listens at.
    if genesis.replicas > 1 || genesis.bus == crate::genesis::BusKind::Amqp {
        genesis.move_broker(port, addresses)?;
    }
    let urls = Genesis {
        port,
        addresses: addresses.map_or_else(|| genesis.addresses.clone(), <[String]>::to_vec),
        ..genesis.clone()
    }
    .bus_urls();
    store.set_bus_urls(&urls).await?;
    let conf = genesis
        .move_broker(port, addresses)
        .map(|m| m.path(BROKER_CONF));
    Ok(Moved { urls, conf })
}

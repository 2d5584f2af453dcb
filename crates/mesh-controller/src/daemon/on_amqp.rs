//! What the controller does only on a mesh whose bus is RabbitMQ: its
//! users made through the management API (as the controller's own
//! administrator), each composition's records with the hashes announced,
//! and the mesh's exchange and queues declared on a channel of its own.

use std::sync::Arc;

use mesh_bus::amqp::Management;
use mesh_bus::seam::AmqpSide;
use mesh_core::authority::{CONTROLLER, amqp};
use mesh_core::jetstream::Objects;
use mesh_core::records::ControllerSpec;
use mesh_store::Store;

use super::{DaemonError, read_seed};
use crate::composer::SourceError;
use crate::composer::amqp::{AmqpSnapshot, AmqpSource, Declare};
use crate::genesis::{self, Genesis};

/// The management API as the controller: over TLS to the genesis's
/// certificate, with the password its seed makes.
pub(super) fn amqp_management(genesis: &Genesis) -> Result<Management, DaemonError> {
    let url = genesis
        .management_url()
        .ok_or_else(|| DaemonError::NoManagement(genesis.path(genesis::BUS_FILE)))?;
    let seed = read_seed(genesis, genesis::NKEY_SEED)?;
    let password = mesh_bus::Secret::new(amqp::password_of(seed.expose()));
    Ok(Management::new(
        &url,
        CONTROLLER,
        &password,
        &genesis.path(genesis::CA_CERT),
    )?)
}

/// Each composition's records: derived afresh, with every hash recorded,
/// confirmed this controller's to write last.
pub(super) fn amqp_source(store: Store, spec: ControllerSpec) -> AmqpSource {
    Arc::new(move || {
        let (store, spec) = (store.clone(), spec.clone());
        Box::pin(async move {
            let hashes = store
                .amqp_hashes()
                .await
                .map_err(|e| Box::new(e) as SourceError)?;
            let d = derived_fenced(&store, &spec).await?;
            Ok(AmqpSnapshot {
                principals: d.principals,
                credentials: d.snapshot.credentials,
                hashes,
                objects: d.objects,
            })
        })
    })
}

/// The records derived, then this controller's right to write confirmed:
/// last before anything is written, so a controller deposed meanwhile
/// writes no users over its successor's.
pub(super) async fn derived_fenced(
    store: &Store,
    spec: &ControllerSpec,
) -> Result<mesh_state::Derived, SourceError> {
    let d = mesh_state::derive(store, spec)
        .await
        .map_err(|e| Box::new(e) as SourceError)?;
    store
        .confirm_fence()
        .await
        .map_err(|e| Box::new(e) as SourceError)?;
    Ok(d)
}

/// Declares the mesh's queues on a fresh channel of `conn` each time (a
/// refused declaration closes its channel).
pub(super) fn amqp_declare(conn: Arc<lapin::Connection>) -> Declare {
    Arc::new(move |objects: Objects| {
        let conn = conn.clone();
        Box::pin(async move {
            declare_on(&conn, &objects)
                .await
                .map_err(|e| Box::new(e) as SourceError)
        })
    })
}

pub(super) async fn declare_topology(a: &AmqpSide, objects: &Objects) -> Result<(), DaemonError> {
    declare_on(a.connection(), objects)
        .await
        .map_err(|e| DaemonError::Topology(Box::new(e)))
}

async fn declare_on(
    conn: &lapin::Connection,
    objects: &Objects,
) -> Result<(), mesh_bus::amqp::topology::TopologyError> {
    let channel = conn
        .create_channel()
        .await
        .map_err(mesh_bus::amqp::topology::TopologyError::Exchange)?;
    let declared = mesh_bus::amqp::topology::declare(&channel, &amqp::topology(objects)).await;
    let _ = channel.close(200, "declared".into()).await;
    declared
}

//! The CLI on the bus as the controller, whose key the administrator holds
//! (`mesh logs`, `mesh events`, `mesh artifact`): one place that reads the
//! key from the genesis and pins the broker's certificate.

use anyhow::Context as _;
use async_nats::Client;
use mesh_bus::{BusConfig, CertPin, ClientCredential, Refusals, Secret};
use mesh_controller::{Genesis, genesis};
use mesh_core::authority::CONTROLLER;
use mesh_core::subjects;

/// The bus addresses this machine's commands dial: the move's, once the
/// mesh moved onto another bus (`mesh rollout`), else the genesis's (every
/// server of a cluster: any one answering will do).
pub async fn local_urls(genesis: &Genesis, store_url: &str) -> anyhow::Result<Vec<String>> {
    let store = crate::authority::open_existing_store(store_url).await?;
    let moved = store.moved_bus_urls().await;
    store.close().await;
    Ok(moved
        .context("reading whether the mesh moved its bus")?
        .unwrap_or_else(|| genesis.local_urls()))
}

/// How the controller reaches its broker from this machine.
pub async fn controller_bus(genesis: &Genesis, store_url: &str) -> anyhow::Result<BusConfig> {
    let seed_file = genesis.path(genesis::NKEY_SEED);
    let seed = std::fs::read_to_string(&seed_file)
        .with_context(|| format!("reading the controller's key {}", seed_file.display()))?;
    Ok(BusConfig {
        url: local_urls(genesis, store_url).await?.join(","),
        principal: CONTROLLER.into(),
        credential: ClientCredential::NKey(Secret::new(seed.trim())),
        ca_file: None,
        inbox_prefix: Some(subjects::inbox_prefix(CONTROLLER)),
        pin: Some(CertPin::from_hex(&genesis.cert_sha256)?),
    })
}

/// Connected as the controller.
pub async fn controller_client(genesis: &Genesis, store_url: &str) -> anyhow::Result<Client> {
    mesh_bus::connect(&controller_bus(genesis, store_url).await?)
        .await
        .context("connecting to the broker as the controller (is the mesh running?)")
}

/// Connected as the controller, hearing what the server refuses it.
pub async fn controller_client_hearing(
    genesis: &Genesis,
    store_url: &str,
) -> anyhow::Result<(Client, Refusals)> {
    let refusals = Refusals::new();
    let heard = refusals.clone();
    let client = mesh_bus::connect_with(&controller_bus(genesis, store_url).await?, move |opts| {
        opts.event_callback(move |event| {
            let heard = heard.clone();
            async move { heard.note(&event) }
        })
    })
    .await
    .context("connecting to the broker as the controller (is the mesh running?)")?;
    Ok((client, refusals))
}

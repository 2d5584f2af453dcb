//! The idle host: one real `mesh host` process, given a token by `mesh node
//! add`, enrolled through the controller, bound, and left idle; its
//! resident set is the figure.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_nats::jetstream;
use mesh_controller::Genesis;
use mesh_core::names::Name;

use crate::facts::{self, Rss};
use crate::mesh::{self, MeshProcess};
use crate::ms;

/// Waits until the broker admits `token`'s enrolment key: a connection
/// with it (connecting spends nothing; a request on CONTROL would).
async fn token_composed(genesis: &Genesis, token: &str, within: Duration) -> anyhow::Result<()> {
    let token = mesh_core::token::Token::decode(token)?;
    let node = &token.node;
    let bus = mesh_bus::BusConfig {
        url: genesis.local_url(),
        principal: mesh_core::authority::PrincipalKind::Enrolment { node: node.clone() }
            .principal_name(),
        credential: mesh_bus::ClientCredential::NKey(token.enrolment_seed.clone()),
        ca_file: None,
        inbox_prefix: Some(mesh_core::subjects::enrol_inbox_prefix(node)),
        pin: Some(mesh_bus::CertPin::from_hex(&genesis.cert_sha256)?),
    };
    let client = mesh::connect_retrying(&bus, within)
        .await
        .context("the broker did not admit the token's enrolment key")?;
    let _ = client.drain().await;
    Ok(())
}

/// One real `mesh host`: a token from `mesh node add`, enrolled through
/// the controller, bound, then left idle for 5 s; its resident set.
pub async fn idle_host(
    work: &std::path::Path,
    genesis: &Genesis,
    dir: &str,
    store: &str,
    js: &jetstream::Context,
) -> anyhow::Result<(Rss, f64, MeshProcess)> {
    let exe = crate::mesh_binary()?;
    let out = tokio::process::Command::new(exe)
        .args(["node", "add", "bench-idle", "--dir", dir, "--store", store])
        .env_remove("MESH_STORE")
        .output()
        .await?;
    anyhow::ensure!(
        out.status.success(),
        "mesh node add: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8(out.stdout)?;
    // What is measured is a host at rest, not enrolment: at 10,000 nodes a
    // token's key is live a composition and a reload (seconds) after `mesh
    // node add`, longer than a host's 2 s refusal window.
    token_composed(genesis, &token, Duration::from_secs(120)).await?;
    let state = work.join("idle-host");
    let state_arg = state.display().to_string();
    let started = Instant::now();
    let p = MeshProcess::spawn(
        &["host", "--token", "-", "--state", &state_arg],
        work.join("idle-host.log"),
        Some(token),
    )?;
    let node = Name::new("bench-idle").expect("a valid name");
    let (at, unbound) = mesh::until_bound(js, &[node], started, Duration::from_secs(120)).await;
    anyhow::ensure!(
        unbound.is_empty(),
        "it did not bind within 120 s; its log:\n{}",
        mesh::tail(&p.log_text(), 20)
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    Ok((facts::rss(p.pid()), ms(at), p))
}

//! Declarations: after every change of the records (and at start), each
//! node's modules are composed in `mesh-core`; a node whose composition
//! differs from its newest recorded declaration gets the next one — signed,
//! recorded, then published to NODES (max one message per subject, so a
//! host binding later reads only the newest).

use std::collections::BTreeMap;

use base64::Engine as _;
use ed25519_dalek::SigningKey;
use mesh_core::declaration::{self, Declaration, Envelope, Inputs};
use mesh_core::names::Name;
use mesh_core::subjects;
use tracing::{info, warn};

use super::{Counters, Ctx, error_chain};

/// Reads the signing key genesis made (hex of its 32-byte seed).
pub(crate) fn signing_key(genesis: &crate::Genesis) -> Result<SigningKey, crate::GenesisError> {
    let path = genesis.path(crate::genesis::SIGNING_SEED);
    let text = std::fs::read_to_string(&path).map_err(|source| crate::GenesisError::Io {
        action: "read",
        path: path.clone(),
        source,
    })?;
    let seed: [u8; 32] = hex::decode(text.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(crate::GenesisError::BadKeyFile {
            path,
            what: "an Ed25519 seed (64 hex characters)",
        })?;
    Ok(SigningKey::from_bytes(&seed))
}

/// The declaration a recorded envelope carries (the controller trusts its
/// own records; the host is the one that verifies).
fn recorded(body: &str) -> Option<Declaration> {
    let env: Envelope = serde_json::from_str(body).ok()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(env.declaration)
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Composes every node's declaration and publishes those that changed.
/// With `converge` (at start), a node whose newest recorded declaration is
/// missing from NODES (a wiped JetStream directory, a restored backup) gets
/// it published again. Returns how many were published.
pub(crate) async fn declare_all(ctx: &Ctx, converge: bool) -> usize {
    let derived = match mesh_state::derive(&ctx.store, &ctx.opts.controller).await {
        Ok(d) => d,
        Err(e) => {
            warn!(error = %error_chain(&e), "the records do not derive; no declaration composed");
            return 0;
        }
    };
    let catalogue = match mesh_state::registered::catalogue(&ctx.store).await {
        Ok(c) => c,
        Err(e) => {
            warn!(error = %error_chain(&e), "no declaration composed");
            return 0;
        }
    };
    let versions: BTreeMap<Name, String> = match ctx.store.modules().await {
        Ok(ms) => ms
            .into_iter()
            .map(|m| (m.name, m.manifest_digest))
            .collect(),
        Err(e) => {
            warn!(error = %error_chain(&e), "no declaration composed");
            return 0;
        }
    };
    // No node records its address yet: a `${seat:..}` placeholder is then
    // refused by name rather than filled with a guess.
    let addresses = BTreeMap::new();
    let users_file = std::fs::read_to_string(&ctx.users_file).ok();
    let inputs = Inputs {
        catalogue: &catalogue,
        records: &derived.snapshot.records,
        versions: &versions,
        addresses: &addresses,
        users_file: users_file.as_deref(),
    };
    let mut published = 0;
    let mut nodes = derived.snapshot.records.nodes.clone();
    nodes.sort();
    for node in &nodes {
        match declare(ctx, &inputs, node, converge).await {
            Ok(true) => published += 1,
            Ok(false) => {}
            Err(e) => warn!(%node, error = %e, "no declaration for this node"),
        }
    }
    published
}

async fn declare(
    ctx: &Ctx,
    inputs: &Inputs<'_>,
    node: &Name,
    converge: bool,
) -> Result<bool, String> {
    let modules = declaration::compose_modules(inputs, node).map_err(|e| e.to_string())?;
    let record = ctx
        .store
        .latest_declaration(node)
        .await
        .map_err(|e| error_chain(&e))?;
    let last = record.as_ref().and_then(|d| recorded(&d.body));
    // A node never declared and given nothing yet needs no declaration.
    if last.is_none() && modules.is_empty() {
        return Ok(false);
    }
    let last_ref = last.as_ref().map(|d| (d.sequence, d.modules.as_slice()));
    let now = u64::try_from(mesh_store::now_ms()).unwrap_or(0);
    let Some(next) = declaration::next_declaration(node, modules, last_ref, now) else {
        return match record {
            Some(r) if converge => republish_if_missing(ctx, node, &r.body).await,
            _ => Ok(false),
        };
    };
    let envelope = next.sign(&ctx.signing_key);
    let body = String::from_utf8(envelope.clone()).map_err(|e| e.to_string())?;
    // Recorded before it is published: the record is what convergence
    // republishes from, and a sequence is never published twice with two
    // bodies.
    ctx.store
        .record_declaration(&mesh_store::Declaration {
            node: node.clone(),
            version: i64::try_from(next.sequence).unwrap_or(i64::MAX),
            digest: mesh_store::sha256_digest(&body),
            body,
        })
        .await
        .map_err(|e| error_chain(&e))?;
    let ack = ctx
        .js
        .publish(subjects::node_declaration(node), envelope.into())
        .await
        .map_err(|e| error_chain(&e))?;
    ack.await.map_err(|e| error_chain(&e))?;
    Counters::bump(&ctx.counters.declarations);
    ctx.lag.published(node, next.sequence);
    info!(%node, sequence = next.sequence, modules = next.modules.len(), "declaration published");
    Ok(true)
}

/// Publishes `body` (the newest recorded declaration) again unless NODES
/// holds exactly it: otherwise the node hears nothing while everything
/// about it looks correct.
async fn republish_if_missing(ctx: &Ctx, node: &Name, body: &str) -> Result<bool, String> {
    let subject = subjects::node_declaration(node);
    let stream = ctx
        .js
        .get_stream_no_info(subjects::STREAM_NODES)
        .await
        .map_err(|e| error_chain(&e))?;
    let held = stream.get_last_raw_message_by_subject(&subject).await;
    if held
        .as_ref()
        .is_ok_and(|m| m.payload.as_ref() == body.as_bytes())
    {
        return Ok(false);
    }
    let ack = ctx
        .js
        .publish(subject, body.as_bytes().to_vec().into())
        .await
        .map_err(|e| error_chain(&e))?;
    ack.await.map_err(|e| error_chain(&e))?;
    Counters::bump(&ctx.counters.declarations);
    info!(%node, "declaration published again: NODES did not hold the newest recorded one");
    Ok(true)
}

//! Declarations: after every change of the records (and at start), each
//! node's modules are composed in `mesh-core`; a node whose composition
//! differs from its newest recorded declaration gets the next one — signed,
//! recorded, then published to NODES (max one message per subject, so a
//! host binding later reads only the newest).

use std::collections::BTreeMap;

use ed25519_dalek::SigningKey;
use futures::StreamExt as _;
use mesh_core::declaration::{self, BusDecl, Inputs};
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

/// What a pass of the declarations did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Pass {
    /// Declarations published (new ones, and recorded ones published again).
    pub published: usize,
    /// Every node's declaration was composed, and each one that changed was
    /// recorded and stored in NODES: the node's newest recorded declaration
    /// is the one the records call for. False after anything logged as
    /// failed, so a waiting command never takes an older declaration for
    /// the answer to its change.
    pub complete: bool,
}

impl Pass {
    const FAILED: Pass = Pass {
        published: 0,
        complete: false,
    };
}

/// Composes every node's declaration and publishes those that changed.
/// With `converge` (at start), a node whose newest recorded declaration is
/// missing from NODES (a wiped JetStream directory, a restored backup) gets
/// it published again.
pub(crate) async fn declare_all(ctx: &Ctx, converge: bool) -> Pass {
    match mesh_state::derive(&ctx.store, &ctx.opts.controller).await {
        Ok(derived) => declare_from(ctx, &derived, converge).await,
        Err(e) => {
            warn!(error = %error_chain(&e), "the records do not derive; no declaration composed");
            Pass::FAILED
        }
    }
}

/// Records that the declarations are composed from `revision` (a pass that
/// began by reading it, and completed): what `--wait` waits for.
pub(crate) async fn declared_through(ctx: &Ctx, revision: i64, pass: Pass) {
    if !pass.complete {
        return;
    }
    if let Err(e) = ctx
        .store
        .record_declared_through(revision, mesh_store::now_ms())
        .await
    {
        warn!(revision, error = %error_chain(&e), "which records the declarations are composed from was not recorded");
    }
}

/// Whether a module holding `mesh-broker` is assigned: its declaration
/// carries the users file, so whatever recomposes the file declares again.
pub(crate) fn broker_held(derived: &mesh_state::Derived) -> bool {
    derived.snapshot.records.assignments.iter().any(|a| {
        derived
            .catalogue
            .module(&a.module)
            .is_some_and(|m| m.holds_seat(mesh_core::manifest::BROKER_ROLE))
    })
}

/// `declare_all` from records already derived (the watcher derived them for
/// the bus objects: at 10,000 nodes a derivation is a third of a second).
pub(crate) async fn declare_from(ctx: &Ctx, derived: &mesh_state::Derived, converge: bool) -> Pass {
    for (module, why) in &derived.left_out {
        warn!(%module, reason = %why, "module left out of every declaration");
    }
    let versions: BTreeMap<Name, String> = match ctx.store.modules().await {
        Ok(ms) => ms
            .into_iter()
            .map(|m| (m.name, m.manifest_digest))
            .collect(),
        Err(e) => {
            warn!(error = %error_chain(&e), "no declaration composed");
            return Pass::FAILED;
        }
    };
    let (sealing, reached) = match super::sealing::read(ctx).await {
        Ok(r) => r,
        Err(e) => {
            warn!(error = %error_chain(&e), "no declaration composed");
            return Pass::FAILED;
        }
    };
    // Composed here, from the records this pass declares from: a copy kept
    // on disk is one composition behind, and a broker holder handed it (or
    // an empty one) would refuse the newest principals, or everyone.
    // Only when a broker holder is assigned: at 10,000 nodes the file is
    // megabytes, and composing it is no pass's business otherwise.
    let broker_held = broker_held(derived);
    let super::keys::ModuleKeys {
        keys,
        given,
        held_back,
    } = match super::keys::module_keys(ctx, derived).await {
        Ok(k) => k,
        Err(e) => {
            warn!(error = %error_chain(&e), "no declaration composed");
            return Pass::FAILED;
        }
    };
    if !held_back.is_empty() {
        info!(
            modules = held_back.len(),
            "modules held back until their nodes announce more spare keys"
        );
        let waiting: Vec<Name> = held_back.iter().map(|(node, _)| node.clone()).collect();
        ctx.awaiting_spares
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(waiting.iter().cloned());
        // A report announcing spares heard between this pass's read of them
        // and now found no node awaiting them: asked again, it is not lost.
        match ctx.store.spare_keys_on(&waiting).await {
            Ok(now) if now.values().any(|keys| !keys.is_empty()) => {
                ctx.declare_again.notify_one();
            }
            Ok(_) => {}
            Err(e) => {
                warn!(error = %error_chain(&e), "cannot read spare keys again; the held-back modules wait for the next report")
            }
        }
    }
    let users_file = if broker_held {
        // With the keys given this pass: the file the holder is handed is
        // the one the broker is about to serve.
        let mut credentials = derived.snapshot.credentials.clone();
        for (node, module, key) in &given {
            let principal = mesh_core::authority::PrincipalKind::Module {
                node: node.clone(),
                module: module.clone(),
            };
            credentials.insert(
                principal.principal_name(),
                mesh_core::users_file::UserCredential::NKey(key.clone()),
            );
        }
        mesh_core::users_file::compose(&derived.principals, &credentials)
            .map(|f| f.text)
            .map_err(|e| e.to_string())
    } else {
        Err("no module holding mesh-broker is assigned".to_string())
    };
    let inputs = Inputs {
        catalogue: &derived.catalogue,
        records: &derived.snapshot.records,
        versions: &versions,
        addresses: &reached.addresses,
        seat_ports: &reached.seat_ports,
        secrets: &sealing,
        users_file: users_file.as_deref().map_err(String::as_str),
        left_out: &derived.left_out,
        keys: &keys,
    };
    let bus = match bus_addresses(ctx).await {
        Ok(b) => b,
        Err(e) => {
            warn!(error = %error_chain(&e), "no declaration composed");
            return Pass::FAILED;
        }
    };
    // Every node's newest declaration in one read, not one per node.
    let newest = match ctx.store.latest_declarations().await {
        Ok(n) => n,
        Err(e) => {
            warn!(error = %error_chain(&e), "no declaration composed");
            return Pass::FAILED;
        }
    };
    let mut nodes = derived.snapshot.records.nodes.clone();
    nodes.sort();
    let mut left_out = Vec::new();
    let mut failed = false;
    let (batches, mut to_publish) = tokio::sync::mpsc::channel::<Vec<Next>>(IN_FLIGHT);
    // Composing and signing go on while earlier batches are recorded and
    // published: the pass waited on each batch's round trip through the
    // broker (0.3-1.9 s a batch at 10,000 hosts, the controller at under
    // half a core), and during the composition's reload, before the first.
    let composing = async {
        let mut republished = 0;
        let mut next = Vec::new();
        let by_node = derived.snapshot.records.modules_by_node();
        for node in &nodes {
            let assigned = by_node.get(node).map(Vec::as_slice).unwrap_or_default();
            let composed = declaration::compose_assigned(&inputs, node, assigned);
            for e in &composed.left_out {
                left_out.push((node.clone(), e.module().clone(), e.to_string()));
            }
            // Declared once its host has enrolled: the spare keys come with the
            // enrolment (which declares again), and a module declared before
            // them would start under a key its host made itself, refused once.
            let host = mesh_core::authority::PrincipalKind::Host { node: node.clone() };
            if !derived
                .snapshot
                .credentials
                .contains_key(&host.principal_name())
            {
                continue;
            }
            let mut modules = composed.modules;
            modules.retain(|m| !held_back.contains(&(node.clone(), m.name.clone())));
            match declare(ctx, modules, &bus, node, newest.get(node), converge).await {
                Ok(Declared::Next(n)) => next.push(n),
                Ok(Declared::Republished) => republished += 1,
                Ok(Declared::Nothing) => {}
                Err(e) => {
                    failed = true;
                    warn!(%node, error = %e, "no declaration for this node");
                }
            }
            if next.len() >= DECLARE_BATCH {
                if batches.send(std::mem::take(&mut next)).await.is_err() {
                    break;
                }
                // Lets the batches in flight read their acks between ours.
                tokio::task::yield_now().await;
            }
        }
        if !next.is_empty() {
            let _ = batches.send(next).await;
        }
        drop(batches);
        republished
    };
    let publishing = async {
        // Waited for once, before the first new declaration is published:
        // a module declared before its grants are live is refused once.
        let Some(first) = to_publish.recv().await else {
            return (0, true);
        };
        super::keys::composition_live(ctx).await;
        let rest = futures::stream::unfold(to_publish, |mut rx| async move {
            rx.recv().await.map(|batch| (batch, rx))
        });
        futures::stream::once(async { first })
            .chain(rest)
            .map(|batch| record_and_publish(ctx, batch))
            .buffer_unordered(IN_FLIGHT)
            .fold((0, true), |(sum, all), (n, ok)| async move {
                (sum + n, all && ok)
            })
            .await
    };
    let (republished, (new, all_stored)) = tokio::join!(composing, publishing);
    let published = republished + new;
    drop(users_file);
    drop(newest);
    // After the declarations: a reader of both (`mesh assign --wait`) that
    // finds a module left out finds the declaration without it too.
    if let Err(e) = ctx.store.record_left_out(&left_out).await {
        warn!(error = %error_chain(&e), "what is left out of the declarations was not recorded");
    }
    drop(left_out);
    crate::memory::give_back();
    Pass {
        published,
        complete: !failed && all_stored,
    }
}

/// Where nodes reach the broker: as `mesh broker set-address` recorded it,
/// else as genesis made it. The controller's own connection follows too:
/// its pool becomes those addresses, then the ones it connected to.
async fn bus_addresses(ctx: &Ctx) -> Result<BusDecl, mesh_store::StoreError> {
    let urls = ctx
        .store
        .bus_urls()
        .await?
        .unwrap_or_else(|| ctx.genesis_bus_urls.clone());
    let mut followed = ctx.followed_bus.lock().await;
    if *followed != urls {
        let mut pool = urls.clone();
        for u in &ctx.connected_urls {
            if !pool.contains(u) {
                pool.push(u.clone());
            }
        }
        // A RabbitMQ broker is not moved yet (refused at `mesh broker
        // set-address`): nothing to follow there.
        if let Some(n) = ctx.bus.nats() {
            match n.client().set_server_pool(pool.as_slice()).await {
                Ok(()) => {
                    info!(urls = %urls.join(","), "the broker's addresses; following them");
                    *followed = urls.clone();
                }
                Err(e) => warn!(error = %e, "the broker's addresses were not taken"),
            }
        }
    }
    Ok(BusDecl { urls })
}

/// Declarations recorded in one transaction, then published at most this
/// many at once (published together, their acks awaited together).
const DECLARE_BATCH: usize = 256;

/// Batches recorded and published at once, and composed ahead of them.
const IN_FLIGHT: usize = 4;

enum Declared {
    Nothing,
    /// The newest recorded one published again (convergence).
    Republished,
    Next(Next),
}

/// A declaration signed and ready: recorded before it is published.
struct Next {
    node: Name,
    sequence: u64,
    modules: usize,
    envelope: Vec<u8>,
    record: mesh_store::Declaration,
}

/// Records `next` (one transaction; one by one if the store refuses the
/// batch) and publishes each recorded one; returns how many were published,
/// and whether every one was recorded and stored.
async fn record_and_publish(ctx: &Ctx, next: Vec<Next>) -> (usize, bool) {
    if next.is_empty() {
        return (0, true);
    }
    let count = next.len();
    let records: Vec<mesh_store::Declaration> = next.iter().map(|n| n.record.clone()).collect();
    let recorded: Vec<bool> = match ctx.store.record_declarations(&records).await {
        Ok(()) => vec![true; next.len()],
        Err(_) => {
            let mut each = Vec::with_capacity(next.len());
            for n in &next {
                match ctx.store.record_declaration(&n.record).await {
                    Ok(()) => each.push(true),
                    Err(e) => {
                        warn!(node = %n.node, error = %error_chain(&e), "no declaration for this node");
                        each.push(false);
                    }
                }
            }
            each
        }
    };
    {
        // Recorded above what a host was ahead at: in step again.
        let mut ahead = ctx
            .hosts_ahead
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !ahead.is_empty() {
            for (n, _) in next.iter().zip(&recorded).filter(|(_, ok)| **ok) {
                if ahead.get(&n.node).is_some_and(|&a| a < n.sequence) {
                    ahead.remove(&n.node);
                }
            }
        }
    }
    // Published together, their confirmations awaited together.
    let sent = next
        .into_iter()
        .zip(recorded)
        .filter(|(_, ok)| *ok)
        .map(|(n, _)| async move {
            let stored = ctx
                .bus
                .publish_stored(&subjects::node_declaration(&n.node), &n.envelope)
                .await;
            (n.node, n.sequence, n.modules, stored)
        });
    let mut published = 0;
    for (node, sequence, modules, stored) in futures::future::join_all(sent).await {
        match stored {
            Ok(()) => {
                published += 1;
                Counters::bump(&ctx.counters.declarations);
                ctx.lag.published(&node, sequence);
                info!(%node, sequence, modules, "declaration published");
            }
            Err(e) => {
                warn!(%node, error = %error_chain(&e), "declaration recorded, not stored in NODES")
            }
        }
    }
    (published, published == count)
}

async fn declare(
    ctx: &Ctx,
    modules: Vec<declaration::ModuleDecl>,
    bus: &BusDecl,
    node: &Name,
    record: Option<&mesh_store::Declaration>,
    converge: bool,
) -> Result<Declared, String> {
    let last = record.as_ref().and_then(|d| declaration::recorded(&d.body));
    let applied = ctx
        .hosts_ahead
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(node)
        .copied();
    // A node never declared and given nothing yet needs no declaration,
    // unless the bus moved away from where genesis put it (`mesh broker
    // set-address`, a rollout): its host learns the new addresses from a
    // declaration alone, and would be left on the old bus.
    if last.is_none() && modules.is_empty() && applied.is_none() && bus.urls == ctx.genesis_bus_urls
    {
        return Ok(Declared::Nothing);
    }
    let now = u64::try_from(mesh_store::now_ms()).unwrap_or(0);
    let Some(next) = declaration::next_declaration_after(
        node,
        modules,
        Some(bus.clone()),
        last.as_ref(),
        applied,
        now,
    ) else {
        return match record {
            Some(r) if converge && republish_if_missing(ctx, node, &r.body).await? => {
                Ok(Declared::Republished)
            }
            _ => Ok(Declared::Nothing),
        };
    };
    let mut next = next;
    // What the host opens sealed values with, beside its own seed.
    if next.modules.iter().any(|m| m.secrets.is_some()) {
        next.sealed_by = Some(ctx.xkey_public.clone());
    }
    let envelope = next.sign(&ctx.signing_key);
    let body = String::from_utf8(envelope.clone()).map_err(|e| e.to_string())?;
    // Recorded before it is published: the record is what convergence
    // republishes from, and a sequence is never published twice with two
    // bodies.
    Ok(Declared::Next(Next {
        node: node.clone(),
        sequence: next.sequence,
        modules: next.modules.len(),
        record: mesh_store::Declaration {
            node: node.clone(),
            version: i64::try_from(next.sequence).unwrap_or(i64::MAX),
            digest: mesh_store::sha256_digest(&body),
            body,
        },
        envelope,
    }))
}

/// Publishes `body` (the newest recorded declaration) again unless NODES
/// holds exactly it: otherwise the node hears nothing while everything
/// about it looks correct.
async fn republish_if_missing(ctx: &Ctx, node: &Name, body: &str) -> Result<bool, String> {
    let subject = subjects::node_declaration(node);
    // A queue is not read without taking from it: on RabbitMQ the
    // declaration queue's durability is what keeps the newest.
    let Some(js) = ctx.js() else {
        return Ok(false);
    };
    let stream = js
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
    ctx.bus
        .publish_stored(&subject, body.as_bytes())
        .await
        .map_err(|e| error_chain(&e))?;
    Counters::bump(&ctx.counters.declarations);
    info!(%node, "declaration published again: NODES did not hold the newest recorded one");
    Ok(true)
}

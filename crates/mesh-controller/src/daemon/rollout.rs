//! `mesh rollout check`, answered by the active controller: the facts read
//! from the records, one dial of the new bus as the controller (its own key,
//! the genesis certificate pinned: the server the mesh moves onto must be
//! the mesh's), the bus objects the records call for that it lacks, then
//! `mesh_core::rollout::check`. It changes nothing and may be asked as often
//! as an operator likes.

use std::time::Duration;

use mesh_core::jetstream::Objects;
use mesh_core::rollout::{Dial, Readiness};

use super::{Ctx, DaemonError, connect};
use crate::chain::error_chain;
use crate::genesis::Genesis;

/// How long the one dial waits for the new bus to answer.
const DIAL_WITHIN: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error("could not open the mesh's genesis")]
    Genesis(#[from] crate::genesis::GenesisError),
    #[error("the records do not derive")]
    Derive(#[from] mesh_state::DeriveError),
    #[error("could not read the records")]
    View(#[from] mesh_state::views::ViewError),
    #[error(transparent)]
    Daemon(#[from] Box<DaemonError>),
}

/// The check of this mesh now.
pub(crate) async fn check(ctx: &Ctx) -> Result<Readiness, RolloutError> {
    let genesis = Genesis::open(&ctx.opts.dir)?;
    let derived = mesh_state::derive(&ctx.store, &ctx.opts.controller).await?;
    let now = u64::try_from(mesh_store::now_ms()).unwrap_or(0);
    // The bus this term is on: a mesh that moved says so.
    let mut gathered =
        mesh_state::views::rollout::gather(&ctx.store, &derived, ctx.bus.kind(), now).await?;
    if let Ok(url) = &gathered.dial_at {
        gathered.facts.dial = dial(&genesis, url, &derived.objects).await?;
    }
    Ok(mesh_core::rollout::check(&gathered.facts))
}

/// Dials `url` once as the controller, and lists the objects it lacks.
async fn dial(genesis: &Genesis, url: &str, objects: &Objects) -> Result<Dial, RolloutError> {
    let mut cfg = connect::bus_config(genesis).map_err(Box::new)?;
    cfg.url = url.to_string();
    let client = match tokio::time::timeout(DIAL_WITHIN, mesh_bus::connect(&cfg)).await {
        Err(_) => {
            return Ok(Dial::Unreachable {
                url: url.into(),
                reason: format!("no answer within {} s", DIAL_WITHIN.as_secs()),
            });
        }
        Ok(Err(e)) => {
            return Ok(match mesh_bus::pin_mismatch(&e) {
                Some(p) => Dial::OtherCertificate {
                    url: url.into(),
                    expected: p.expected.clone(),
                    got: p.got.clone(),
                },
                None => Dial::Unreachable {
                    url: url.into(),
                    reason: error_chain(&e),
                },
            });
        }
        Ok(Ok(c)) => c,
    };
    let js = async_nats::jetstream::new(client);
    let mut missing_objects = Vec::new();
    for s in &objects.streams {
        if js.get_stream(&s.name).await.is_err() {
            missing_objects.push(format!("stream {}", s.name));
        }
    }
    for c in &objects.consumers {
        let found = match js.get_stream(&c.stream).await {
            Ok(stream) => stream
                .get_consumer::<async_nats::jetstream::consumer::push::Config>(&c.name)
                .await
                .is_ok(),
            Err(_) => false,
        };
        if !found {
            missing_objects.push(format!("consumer {}/{}", c.stream, c.name));
        }
    }
    Ok(Dial::Answered {
        url: url.into(),
        missing_objects,
    })
}

/// How often a mesh on RabbitMQ looks at the new bus it may move onto,
/// at most; a failed attempt waits longer each time, up to [`AHEAD_MAX`].
const AHEAD_EVERY: Duration = Duration::from_secs(2);
const AHEAD_MAX: Duration = Duration::from_secs(30);

/// On a mesh on RabbitMQ with a module holding `mesh-broker`: the NATS
/// objects the records call for, asserted on that server ahead of the
/// move (the check lists those it lacks), again whenever the records or
/// the server's address change. Nothing moves onto it here.
pub(crate) async fn keep_ahead(ctx: std::sync::Arc<Ctx>) {
    let mut done: Option<(i64, String)> = None;
    let mut wait = AHEAD_EVERY;
    let mut said: Option<String> = None;
    loop {
        tokio::time::sleep(wait).await;
        let Ok(revision) = ctx.store.records_revision().await else {
            continue;
        };
        if done.as_ref().is_some_and(|(r, _)| *r == revision) {
            continue;
        }
        match ahead_once(&ctx).await {
            Ok(None) => {
                done = Some((revision, String::new()));
                wait = AHEAD_EVERY;
            }
            Ok(Some(url)) => {
                if done.as_ref().is_none_or(|(_, u)| *u != url) {
                    tracing::info!(%url, "the new bus's objects asserted ahead of a move");
                }
                done = Some((revision, url));
                said = None;
                wait = AHEAD_EVERY;
            }
            Err(why) => {
                // Once per reason: the holder may take a while to start.
                if said.as_ref() != Some(&why) {
                    tracing::warn!(error = %why, "the new bus's objects not asserted yet; trying again");
                    said = Some(why);
                }
                wait = (wait * 2).min(AHEAD_MAX);
            }
        }
    }
}

/// One attempt: `None` when there is no new bus to prepare.
async fn ahead_once(ctx: &Ctx) -> Result<Option<String>, String> {
    let genesis = Genesis::open(&ctx.opts.dir).map_err(|e| error_chain(&e))?;
    let derived = mesh_state::derive(&ctx.store, &ctx.opts.controller)
        .await
        .map_err(|e| error_chain(&e))?;
    if !super::declare::broker_held(&derived) {
        return Ok(None);
    }
    let now = u64::try_from(mesh_store::now_ms()).unwrap_or(0);
    let gathered = mesh_state::views::rollout::gather(&ctx.store, &derived, genesis.bus, now)
        .await
        .map_err(|e| error_chain(&e))?;
    let url = gathered.dial_at?;
    let mut cfg = connect::bus_config(&genesis).map_err(|e| error_chain(&e))?;
    cfg.url = url.clone();
    let client = tokio::time::timeout(DIAL_WITHIN, mesh_bus::connect(&cfg))
        .await
        .map_err(|_| format!("{url} gave no answer within {} s", DIAL_WITHIN.as_secs()))?
        .map_err(|e| format!("{url}: {}", error_chain(&e)))?;
    let js = async_nats::jetstream::new(client);
    mesh_bus::assert_objects(&js, &derived.objects)
        .await
        .map_err(|e| format!("{url}: {}", error_chain(&e)))?;
    Ok(Some(url))
}

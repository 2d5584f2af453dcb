//! Carrying out an enrolment plan (`mesh_core::enrolment::plan`) step by
//! step. The spend decides; every refusal sends the node the plan's one
//! refusal and logs the reason.

use std::time::Duration;

use mesh_bus::seam::{Delivery, Settle};
use mesh_core::enrolment::{self, EnrolPlan, EnrolRequest, EnrolStep};
use mesh_core::jetstream::Objects;
use mesh_store::{HostKeys, StoreError};
use tracing::{info, warn};

use super::{Counters, Ctx, error_chain};

/// How a step that did not complete ends the plan.
enum Stop {
    /// Refused: the node is told [`EnrolPlan::refusal`]; the reason is logged.
    Refused(String),
    /// Could not be decided now (the store is unavailable): handed back to
    /// CONTROL and tried again, nothing spent.
    Later(String),
    /// Not this controller's to decide (its lease passed on): neither
    /// answered nor acknowledged, so the active controller decides it.
    Deposed(String),
}

/// How long a request the store could not take waits before it comes round.
const LATER: Duration = Duration::from_secs(2);

pub(crate) async fn take(ctx: &Ctx, msg: Delivery) {
    let req = match EnrolRequest::parse(&msg.subject, &msg.payload) {
        Ok(r) => r,
        Err(e) => {
            // Malformed: redelivering would fail the same way forever.
            Counters::bump(&ctx.counters.terminated);
            warn!(subject = %msg.subject, reason = %e, "enrolment request terminated");
            let _ = msg.settle(Settle::Terminate).await;
            return;
        }
    };
    let plan = enrolment::plan(&req);
    match execute(ctx, &plan, &msg).await {
        Ok(()) => {
            Counters::bump(&ctx.counters.enrolled);
            info!(node = %req.node, host_key = %req.host_key, "node enrolled");
            let _ = msg.settle(Settle::Ack).await;
        }
        Err(Stop::Refused(reason)) => {
            Counters::bump(&ctx.counters.refused);
            warn!(node = %req.node, %reason, "enrolment refused");
            answer(ctx, &plan.to, &plan.refusal).await;
            let _ = msg.settle(Settle::Ack).await;
        }
        Err(Stop::Deposed(reason)) => {
            info!(node = %req.node, %reason, "enrolment left to the active controller");
        }
        Err(Stop::Later(reason)) => {
            warn!(node = %req.node, %reason, retry_in = ?LATER, "enrolment deferred");
            let _ = msg.settle(Settle::Retry { after: LATER }).await;
        }
    }
}

/// How often an enrolment waiting for its composition tells CONTROL it is
/// still at work: well inside the consumer's ack wait, so the request is
/// never delivered again while it waits (a second delivery would find the
/// token spent).
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

async fn execute(ctx: &Ctx, plan: &EnrolPlan, msg: &Delivery) -> Result<(), Stop> {
    let mut generation = None;
    for step in &plan.steps {
        match step {
            EnrolStep::SpendToken {
                node,
                enrolment_key,
                host_key,
                xkey,
                spare_keys,
                amqp_hashes,
            } => {
                match ctx.store.record_amqp_hashes(amqp_hashes).await {
                    Ok(_) => {}
                    Err(e) if e.is_deposed() => return Err(Stop::Deposed(error_chain(&e))),
                    Err(e) if e.is_unavailable() => return Err(Stop::Later(error_chain(&e))),
                    Err(e) => return Err(Stop::Refused(error_chain(&e))),
                }
                let keys = HostKeys {
                    host_key: host_key.clone(),
                    xkey: xkey.clone(),
                    spare_keys: spare_keys.clone(),
                };
                match ctx.store.spend_token(node, enrolment_key, &keys).await {
                    Ok(_) => {}
                    Err(StoreError::TokenRefused(t)) => {
                        return Err(Stop::Refused(t.reason.to_string()));
                    }
                    Err(e) if e.is_deposed() => return Err(Stop::Deposed(error_chain(&e))),
                    Err(e) if e.is_unavailable() => return Err(Stop::Later(error_chain(&e))),
                    Err(e) => return Err(Stop::Refused(error_chain(&e))),
                }
            }
            // From here on the token is spent: nothing may refuse (a retry
            // would find it spent and refuse a node that enrolled). What
            // fails is logged; the records revision this spend moved makes
            // the watcher assert the consumer and recompose again.
            // On RabbitMQ the composition (next) declares every queue from
            // the whole derivation, which alone says a node's queue keeps
            // one message.
            EnrolStep::AssertConsumer { .. } if ctx.bus.nats().is_none() => {}
            EnrolStep::AssertConsumer { consumer } => {
                let objects = Objects {
                    streams: Vec::new(),
                    consumers: vec![consumer.clone()],
                };
                if let Err(e) = ctx.assert_objects(&objects).await {
                    warn!(consumer = %consumer.name, error = %error_chain(&e), "node consumer not created yet");
                }
            }
            EnrolStep::Compose => generation = Some(ctx.composer.trigger()),
            EnrolStep::AwaitLive => {
                let Some(g) = generation else { continue };
                let live = tokio::time::timeout(ctx.opts.live_within, ctx.composer.live(g));
                tokio::pin!(live);
                let mut progress = tokio::time::interval_at(
                    tokio::time::Instant::now() + PROGRESS_EVERY,
                    PROGRESS_EVERY,
                );
                let waited = loop {
                    tokio::select! {
                        w = &mut live => break w,
                        _ = progress.tick() => {
                            let _ = msg.in_progress().await;
                        }
                    }
                };
                match waited {
                    Ok(Ok(_)) => {}
                    Ok(Err(stopped)) => warn!(error = %stopped, "composition not confirmed"),
                    Err(_) => warn!(
                        waited = %format!("{} s", ctx.opts.live_within.as_secs()),
                        "the composition admitting the node is not live yet (the host, answered already, goes on trying)"
                    ),
                }
            }
            EnrolStep::Answer { to, answer: a } => answer(ctx, to, a).await,
        }
    }
    Ok(())
}

/// Signed with the controller's key: the node checks it against the key its
/// token names before it records anything. Sent (and flushed) before the
/// composition that closes the enrolment connection is triggered.
async fn answer(ctx: &Ctx, to: &enrolment::AnswerTo, a: &enrolment::EnrolAnswer) {
    if let Err(e) = ctx
        .bus
        .publish(&to.reply, &a.sign(to, &ctx.signing_key))
        .await
    {
        warn!(error = %error_chain(&e), "could not answer the enrolment");
    }
    // On NATS a publish is buffered; on RabbitMQ it was confirmed.
    if let Some(n) = ctx.bus.nats() {
        let _ = n.client().flush().await;
    }
}

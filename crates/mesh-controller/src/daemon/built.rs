//! Builds, as build machines announce them (`built` on the
//! `mesh-build-machine` role's event subject, through the controller's
//! EVENTS consumer): each recorded once by its id, a success with its
//! artifacts — confirmed in `ARTIFACTS` by the controller itself, which
//! takes each chunk token from the stored meta, not from the announcement —
//! and its inputs; a failure with its reason and no module. A redelivered
//! announcement records nothing twice; a malformed one is terminated and
//! logged, never redelivered forever.

use std::sync::Arc;
use std::time::Duration;

use mesh_bus::seam::{Delivery, Settle};
use mesh_core::build::{Built, Outcome};
use mesh_core::event;
use mesh_store::{Artifact, Build, BuildState, StoreError};
use tracing::{info, warn};

use super::{Counters, Ctx, error_chain};

/// How long an announcement the store or the bus cannot take now waits in
/// EVENTS before it comes round again.
const RETRY: Duration = Duration::from_secs(2);

/// Binds the controller's EVENTS consumer and records what it delivers,
/// binding again whenever the delivery ends.
pub(crate) async fn take(ctx: Arc<Ctx>) {
    let events = mesh_core::jetstream::controller_events();
    loop {
        let mut messages = super::control::bind_deliveries(&ctx, &events, PREFETCH).await;
        while let Some(next) = messages.next().await {
            match next {
                Ok(msg) => take_one(&ctx, msg).await,
                Err(e) => warn!(error = %error_chain(&e), "EVENTS delivery failed"),
            }
        }
        warn!("the controller's EVENTS consumer stopped delivering; binding again");
    }
}

/// What to do with one delivery: decided from the announcement and what
/// the bus holds, then carried out by [`take_one`].
enum Step {
    Record(Build),
    /// Cannot be recorded, now or ever: terminated, with the reason logged.
    Terminate(String),
    /// The bus could not say now: comes round again.
    Later(String),
}

/// Announcements taken at once (recorded one at a time).
const PREFETCH: u16 = 16;

async fn take_one(ctx: &Ctx, msg: Delivery) {
    let step = decide(ctx, &msg.payload).await;
    match step {
        Step::Terminate(reason) => {
            Counters::bump(&ctx.counters.terminated);
            warn!(subject = %msg.subject, %reason, "built event terminated");
            let _ = msg.settle(Settle::Terminate).await;
        }
        Step::Later(reason) => {
            warn!(subject = %msg.subject, %reason, "built event stays in EVENTS");
            let _ = msg.settle(Settle::Retry { after: RETRY }).await;
        }
        Step::Record(build) => match ctx.store.record_build(&build).await {
            Ok(()) => {
                let (module, version) = (
                    build.module.as_ref().map_or("none", |m| m.as_str()),
                    build.rev.as_deref().unwrap_or("none"),
                );
                match &build.state {
                    mesh_store::BuildState::Succeeded => {
                        info!(id = %build.id, module, version, "build recorded: succeeded")
                    }
                    mesh_store::BuildState::Failed { reason } => {
                        info!(id = %build.id, %reason, "build recorded: failed")
                    }
                }
                let _ = msg.settle(Settle::Ack).await;
            }
            Err(StoreError::AlreadyExists { .. }) => {
                info!(id = %build.id, "build recorded before; acknowledged again");
                let _ = msg.settle(Settle::Ack).await;
            }
            Err(e) if e.is_deposed() => {
                info!(id = %build.id, error = %error_chain(&e), "build left to the active controller");
            }
            Err(e) if e.is_unavailable() => {
                warn!(id = %build.id, error = %error_chain(&e), "the store cannot take the build now");
                let _ = msg.settle(Settle::Retry { after: RETRY }).await;
            }
            Err(e) => {
                Counters::bump(&ctx.counters.terminated);
                warn!(id = %build.id, error = %error_chain(&e), "build not recorded; terminated");
                let _ = msg.settle(Settle::Terminate).await;
            }
        },
    }
}

/// A build recorded failed, with no module (no version to pin).
fn failed(id: String, reason: String, at: i64) -> Step {
    Step::Record(Build {
        id,
        module: None,
        rev: None,
        state: BuildState::Failed { reason },
        inputs: vec![],
        artifacts: vec![],
        finished_at: at,
    })
}

async fn decide(ctx: &Ctx, payload: &[u8]) -> Step {
    let envelope = match event::parse(payload) {
        Ok(e) => e,
        Err(e) => return Step::Terminate(e.to_string()),
    };
    let built: Built = match serde_json::from_value(envelope.payload) {
        Ok(b) => b,
        Err(e) => return Step::Terminate(format!("not a built event: {e}")),
    };
    let at = i64::try_from(envelope.at).unwrap_or(i64::MAX);
    match built.check() {
        Err(e) => Step::Terminate(e.to_string()),
        Ok(Outcome::Failed { id, reason }) => failed(id, reason, at),
        Ok(Outcome::Succeeded {
            id,
            module,
            version,
            artifacts,
            inputs,
        }) => {
            let mut recorded = Vec::with_capacity(artifacts.len());
            for (a, reference) in artifacts {
                let name = reference.object_name();
                let Some(nats) = ctx.bus.nats() else {
                    return failed(
                        id,
                        format!(
                            "the build announced {reference}, and a mesh on RabbitMQ keeps no artifacts yet"
                        ),
                        at,
                    );
                };
                let nuid = match mesh_bus::artifacts::stat(nats.client(), &name).await {
                    Ok(Some(s)) if s.size == a.size && s.sha256.as_deref() == Some(&a.sha256) => {
                        s.nuid
                    }
                    // Announced as made but not there as announced: a host
                    // could never fetch it, so it is no version to pin.
                    Ok(_) => {
                        return failed(
                            id,
                            format!(
                                "the build announced {reference} ({} bytes), which ARTIFACTS does not hold as announced",
                                a.size
                            ),
                            at,
                        );
                    }
                    Err(e) => {
                        return Step::Later(format!("could not read {name} from ARTIFACTS: {e}"));
                    }
                };
                recorded.push(Artifact {
                    name: a.name.to_string(),
                    digest: a.sha256,
                    path: name,
                    size: a.size,
                    nuid: Some(nuid),
                });
            }
            Step::Record(Build {
                id,
                module: Some(module),
                rev: Some(version),
                state: BuildState::Succeeded,
                inputs: inputs.iter().map(|r| r.to_string()).collect(),
                artifacts: recorded,
                finished_at: at,
            })
        }
    }
}

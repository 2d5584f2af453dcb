//! Reports from CONTROL: recorded, and each module's public key recorded
//! for a module assigned to the reporting node (never another's), which
//! moves the records revision and so recomposes the users file.

use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use mesh_core::authority::PrincipalKind;
use mesh_core::report::{ModuleState, Report};
use mesh_core::store_window::Decision;
use mesh_core::users_file::UserCredential;
use mesh_store::{Store, StoreError};
use tracing::{debug, info, warn};

use super::{Counters, Ctx, error_chain};

pub(crate) async fn take(ctx: &Ctx, msg: jetstream::Message) {
    let report = match Report::parse(&msg.subject, &msg.payload) {
        Ok(r) => r,
        Err(e) => {
            Counters::bump(&ctx.counters.terminated);
            warn!(subject = %msg.subject, reason = %e, "report terminated");
            let _ = msg.ack_with(AckKind::Term).await;
            return;
        }
    };
    let deliveries = msg.info().map(|i| i.delivered.max(1) as u64).unwrap_or(1);
    let now = u64::try_from(mesh_store::now_ms()).unwrap_or(0);
    if let Some(d) = ctx.window_without_trying(now, deliveries) {
        window(ctx, &msg, &report, d).await;
        return;
    }
    match record(&ctx.store, &report).await {
        Ok(outcome) => {
            ctx.close_window();
            match outcome {
                Ingested::Recorded => Counters::bump(&ctx.counters.reports),
                Ingested::Duplicate => {
                    Counters::bump(&ctx.counters.duplicates);
                    info!(node = %report.node, id = %report.id, "report recorded before; acknowledged again");
                }
                Ingested::Superseded { newest } => {
                    Counters::bump(&ctx.counters.superseded);
                    info!(node = %report.node, sequence = report.sequence, newest, "report answers an older declaration; not recorded");
                }
            }
            let _ = msg.ack().await;
        }
        Err(e) if e.is_unavailable() => {
            warn!(node = %report.node, sequence = report.sequence, error = %error_chain(&e), "the store cannot take the report");
            let now = u64::try_from(mesh_store::now_ms()).unwrap_or(0);
            let d = ctx.window_decision(now, deliveries);
            window(ctx, &msg, &report, d).await;
        }
        Err(e) => {
            // A node forgotten meanwhile, or a report the store refuses:
            // redelivering would fail the same way.
            Counters::bump(&ctx.counters.terminated);
            warn!(node = %report.node, error = %error_chain(&e), "report terminated");
            let _ = msg.ack_with(AckKind::Term).await;
        }
    }
}

/// Carries out the store window's decision for one report.
async fn window(ctx: &Ctx, msg: &jetstream::Message, report: &Report, d: Decision) {
    match d {
        Decision::Nak { delay_ms } => {
            debug!(node = %report.node, sequence = report.sequence, retry_in_ms = delay_ms, "report stays in CONTROL");
            let _ = msg
                .ack_with(AckKind::Nak(Some(Duration::from_millis(delay_ms))))
                .await;
        }
        Decision::LetGo { open_for_ms } => {
            Counters::bump(&ctx.counters.let_go);
            warn!(node = %report.node, sequence = report.sequence, id = %report.id, open_for_ms, "the store has been unavailable past the bound; report let go");
            let _ = msg.ack_with(AckKind::Term).await;
        }
    }
}

/// What recording one report came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ingested {
    Recorded,
    /// Its id was recorded before (a redelivery).
    Duplicate,
    /// It answers an older declaration than the node's newest.
    Superseded {
        newest: i64,
    },
}

/// Records one report as the controller does on CONTROL: the supersession
/// check, the report and its outcomes, then each module key it names for a
/// module assigned to the node. `mesh bench` measures exactly this.
pub async fn record(store: &Store, r: &Report) -> Result<Ingested, StoreError> {
    // A refusal is kept whatever it answers: it is about what was sent.
    if r.refused.is_none()
        && let Some(newest) = store.latest_declaration(&r.node).await?
        && i64::try_from(r.sequence).unwrap_or(i64::MAX) < newest.version
    {
        return Ok(Ingested::Superseded {
            newest: newest.version,
        });
    }
    let outcomes = r
        .modules
        .iter()
        .map(|m| mesh_store::ModuleOutcome {
            module: m.name.clone(),
            state: match m.state {
                ModuleState::Starting => mesh_store::ModuleState::Starting,
                ModuleState::Running => mesh_store::ModuleState::Running,
                ModuleState::Stopped => mesh_store::ModuleState::Stopped,
                ModuleState::Failed => mesh_store::ModuleState::Failed {
                    reason: m.reason.clone().unwrap_or_default(),
                },
            },
            restarts: m.restarts,
        })
        .collect();
    let recorded = store
        .record_report(&mesh_store::Report {
            node: r.node.clone(),
            declaration_version: i64::try_from(r.sequence).unwrap_or(i64::MAX),
            outcomes,
            received_at: mesh_store::now_ms(),
            refused: r.refused.clone(),
            report_id: Some(r.id.clone()),
        })
        .await?;
    if recorded == mesh_store::Recorded::Duplicate {
        return Ok(Ingested::Duplicate);
    }
    if let Some(why) = &r.refused {
        warn!(node = %r.node, sequence = r.sequence, reason = %why, "the host refused its declaration");
    } else {
        info!(node = %r.node, sequence = r.sequence, modules = r.modules.len(), "report recorded");
    }
    let assigned = store.assignments().await?;
    for m in &r.modules {
        let Some(key) = &m.nkey else { continue };
        // Only for a module assigned to this node: a host can name any
        // module, and a key recorded for another's would let it speak as it.
        if !assigned
            .iter()
            .any(|a| a.node == r.node && a.module == m.name)
        {
            warn!(node = %r.node, module = %m.name, "key of a module not assigned to this node ignored");
            continue;
        }
        let principal = PrincipalKind::Module {
            node: r.node.clone(),
            module: m.name.clone(),
        };
        let known = store.credential(&principal.principal_name()).await?;
        if known.is_some_and(|c| c.credential == UserCredential::NKey(key.clone())) {
            continue;
        }
        match store.record_machine_key(&principal, key).await {
            Ok(()) => info!(node = %r.node, module = %m.name, "module key recorded"),
            // Unassigned between the read and the write: nothing to admit.
            Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Ingested::Recorded)
}

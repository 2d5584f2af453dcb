//! The controller's half of a move onto another bus (DESIGN "rollout"),
//! run by the active controller while it is still on the old one: once
//! `mesh rollout --confirm` recorded the move (and with it the addresses
//! every node is now declared), it waits until each enrolled node has
//! reported — on the old bus — that it applied a declaration naming the
//! new addresses (then its host left for the new bus), or until the bound
//! passed, and until no report has come for a while (what the old bus
//! still held is recorded, none lost): `mesh_core::rollout::move_now`
//! decides. Then it records the move done and ends the term, and the next
//! one connects to the new bus.
//! A standby that takes over mid-move runs this same wait from the records.
//! On the new bus, [`retire`] removes the mesh's users from the old one
//! once every node reports there.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mesh_core::rollout::{MoveNow, move_now};
use tracing::{info, warn};

use super::{Ctx, error_chain};

/// How often the records are read while a move is under way.
const EVERY: Duration = Duration::from_millis(500);

/// Resolves when this controller should move itself onto the new bus.
pub(crate) async fn drain_then_move(ctx: Arc<Ctx>) {
    let mut said_waiting = false;
    let mut last_reports = ctx.counters.reports.load(Ordering::Relaxed);
    let mut quiet_since = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(EVERY).await;
        let now_reports = ctx.counters.reports.load(Ordering::Relaxed);
        if now_reports != last_reports {
            last_reports = now_reports;
            quiet_since = tokio::time::Instant::now();
        }
        let m = match ctx.store.bus_move().await {
            Ok(Some(m)) => m,
            Ok(None) => continue,
            Err(e) => {
                warn!(error = %error_chain(&e), "cannot read the bus move");
                continue;
            }
        };
        if m.moved_at.is_some() {
            return;
        }
        let waiting = match not_moved(&ctx, &m.to_urls).await {
            Ok(w) => w,
            Err(e) => {
                warn!(error = %error_chain(&e), "cannot read which nodes took the move");
                continue;
            }
        };
        let since = u64::try_from(mesh_store::now_ms() - m.confirmed_at).unwrap_or(0);
        let quiet = u64::try_from(quiet_since.elapsed().as_millis()).unwrap_or(u64::MAX);
        let within = u64::try_from(ctx.opts.move_within.as_millis()).unwrap_or(u64::MAX);
        match move_now(waiting, since, quiet, within) {
            MoveNow::Wait { nodes } => {
                if !nodes.is_empty() && !said_waiting {
                    info!(nodes = %nodes.join(", "), to = %m.to_urls.join(","), "moving the mesh: waiting for nodes to take the new bus");
                    said_waiting = true;
                }
                continue;
            }
            MoveNow::Move { without } if !without.is_empty() => {
                warn!(nodes = %without.join(", "), within_ms = within, "nodes did not take the new bus in time: moving without them");
            }
            MoveNow::Move { .. } => {}
        }
        if let Err(e) = ctx.store.bus_moved().await {
            warn!(error = %error_chain(&e), "the move was not recorded done; trying again");
            continue;
        }
        info!(to = %m.to_urls.join(","), reports = now_reports, "the old bus drained: moving onto the new one");
        return;
    }
}

/// How often a moved controller retries retiring the old bus.
const RETIRE_EVERY: Duration = Duration::from_secs(2);

/// Run by every term on the new bus of a moved mesh until the old bus is
/// retired: once every enrolled node took the move (`mesh_core::rollout::
/// retire` decides), each user the mesh gave on RabbitMQ is removed
/// through its management API, the controller's own last, and the
/// retirement recorded. A node still to move keeps its user (the one way
/// it could come back) and is named in `mesh status` meanwhile.
pub(crate) async fn retire(ctx: Arc<Ctx>, management: mesh_bus::amqp::Management) {
    let mut said_waiting = false;
    let mut said_unreachable = false;
    loop {
        let m = match ctx.store.bus_move().await {
            Ok(Some(m)) if m.retired_at.is_none() => m,
            Ok(_) => return,
            Err(e) => {
                warn!(error = %error_chain(&e), "cannot read the bus move");
                tokio::time::sleep(RETIRE_EVERY).await;
                continue;
            }
        };
        let waiting = match not_moved(&ctx, &m.to_urls).await {
            Ok(w) => w,
            Err(e) => {
                warn!(error = %error_chain(&e), "cannot read which nodes took the move");
                tokio::time::sleep(RETIRE_EVERY).await;
                continue;
            }
        };
        if !waiting.is_empty() {
            if !said_waiting {
                info!(nodes = %waiting.join(", "), "the old bus is kept until these nodes report on the new one");
                said_waiting = true;
            }
            tokio::time::sleep(RETIRE_EVERY).await;
            continue;
        }
        let m2 = management.clone();
        let removed = tokio::task::spawn_blocking(move || {
            let observed = mesh_bus::amqp::users::observe(&m2)?;
            let steps = mesh_core::rollout::retire(&[], &observed);
            mesh_bus::amqp::users::apply(&m2, &steps)?;
            Ok::<_, mesh_bus::amqp::ManagementError>(
                steps
                    .into_iter()
                    .filter_map(|s| match s {
                        mesh_core::authority::amqp_users::UserStep::DeleteUser { name } => {
                            Some(name)
                        }
                        _ => None,
                    })
                    .collect::<Vec<_>>(),
            )
        })
        .await;
        match removed {
            Ok(Ok(names)) => {
                if let Err(e) = ctx.store.bus_retired().await {
                    warn!(error = %error_chain(&e), "the old bus's retirement was not recorded; trying again");
                    tokio::time::sleep(RETIRE_EVERY).await;
                    continue;
                }
                info!(removed = names.len(), users = %names.join(", "), "the old bus retired: the mesh's RabbitMQ users removed; RabbitMQ may be stopped");
                return;
            }
            Ok(Err(e)) => {
                if !said_unreachable {
                    warn!(error = %error_chain(&e), "the old bus's users were not removed (is RabbitMQ's management API answering?); trying again");
                    said_unreachable = true;
                }
            }
            Err(e) => warn!(error = %e, "removing the old bus's users did not finish"),
        }
        tokio::time::sleep(RETIRE_EVERY).await;
    }
}

/// Enrolled nodes whose newest report does not answer a declaration naming
/// `to` (not declared it yet, or not applied it).
async fn not_moved(ctx: &Ctx, to: &[String]) -> Result<Vec<String>, mesh_store::StoreError> {
    let mut waiting = Vec::new();
    for node in ctx.store.nodes().await? {
        if node.public_key.is_none() {
            continue;
        }
        if !mesh_state::views::rollout::took_move(&ctx.store, &node.name, to).await? {
            waiting.push(node.name.to_string());
        }
    }
    Ok(waiting)
}

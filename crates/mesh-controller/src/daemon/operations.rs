//! Persons' operations, served by the active controller: the one writer of
//! the records. Who asked is the subject's (the server admits a person's
//! own subjects only, as their role allows); the role is checked again
//! against the records, so a composition not yet live after a role was
//! narrowed does not widen it. Each change is an audit row naming the
//! person; a request seen before (its id in the trail) is answered from
//! its row, not carried out twice.

use std::sync::Arc;

use mesh_bus::seam::Messages;
use mesh_core::names::Name;
use mesh_core::operation::wire::{self, Reply, Request};
use mesh_core::operation::{Operation, refusal};
use mesh_store::{Actor, AuditEntry, Outcome};
use tracing::{info, warn};

use super::{Ctx, error_chain};

mod changes;
mod login;
mod reads;
mod upload;

/// Persons' operations and logins, subscribed while this controller is
/// active only, so a standby never answers one (a request then meets no
/// responder, and the asker is told at once).
pub(crate) struct Bound {
    requests: Messages,
    logins: Messages,
}

pub(crate) async fn bind(ctx: &Ctx) -> Result<Bound, super::DaemonError> {
    let subscribe = |subject: &'static str| async move {
        ctx.bus
            .subscribe(subject)
            .await
            .map_err(|e| super::DaemonError::Bind(Box::new(e)))
    };
    Ok(Bound {
        requests: subscribe(mesh_core::subjects::ALL_OPERATIONS).await?,
        logins: subscribe(mesh_core::subjects::ALL_LOGINS).await?,
    })
}

/// Serves both until the connection ends.
pub(crate) async fn serve(ctx: Arc<Ctx>, bound: Bound) {
    tokio::join!(
        requests(ctx.clone(), bound.requests),
        login::serve(&ctx, bound.logins)
    );
}

/// Answers every request `requests` delivers, one at a time.
async fn requests(ctx: Arc<Ctx>, mut requests: Messages) {
    while let Some(msg) = requests.next().await {
        let Ok(msg) = msg else { continue };
        if msg.reply.is_none() {
            continue;
        }
        let reply = match mesh_core::subjects::parse_operation(&msg.subject) {
            Some((person, op)) => answer(&ctx, &person, op, &msg.payload).await,
            None => Reply::Refused {
                reason: format!("{} names no operation of the controller", msg.subject),
            },
        };
        let body = serde_json::to_vec(&reply).expect("a reply serializes");
        if let Err(e) = ctx.bus.respond(&msg, &body).await {
            warn!(error = %error_chain(&e), "an operation's answer was not sent");
        }
    }
}

async fn answer(ctx: &Ctx, person: &Name, op: Operation, payload: &[u8]) -> Reply {
    let request = match wire::request(payload) {
        Ok(r) => r,
        Err(refused) => return refused,
    };
    match ctx.store.person(person).await {
        Ok(Some(p)) if p.role.is_some_and(|r| r.allows(op)) => {}
        Ok(p) => {
            return Reply::Refused {
                reason: refusal(person.as_str(), p.and_then(|p| p.role), op),
            };
        }
        Err(e) => return unavailable(&e),
    }
    if op.changes() {
        match ctx.store.audit_of_request(&request.id).await {
            Ok(Some(row)) => return answered_before(row),
            Ok(None) => {}
            Err(e) => return unavailable(&e),
        }
    }
    let reply = carry_out(ctx, person, op, &request).await;
    if op.changes() {
        audit(ctx, person, op, &request, &reply).await;
    }
    reply
}

/// The answer to a request already in the trail.
fn answered_before(row: mesh_store::AuditRow) -> Reply {
    match row.outcome.strip_prefix("refused: ") {
        Some(reason) => Reply::Refused {
            reason: reason.to_string(),
        },
        None => Reply::Done {
            said: format!("done before (audit row {}): not done again", row.id),
            revision: row.revision,
            data: serde_json::Value::Null,
        },
    }
}

fn unavailable(e: &mesh_store::StoreError) -> Reply {
    Reply::Refused {
        reason: format!("the controller cannot read its store: {}", error_chain(e)),
    }
}

async fn carry_out(ctx: &Ctx, person: &Name, op: Operation, request: &Request) -> Reply {
    if op.changes() {
        changes::carry_out(ctx, person, op, request).await
    } else {
        reads::carry_out(ctx, op, request).await
    }
}

/// A request's arguments, or the answer refusing them.
macro_rules! args {
    ($op:expr, $request:expr) => {
        match mesh_core::operation::wire::args($op, &$request.args) {
            Ok(a) => a,
            Err(refused) => return refused,
        }
    };
}
pub(crate) use args;

/// Not served over the bus (yet): the local command that does it.
fn not_served(op: Operation) -> Reply {
    Reply::Refused {
        reason: format!(
            "`{op}` is not served over the bus yet: run `mesh {}` on the controller's machine",
            op.as_str().replacen('-', " ", 1)
        ),
    }
}

pub(super) fn read(rows: impl serde::Serialize) -> Reply {
    Reply::Done {
        said: String::new(),
        revision: None,
        data: serde_json::to_value(rows).unwrap_or_default(),
    }
}

pub(super) fn refused(e: impl std::error::Error + 'static) -> Reply {
    Reply::Refused {
        reason: error_chain(&e),
    }
}

/// Done: with the records revision the change made.
pub(super) async fn changed(store: &mesh_store::Store, said: String) -> Reply {
    Reply::Done {
        said,
        revision: store.records_revision().await.ok(),
        data: serde_json::Value::Null,
    }
}

async fn audit(ctx: &Ctx, person: &Name, op: Operation, request: &Request, reply: &Reply) {
    let outcome = match reply {
        Reply::Done { revision, .. } => Outcome::Done {
            revision: *revision,
        },
        Reply::Refused { reason } => Outcome::Refused {
            reason: reason.clone(),
        },
    };
    let entry = AuditEntry {
        who: Actor::Person(person.to_string()),
        operation: op.to_string(),
        arguments: wire::audited(op, &request.args),
        outcome,
        request_id: Some(request.id.clone()),
    };
    match ctx.store.append_audit(&entry).await {
        Ok(_) => info!(person = %person, operation = %op, "operation served"),
        Err(e) => {
            warn!(person = %person, operation = %op, error = %error_chain(&e), "the operation's audit row was not written")
        }
    }
}

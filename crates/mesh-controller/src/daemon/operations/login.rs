//! Persons' one-time logins, spent by the active controller: the server
//! admits a login's principal to its own person's subject only, so the
//! subject says whose login it is; the store spends it and records the key
//! the person made in one transaction, and the change is audited in the
//! person's name. Every refusal reads the same: who presents a bad login
//! learns nothing about which exist.

use mesh_bus::seam::Messages;
use mesh_core::names::Name;
use mesh_core::operation::wire::{LoginRequest, Reply};
use mesh_store::{Actor, AuditEntry, Outcome, StoreError};
use tracing::{info, warn};

use crate::daemon::{Ctx, error_chain};

/// Answers every login `logins` delivers, one at a time.
pub(super) async fn serve(ctx: &Ctx, mut logins: Messages) {
    while let Some(msg) = logins.next().await {
        let Ok(msg) = msg else { continue };
        if msg.reply.is_none() {
            continue;
        }
        let person = msg
            .subject
            .strip_prefix("mesh.controller.login.")
            .and_then(|p| Name::new(p).ok());
        let reply = match person {
            Some(person) => spend(ctx, &person, &msg.payload).await,
            None => refused(),
        };
        let body = serde_json::to_vec(&reply).expect("a reply serializes");
        if let Err(e) = ctx.bus.respond(&msg, &body).await {
            warn!(error = %error_chain(&e), "a login's answer was not sent");
        }
    }
}

fn refused() -> Reply {
    Reply::Refused {
        reason: "this login cannot be used; ask an admin for a new one (`mesh person add <name> --role <role>`)".into(),
    }
}

async fn spend(ctx: &Ctx, person: &Name, payload: &[u8]) -> Reply {
    let Ok(request) = serde_json::from_slice::<LoginRequest>(payload) else {
        return refused();
    };
    match ctx
        .store
        .spend_login(person, &request.login_key, &request.person_key)
        .await
    {
        Ok(()) => {}
        Err(StoreError::TokenRefused(_)) => {
            info!(person = %person, "a login was refused");
            return refused();
        }
        Err(e) => {
            return Reply::Refused {
                reason: format!(
                    "the controller cannot record the login: {}",
                    error_chain(&e)
                ),
            };
        }
    }
    let revision = ctx.store.records_revision().await.ok();
    let entry = AuditEntry {
        who: Actor::Person(person.to_string()),
        operation: "login".into(),
        arguments: serde_json::json!({ "key": request.person_key }),
        outcome: Outcome::Done { revision },
        request_id: None,
    };
    if let Err(e) = ctx.store.append_audit(&entry).await {
        warn!(person = %person, error = %error_chain(&e), "the login's audit row was not written");
    }
    info!(person = %person, "person logged in");
    Reply::Done {
        said: format!("person {person}'s key is recorded"),
        revision,
        data: serde_json::Value::Null,
    }
}

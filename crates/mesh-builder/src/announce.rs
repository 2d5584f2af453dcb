//! Announcing a build: one `built` event, retried until `EVENTS` stores it.
//! A finished build is never turned into a failed one because announcing
//! failed: the outcome stays what the build was, and waits for the bus.

use std::time::Duration;

use mesh_core::build::{BUILT_EVENT, Built};
use mesh_core::catalogue::BUILD_MACHINE_ROLE;
use mesh_sdk::{Module, SdkError};
use tracing::warn;

/// Longest wait between two tries.
const MAX_DELAY: Duration = Duration::from_secs(30);

pub async fn announce(module: &Module, built: &Built) {
    let payload = match serde_json::to_value(built) {
        Ok(p) => p,
        Err(e) => {
            // Cannot happen for these types; said rather than panicked.
            warn!(id = %built.id, error = %e, "could not encode a built event");
            return;
        }
    };
    let mut delay = Duration::from_millis(250);
    loop {
        match module
            .emit_seat(BUILD_MACHINE_ROLE, BUILT_EVENT, payload.clone())
            .await
        {
            Ok(()) => return,
            // A refusal is the grant's doing, and retrying cannot mend it;
            // it is logged loudly and still retried: the claim on the work
            // keeps it from being lost while an operator fixes the grant.
            Err(e @ SdkError::Refused { .. }) => {
                warn!(id = %built.id, error = %e, "the server refuses the built event")
            }
            Err(e) => {
                warn!(id = %built.id, error = %e, retry_in_ms = delay.as_millis() as u64, "could not announce a build yet")
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_DELAY);
    }
}

//! A mesh that moved onto NATS run as a module (`mesh-broker`, DESIGN
//! "rollout"): the user list reaches its server in the holder's
//! declaration (`bus-users`), composed by every declaration pass, and no
//! file of the controller's machine is the server's. A composition is in
//! force once each holder's host applied the newest declaration carrying
//! the list — what `mesh rollout check` asks of it too.

use std::sync::Arc;
use std::time::Duration;

use mesh_core::bus::BusKind;
use mesh_core::records::ControllerSpec;
use mesh_store::Store;

use super::{ComposeError, Composition, Outcome, SourceError, Timing, publish::Done};

pub struct DeclaredUsers {
    pub store: Store,
    pub spec: ControllerSpec,
}

/// Why the newest list is not in force yet.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct NotApplied(String);

impl Composition for DeclaredUsers {
    async fn once(&mut self, generation: u64) -> (Outcome, Done) {
        let done = Done::default();
        let not_live = |e: SourceError| Outcome::NotLive {
            generation,
            error: Arc::new(ComposeError::Source(e)),
        };
        let derived = match mesh_state::derive(&self.store, &self.spec).await {
            Ok(d) => d,
            Err(e) => return (not_live(Box::new(e)), done),
        };
        let now = u64::try_from(mesh_store::now_ms()).unwrap_or(0);
        let gathered =
            match mesh_state::views::rollout::gather(&self.store, &derived, BusKind::Nats, now)
                .await
            {
                Ok(g) => g,
                Err(e) => return (not_live(Box::new(e)), done),
            };
        let behind: Vec<String> = gathered
            .facts
            .holders
            .iter()
            .filter(|h| match h.users_declared {
                Some(s) => h.applied.is_none_or(|a| a < s),
                None => true,
            })
            .map(|h| format!("{} on {}", h.module, h.node))
            .collect();
        if gathered.facts.holders.is_empty() || !behind.is_empty() {
            let why = if behind.is_empty() {
                "no module holds mesh-broker".to_string()
            } else {
                format!(
                    "the mesh-broker holder has not applied the newest user list: {}",
                    behind.join(", ")
                )
            };
            return (not_live(Box::new(NotApplied(why))), done);
        }
        (
            Outcome::Live {
                generation,
                canary: String::new(),
                omitted: Vec::new(),
            },
            Done {
                written: true,
                signalled: false,
                confirmed: true,
            },
        )
    }

    fn timing(&self) -> Timing {
        Timing::default()
    }

    /// A holder's host applies a declaration within a second or two.
    fn retry_after(&self) -> Duration {
        Duration::from_secs(2)
    }
}

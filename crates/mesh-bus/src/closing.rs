//! A client's stop that ends when its connection has. async-nats's `drain`
//! only asks the connection's handler to drain and returns at once; the
//! socket closes later, when the handler ends. A daemon that returned then
//! raced whatever stopped next: `mesh up` stops the broker right after its
//! host and controller, and a client still connected saw the broker go
//! ("bus connection lost; reconnecting").

use std::sync::Arc;
use std::time::Duration;

use async_nats::{Client, Event};
use tokio::sync::watch;

/// Whether a client's connection has ended. Clone it into the client's
/// event callback and call [`Closed::note`] with every event.
#[derive(Debug, Clone)]
pub struct Closed(Arc<watch::Sender<bool>>);

impl Default for Closed {
    fn default() -> Self {
        Closed::new()
    }
}

impl Closed {
    pub fn new() -> Closed {
        Closed(Arc::new(watch::channel(false).0))
    }

    pub fn note(&self, event: &Event) {
        if matches!(event, Event::Closed) {
            self.0.send_replace(true);
        }
    }

    /// Resolves once the connection has ended.
    async fn ended(&self) {
        let mut rx = self.0.subscribe();
        // The sender lives as long as `self`: never an error.
        let _ = rx.wait_for(|c| *c).await;
    }
}

/// Why a drain did not end with the connection closed.
#[derive(Debug, thiserror::Error)]
pub enum CloseError {
    #[error("the connection could not be asked to drain")]
    Drain(#[source] async_nats::client::DrainError),
    #[error("the connection did not close within {0:?} of the drain")]
    TimedOut(Duration),
}

/// Drains `client` (what it sent reaches the server, its subscriptions
/// end) and waits until its connection has closed, at most `limit`.
/// `closed` must have been noting the client's events.
pub async fn drain_and_close(
    client: &Client,
    closed: &Closed,
    limit: Duration,
) -> Result<(), CloseError> {
    client.drain().await.map_err(CloseError::Drain)?;
    tokio::time::timeout(limit, closed.ended())
        .await
        .map_err(|_| CloseError::TimedOut(limit))
}

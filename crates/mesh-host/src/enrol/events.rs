//! What the enrolment connection reports: the server ending it (the key
//! refused, the connection closed) or refusing the principal a subject.

use std::time::Duration;

use async_nats::{ClientError, Event, ServerError};
use tokio::sync::mpsc;

pub(super) fn is_loss(event: &Event) -> bool {
    loss_of(event) != Loss::None
}

/// What an event says of the connection: the server's refusal of the key
/// comes as a server error on the connection, or as a client error when a
/// reconnect is refused.
pub(super) fn loss_of(event: &Event) -> Loss {
    match event {
        Event::ServerError(ServerError::AuthorizationViolation) => Loss::Refused,
        Event::ClientError(ClientError::Other(m))
            if m.to_lowercase().contains("authorization violation") =>
        {
            Loss::Refused
        }
        Event::Disconnected | Event::Closed | Event::ClientError(ClientError::MaxReconnects) => {
            Loss::Lost
        }
        _ => Loss::None,
    }
}

/// How long a failed operation waits for the connection to report its
/// loss (a broken pipe comes before the event; a refused reconnect after).
pub(super) const LOSS_SHOWS_WITHIN: Duration = Duration::from_secs(3);

/// What the enrolment connection reported, worst last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Loss {
    None,
    /// Closed or disconnected.
    Lost,
    /// The server refused the token's key (it is no longer admitted).
    Refused,
}

/// After an operation on the connection failed: `seen` so far, then what
/// comes within `within`, until the key is refused or the client gives up.
pub(super) async fn loss_within(
    events: &mut mpsc::UnboundedReceiver<Event>,
    mut seen: Loss,
    within: Duration,
) -> Loss {
    let until = tokio::time::Instant::now() + within;
    while seen != Loss::Refused {
        match tokio::time::timeout_at(until, events.recv()).await {
            Ok(Some(e)) => {
                seen = seen.max(loss_of(&e));
                if matches!(
                    e,
                    Event::Closed | Event::ClientError(ClientError::MaxReconnects)
                ) {
                    break;
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
    seen
}

/// The server's text when it refuses the principal a subject.
pub(super) fn permission_text(event: &Event) -> Option<String> {
    match event {
        Event::ServerError(ServerError::Other(m))
            if m.to_lowercase().contains("permissions violation") =>
        {
            Some(m.clone())
        }
        _ => None,
    }
}

/// Resolves with the server's text at the first permissions violation the
/// connection reports; never otherwise.
/// Notes in `seen` what else the connection reports meanwhile.
pub(super) async fn permission_violation(
    events: &mut mpsc::UnboundedReceiver<Event>,
    seen: &mut Loss,
) -> String {
    while let Some(e) = events.recv().await {
        if let Some(m) = permission_text(&e) {
            return m;
        }
        *seen = (*seen).max(loss_of(&e));
    }
    std::future::pending().await
}

/// Whether the server ends the connection within `within` (the key refused,
/// or the connection closed): the first sign is enough.
pub(super) async fn ended_within(
    events: &mut mpsc::UnboundedReceiver<Event>,
    within: Duration,
) -> bool {
    let until = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(until, events.recv()).await {
            Ok(Some(e)) if is_loss(&e) => return true,
            Ok(Some(_)) => {}
            // Every sender gone: the connection is closed.
            Ok(None) => return true,
            Err(_) => return false,
        }
    }
}

//! Hearing the server refuse: nats-server answers a publish or subscription
//! a principal may not make with an error on the connection
//! (`Permissions Violation for Publish to "…"`), not on the operation, so
//! an operation that must fail loudly races the error stream.

use std::time::Duration;

use async_nats::{Client, ConnectOptions, Event, ServerError};
use mesh_bus::{BusConfig, ConnectError};
use tokio::sync::broadcast;

/// What the server may refuse a connection.
#[derive(Debug, Clone, Copy)]
pub enum Denied {
    Publish,
    Subscription,
}

impl Denied {
    /// As nats-server words it.
    fn word(self) -> &'static str {
        match self {
            Denied::Publish => "publish",
            Denied::Subscription => "subscription",
        }
    }
}

/// The server's error messages on one connection.
#[derive(Debug, Clone)]
pub struct ServerErrors(broadcast::Sender<String>);

/// A module's reconnect waits: the first after a drop spread over
/// [`mesh_bus::reconnect::FIRST_ATTEMPT_WINDOW`], then from this doubling to the bound.
const RECONNECT_START: Duration = Duration::from_millis(250);
const RECONNECT_MAX: Duration = Duration::from_secs(10);

impl ServerErrors {
    /// Connects as `cfg` says, hearing the server's errors.
    pub async fn connect(cfg: &BusConfig) -> Result<(Client, ServerErrors), ConnectError> {
        let (errors, tune) = ServerErrors::listening();
        let client = mesh_bus::connect_with(cfg, tune).await?;
        Ok((client, errors))
    }

    /// The server's errors, and what a NATS connection must be given to
    /// hear them ([`mesh_bus::connect_with`], [`mesh_bus::seam::Bus::connect_with`]).
    pub fn listening() -> (
        ServerErrors,
        impl FnOnce(ConnectOptions) -> ConnectOptions + Send + 'static,
    ) {
        let (tx, _) = broadcast::channel(64);
        let errors = ServerErrors(tx);
        let heard = errors.clone();
        // A module reconnects as its host does: the first attempt after a
        // drop spread over a window, so a broker restarted under a fleet's
        // modules is not met by all of them at once.
        let reconnects = mesh_bus::Reconnects::new(RECONNECT_START, RECONNECT_MAX);
        let tune = move |opts| heard.listen(reconnects.apply(opts), reconnects);
        (errors, tune)
    }

    fn listen(self, opts: ConnectOptions, reconnects: mesh_bus::Reconnects) -> ConnectOptions {
        opts.event_callback(move |event| {
            reconnects.note(&event);
            let tx = self.0.clone();
            async move {
                if let Event::ServerError(ServerError::Other(e)) = event {
                    // No receiver means nothing is waiting: nothing to tell.
                    let _ = tx.send(e);
                }
            }
        })
    }

    /// Resolves once the server says it refused this connection `what` on
    /// `subject`. Subscribed at the call, not when first polled: a refusal
    /// that arrives before the caller awaits is still heard.
    pub fn refusal(
        &self,
        what: Denied,
        subject: &str,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut errors = self.0.subscribe();
        let (what, subject) = (what.word(), subject.to_string());
        async move {
            loop {
                match errors.recv().await {
                    Ok(e) if is_refusal(&e, what, &subject) => return,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    // Every sender gone: no refusal will come.
                    Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
                }
            }
        }
    }
}

/// Whether the server's error `e` refuses `what` on `subject`. The words
/// are compared without case, the subject exactly: subjects are case
/// sensitive, and `$JS.API.CONSUMER.INFO.SEAT_x…` is not `$js.api…`.
fn is_refusal(e: &str, what: &str, subject: &str) -> bool {
    let prefix = format!("permissions violation for {what} to ");
    e.to_lowercase().contains(&prefix) && e.contains(&format!("\"{subject}\""))
}

#[cfg(test)]
mod tests {
    use super::is_refusal;

    #[test]
    fn a_refusal_is_matched_by_its_words_and_its_exact_subject() {
        let e =
            r#"Permissions Violation for Publish to "$JS.API.CONSUMER.INFO.SEAT_jobs.seat_jobs""#;
        assert!(is_refusal(
            e,
            "publish",
            "$JS.API.CONSUMER.INFO.SEAT_jobs.seat_jobs"
        ));
        assert!(!is_refusal(
            e,
            "subscription",
            "$JS.API.CONSUMER.INFO.SEAT_jobs.seat_jobs"
        ));
        assert!(!is_refusal(
            e,
            "publish",
            "$js.api.consumer.info.seat_jobs.seat_jobs"
        ));
        // A subject that only starts like the refused one is another subject.
        assert!(!is_refusal(
            e,
            "publish",
            "$JS.API.CONSUMER.INFO.SEAT_jobs.seat_jo"
        ));
        let q = r#"Permissions Violation for Subscription to "mesh.mod.a.tool.t" using queue "q""#;
        assert!(is_refusal(q, "subscription", "mesh.mod.a.tool.t"));
    }
}

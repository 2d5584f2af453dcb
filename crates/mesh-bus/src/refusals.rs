//! Hearing the server refuse. nats-server answers a publish or a
//! subscription a principal may not make with an error on the *connection*
//! (`-ERR 'Permissions Violation for Publish to "…"'`) and drops the
//! message: a refused request is never answered, and async-nats reports the
//! error only to the client's event callback. An operation that must fail
//! loudly (rather than wait out its timeout) races the refusals heard there.

use async_nats::{Event, ServerError};
use tokio::sync::broadcast;

/// What the server refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    Publish,
    Subscription,
}

impl std::fmt::Display for Denied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Denied::Publish => "publish to",
            Denied::Subscription => "subscription to",
        })
    }
}

/// One refusal: what, and on which subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub denied: Denied,
    pub subject: String,
}

/// The refusals the server sent one connection. Clone it into the
/// client's event callback and call [`Refusals::note`] with every event.
#[derive(Debug, Clone)]
pub struct Refusals(broadcast::Sender<Refusal>);

impl Default for Refusals {
    fn default() -> Self {
        Refusals::new()
    }
}

impl Refusals {
    pub fn new() -> Refusals {
        // Refusals are rare; a listener that lags only misses old ones.
        Refusals(broadcast::channel(64).0)
    }

    /// Hears a client event; a permissions violation is passed to every
    /// [`Watch`] open at that moment.
    pub fn note(&self, event: &Event) {
        if let Event::ServerError(ServerError::Other(e)) = event
            && let Some(r) = parse(e)
        {
            // No watcher means nothing is waiting to hear it.
            let _ = self.0.send(r);
        }
    }

    /// Starts listening. Open it *before* sending what may be refused: the
    /// refusal can arrive before the caller awaits anything.
    pub fn watch(&self) -> Watch {
        Watch(self.0.subscribe())
    }
}

/// Refusals heard since [`Refusals::watch`].
#[derive(Debug)]
pub struct Watch(broadcast::Receiver<Refusal>);

impl Watch {
    /// Resolves with the first refusal `ours` claims; never resolves when
    /// none comes. Other refusals on the connection belong to other work
    /// and are passed over.
    pub async fn refused(&mut self, ours: impl Fn(&Refusal) -> bool) -> Refusal {
        loop {
            match self.0.recv().await {
                Ok(r) if ours(&r) => return r,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
        }
    }
}

/// `Permissions Violation for Publish to "<subject>"`, or `… for
/// Subscription to "<subject>"` (with ` using queue "<q>"` after it).
/// The words compared without case, the subject kept exactly: subjects are
/// case sensitive.
fn parse(e: &str) -> Option<Refusal> {
    const HEAD: &str = "permissions violation for ";
    let lower = e.to_ascii_lowercase();
    let at = lower.find(HEAD)? + HEAD.len();
    let (denied, rest) = if lower[at..].starts_with("publish to ") {
        (Denied::Publish, &e[at + "publish to ".len()..])
    } else if lower[at..].starts_with("subscription to ") {
        (Denied::Subscription, &e[at + "subscription to ".len()..])
    } else {
        return None;
    };
    let rest = rest.strip_prefix('"')?;
    let subject = &rest[..rest.find('"')?];
    Some(Refusal {
        denied,
        subject: subject.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_read_from_the_servers_words() {
        let r =
            parse(r#"Permissions Violation for Publish to "$JS.API.DIRECT.GET.OBJ_A.$O.A.M.YT8=""#)
                .unwrap();
        assert_eq!(r.denied, Denied::Publish);
        assert_eq!(r.subject, "$JS.API.DIRECT.GET.OBJ_A.$O.A.M.YT8=");
        let q = parse(r#"permissions violation for subscription to "_INBOX.x.>" using queue "q""#)
            .unwrap();
        assert_eq!(q.denied, Denied::Subscription);
        assert_eq!(q.subject, "_INBOX.x.>");
        for other in [
            "Authorization Violation",
            "Permissions Violation for Publish to",
            r#"Permissions Violation for Publish to "unterminated"#,
            r#"Permissions Violation for Everything to "x""#,
            "",
        ] {
            assert_eq!(parse(other), None, "{other}");
        }
    }

    #[tokio::test]
    async fn a_watch_hears_only_what_it_claims_and_only_after_it_opened() {
        let refusals = Refusals::new();
        let event = |s: &str| {
            Event::ServerError(ServerError::Other(format!(
                "Permissions Violation for Publish to \"{s}\""
            )))
        };
        refusals.note(&event("before"));
        let mut watch = refusals.watch();
        refusals.note(&event("theirs"));
        refusals.note(&event("ours"));
        let heard = watch.refused(|r| r.subject != "theirs").await;
        assert_eq!(heard.subject, "ours");
    }
}

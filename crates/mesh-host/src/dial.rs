//! Connecting with retries: telling a pin mismatch (fatal: the address
//! reaches another server) from a refusal (the users file may not be live
//! yet) from an unreachable broker (it may be restarting).

use std::time::Duration;

use async_nats::{Client, ConnectErrorKind, ConnectOptions};
use mesh_bus::{BusConfig, ConnectError, connect_with};
use tokio::time::Instant;

use crate::backoff::Backoff;

/// Why one attempt failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The broker's certificate is not the pinned one: retrying cannot help.
    Pin {
        url: String,
        expected: String,
        got: String,
    },
    /// The broker answered and turned the credential away.
    Refused(ConnectError),
    /// No answer (refused connection, timeout, TLS broken off).
    Unreachable(ConnectError),
    /// A configuration no retry can fix (a bad seed, credentials in the URL).
    Fatal(ConnectError),
}

/// What a bounded retry loop ended with.
#[derive(Debug)]
pub(crate) enum GaveUp {
    Pin {
        url: String,
        expected: String,
        got: String,
    },
    Fatal(ConnectError),
    /// There was no address to try.
    NoAddress,
    /// The deadline passed; the last failure was a refusal (`true`) or not.
    Deadline {
        refused: bool,
        last: ConnectError,
    },
}

pub(crate) fn classify(err: ConnectError) -> Failure {
    let ConnectError::Connect { url, source, .. } = &err else {
        return Failure::Fatal(err);
    };
    if let Some(p) = pin_mismatch(source) {
        return Failure::Pin {
            url: url.clone(),
            expected: p.expected.clone(),
            got: p.got.clone(),
        };
    }
    match source.kind() {
        ConnectErrorKind::AuthorizationViolation | ConnectErrorKind::Authentication => {
            Failure::Refused(err)
        }
        ConnectErrorKind::ServerParse => Failure::Fatal(err),
        _ => Failure::Unreachable(err),
    }
}

pub(crate) use mesh_bus::pin_mismatch;

/// Tries each config in turn, waiting a jittered backoff between rounds,
/// until one connects, a failure is fatal, or `deadline` passes (`None`:
/// never). Each failed attempt is logged with its reason.
pub(crate) async fn connect_until<F>(
    configs: &[BusConfig],
    deadline: Option<Instant>,
    backoff: &mut Backoff,
    connect_timeout: Duration,
    tune: F,
) -> Result<Client, GaveUp>
where
    F: Fn(ConnectOptions) -> ConnectOptions,
{
    connect_refused_within(configs, deadline, None, backoff, connect_timeout, tune).await
}

/// [`connect_until`], also giving up once the broker has refused the
/// credential for `refused_for` without a break (`None`: only at the
/// deadline): a credential the broker keeps refusing after its users file
/// had time to go live is not going to be admitted.
pub(crate) async fn connect_refused_within<F>(
    configs: &[BusConfig],
    deadline: Option<Instant>,
    refused_for: Option<Duration>,
    backoff: &mut Backoff,
    connect_timeout: Duration,
    tune: F,
) -> Result<Client, GaveUp>
where
    F: Fn(ConnectOptions) -> ConnectOptions,
{
    if configs.is_empty() {
        return Err(GaveUp::NoAddress);
    }
    let mut attempt: u64 = 0;
    // When the current run of refusals began.
    let mut refused_since: Option<Instant> = None;
    loop {
        let mut last = None;
        for cfg in configs {
            attempt += 1;
            let timeout = match deadline {
                Some(d) => d
                    .saturating_duration_since(Instant::now())
                    .min(connect_timeout)
                    .max(Duration::from_millis(100)),
                None => connect_timeout,
            };
            let result = connect_with(cfg, |o| tune(o.connection_timeout(timeout))).await;
            match result {
                Ok(client) => {
                    backoff.reset();
                    return Ok(client);
                }
                Err(e) => match classify(e) {
                    Failure::Pin { url, expected, got } => {
                        return Err(GaveUp::Pin { url, expected, got });
                    }
                    Failure::Fatal(e) => return Err(GaveUp::Fatal(e)),
                    Failure::Refused(e) => {
                        tracing::info!(
                            attempt,
                            url = %cfg.url,
                            principal = %cfg.principal,
                            "the broker refused the credential (not yet in its users file?); retrying"
                        );
                        refused_since.get_or_insert_with(Instant::now);
                        last = Some((true, e));
                    }
                    Failure::Unreachable(e) => {
                        tracing::info!(
                            attempt,
                            url = %cfg.url,
                            principal = %cfg.principal,
                            reason = %chain(&e),
                            "the broker is not reachable; retrying"
                        );
                        refused_since = None;
                        last = Some((false, e));
                    }
                },
            }
        }
        let mut wait = backoff.next_delay();
        if let (Some(since), Some(within)) = (refused_since, refused_for) {
            let left = (since + within).saturating_duration_since(Instant::now());
            if left.is_zero() {
                let (refused, last) = last.ok_or(GaveUp::NoAddress)?;
                return Err(GaveUp::Deadline { refused, last });
            }
            wait = wait.min(left);
        }
        if let Some(d) = deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let (refused, last) = last.ok_or(GaveUp::NoAddress)?;
                return Err(GaveUp::Deadline { refused, last });
            }
            // The last attempt is made at the deadline, not skipped because
            // a long wait would pass it.
            wait = wait.min(left);
        }
        tokio::time::sleep(wait).await;
    }
}

/// An error and its causes on one line, for a log.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

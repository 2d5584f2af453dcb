//! Enrolment (DESIGN §6): the node connects with the token's enrolment seed
//! pinning the broker certificate, publishes its request (its public keys
//! and the reply address) to CONTROL, waits for the controller's answer and
//! checks its signature against the token's controller key, then connects
//! with its own key until the reload that admits it is live.
//!
//! Should the enrolment connection close before any answer came (a reload
//! that won the race), being admitted by the host's own key is taken as
//! enrolled without the answer; the token's controller key is then first
//! checked by the signature of the first declaration, which the host refuses
//! if it is not that key's. The controller answers before it triggers the
//! reload, so this is the exception.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::Event;
use ed25519_dalek::VerifyingKey;
use futures::StreamExt as _;
use mesh_bus::{BusConfig, CertPin, ClientCredential, ConnectError};
use mesh_core::authority::PrincipalKind;
use mesh_core::enrolment::{AnswerError, AnswerTo, EnrolAnswer, EnrolRequest, REFUSED};
use mesh_core::names::Name;
use mesh_core::subjects;
use mesh_core::token::Token;
use tokio::sync::mpsc;
use tokio::time::Instant;

mod amqp;
mod events;

use events::{
    LOSS_SHOWS_WITHIN, Loss, ended_within, is_loss, loss_within, permission_text,
    permission_violation,
};

use crate::backoff::Backoff;
use crate::dial::{self, GaveUp};
use crate::state::{HOST_FILE, HostKeys, HostState, StateError, host_bus_config, unix_ms};

/// How long each phase of an enrolment may take.
#[derive(Debug, Clone)]
pub struct EnrolOptions {
    /// For the controller's answer once the request is stored.
    pub answer_within: Duration,
    /// For the broker to admit the host's own key, once the enrolment
    /// connection was closed or no answer came.
    pub admit_within: Duration,
    /// For the broker to admit the enrolment key at all (the controller may
    /// not yet have recomposed since `mesh node add`). Long enough for a
    /// clustered bus that just lost a server: its controller's requests
    /// wait on a new leader, and a composition came 10 s after `mesh node
    /// add` here — a host that gave up then was told its token was spent.
    pub connect_within: Duration,
    /// How long the broker may keep refusing the enrolment key before the
    /// token is taken as spent or expired: a fresh token's key is live within
    /// a composition of `mesh node add` — well under a second on a small
    /// mesh, but 7–9 s at 10,000 nodes on a 2-core machine (BENCHMARKS.md),
    /// where a host started at once is told its token is spent.
    pub refused_within: Duration,
}

impl Default for EnrolOptions {
    fn default() -> Self {
        EnrolOptions {
            answer_within: Duration::from_secs(30),
            admit_within: Duration::from_secs(15),
            connect_within: Duration::from_secs(30),
            refused_within: Duration::from_secs(2),
        }
    }
}

/// The enrolment connection's reconnect delay once the controller's welcome
/// is read: longer than any enrolment, so it never dials again.
const NEVER: Duration = Duration::from_secs(365 * 86_400);

const BACKOFF_START: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum EnrolError {
    /// One message whatever the reason: the controller's log says which.
    #[error("{}", REFUSED)]
    Refused,
    #[error(
        "the broker at {url} presented a certificate that does not match the token's fingerprint (token sha256 {expected}, presented {got}); the address reaches another server, or the broker's certificate changed since the token was issued: check the address, or issue a new token with `mesh node add {node}` on the controller"
    )]
    CertificateMismatch {
        url: String,
        node: Name,
        expected: String,
        got: String,
    },
    #[error(
        "{dir} already holds an enrolled host ({HOST_FILE}); run it with `mesh host --state {dir}` without --token, or enrol into another, empty directory"
    )]
    AlreadyEnrolled { dir: PathBuf },
    /// Seen on the node before anything is sent (past its expiry), or the
    /// broker kept refusing the token's enrolment key (its principal is gone
    /// once the token is spent or expired).
    #[error(
        "this token was already used or has expired: if node {node} enrolled with it, start that host from the state directory it enrolled into, with no token (`mesh host --state DIR`); if its host never kept that enrolment, `mesh node add {node} --reissue` on the controller issues a new token (for a node not enrolled yet: `mesh node add {node}`)"
    )]
    Spent { node: Name },
    #[error(
        "the enrolment answer was not signed by the controller the token names: the token's controller key is not this mesh's (the token was altered, or mixes two meshes); this node did not enrol. Issue a new token on the controller: `mesh node forget {node}`, then `mesh node add {node}`"
    )]
    NotSignedByController { node: Name },
    #[error(
        "the broker refused this token's enrolment request for node {node} ({reason}): a token's enrolment key may enrol only the node it was issued for (was the token edited?); issue a new one with `mesh node add <node>` on the controller"
    )]
    NotPermitted { node: Name, reason: String },
    #[error(
        "could not reach the broker at {urls} within {within:?}; check that the address is reachable from this machine and the broker runs, then try again"
    )]
    Unreachable {
        urls: String,
        within: Duration,
        #[source]
        source: Option<ConnectError>,
    },
    #[error(
        "could not reach the broker at {url} within {within:?} ({reason}); check that the address is reachable from this machine and the broker runs, then try again"
    )]
    UnreachableAmqp {
        url: String,
        within: Duration,
        reason: String,
    },
    #[error(
        "the broker did not store the enrolment request ({reason}); the controller may not have created its streams yet: start it, then try again"
    )]
    NotStored { reason: String },
    #[error(
        "the connection to the broker was lost before the enrolment request was sent ({reason}); nothing was sent: try again"
    )]
    NotSent { reason: String },
    #[error(transparent)]
    Connect(ConnectError),
    #[error(transparent)]
    State(#[from] StateError),
}

/// Enrols the token's node with its state in `state_dir` (created 0700),
/// returning the enrolled state (`host.json` written). An attempt the token
/// can no longer succeed in leaves none of the keys it made behind: a seed
/// with no enrolment is nothing the next attempt should pick up.
pub async fn enrol(
    token: &Token,
    state_dir: &Path,
    opts: &EnrolOptions,
) -> Result<HostState, EnrolError> {
    let made = MadeKeys::before(state_dir);
    let result = enrol_once(token, state_dir, opts).await;
    if let Err(e) = &result
        && e.token_is_done()
    {
        made.remove();
    }
    result
}

/// The key files an attempt is about to make in a state directory: those
/// not there before it.
struct MadeKeys {
    dir: PathBuf,
    dir_made: bool,
    files: Vec<PathBuf>,
}

impl MadeKeys {
    fn before(dir: &Path) -> MadeKeys {
        let files = [
            crate::state::NKEY_SEED_FILE,
            crate::state::XKEY_SEED_FILE,
            crate::spare::SPARE_DIR,
        ]
        .iter()
        .map(|f| dir.join(f))
        .filter(|p| !p.exists())
        .collect();
        MadeKeys {
            dir: dir.to_path_buf(),
            dir_made: !dir.exists(),
            files,
        }
    }

    /// Removes what the attempt made (best effort: it is failing already).
    fn remove(self) {
        for f in &self.files {
            let _ = match f.is_dir() {
                true => std::fs::remove_dir_all(f),
                false => std::fs::remove_file(f),
            };
        }
        if self.dir_made {
            // Only if empty: nothing of anyone else's goes with it.
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

impl EnrolError {
    /// Whether this token can never enrol the node now (spent, expired,
    /// refused, for another mesh or node): no retry with it can use the
    /// keys made for it. An unreachable broker or a request not stored is
    /// tried again with the same token, and the same keys.
    pub fn token_is_done(&self) -> bool {
        matches!(
            self,
            EnrolError::Refused
                | EnrolError::Spent { .. }
                | EnrolError::NotSignedByController { .. }
                | EnrolError::NotPermitted { .. }
                | EnrolError::CertificateMismatch { .. }
        )
    }
}

async fn enrol_once(
    token: &Token,
    state_dir: &Path,
    opts: &EnrolOptions,
) -> Result<HostState, EnrolError> {
    let node = &token.node;
    if token.ensure_fresh(unix_ms()).is_err() {
        return Err(EnrolError::Spent { node: node.clone() });
    }
    if state_dir.join(HOST_FILE).exists() {
        return Err(EnrolError::AlreadyEnrolled {
            dir: state_dir.to_path_buf(),
        });
    }
    // A pin that does not parse is the token's fault; decode already checked.
    let pin = CertPin::from_hex(&token.cert_sha256).map_err(|_| EnrolError::Refused)?;
    let controller = mesh_core::declaration::verifying_key(&token.controller_key)
        .ok_or_else(|| EnrolError::NotSignedByController { node: node.clone() })?;
    // Before anything is sent: once the controller has recorded the public
    // keys, losing the seeds would leave the node unable to ever connect.
    let keys = HostKeys::load_or_create(state_dir)?;
    let enrolment_key = nkeys::KeyPair::from_seed(token.enrolment_seed.expose())
        .map(|kp| kp.public_key())
        .map_err(|_| EnrolError::Refused)?;

    let principal = PrincipalKind::Enrolment { node: node.clone() }.principal_name();
    let configs: Vec<BusConfig> = token
        .bus_urls
        .iter()
        .map(|url| BusConfig {
            url: url.clone(),
            principal: principal.clone(),
            credential: ClientCredential::NKey(token.enrolment_seed.clone()),
            ca_file: None,
            inbox_prefix: Some(subjects::enrol_inbox_prefix(node)),
            pin: Some(pin),
        })
        .collect();
    if configs
        .first()
        .is_some_and(|c| mesh_bus::seam::kind_of(c).ok() == Some(mesh_core::bus::BusKind::Amqp))
    {
        let with = amqp::With {
            token,
            state_dir,
            opts,
            keys: &keys,
            controller: &controller,
            enrolment_key,
            pin,
        };
        return amqp::enrol_once(&with, &configs[0]).await;
    }
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let welcomed = Arc::new(AtomicBool::new(false));
    let mut backoff = Backoff::new(BACKOFF_START, BACKOFF_MAX);
    let deadline = Instant::now() + opts.connect_within;
    let client = dial::connect_refused_within(
        &configs,
        Some(deadline),
        Some(opts.refused_within),
        &mut backoff,
        opts.connect_within,
        |o| {
            let tx = events_tx.clone();
            let welcomed = welcomed.clone();
            // The reload that admits the host ends this connection; a
            // reconnect would only be refused again, and logged by the
            // broker as an authentication error: once the controller's
            // welcome is read (nothing more is asked of this connection),
            // the one reconnect allowed waits past any enrolment. Before,
            // it is made at once: a refused reconnect is how a connection
            // whose token another enrolment spent learns it is closed.
            o.max_reconnects(1)
                .reconnect_delay_callback(move |_| match welcomed.load(Ordering::Relaxed) {
                    true => NEVER,
                    false => Duration::ZERO,
                })
                .event_callback(move |event| {
                    let tx = tx.clone();
                    async move {
                        let _ = tx.send(event);
                    }
                })
        },
    )
    .await
    .map_err(|g| match g {
        // Past `refused_within`: the principal is not in the users file.
        GaveUp::Deadline { refused: true, .. } => EnrolError::Spent { node: node.clone() },
        g => gave_up(g, token, opts.connect_within),
    })?;
    tracing::info!(node = %node, "connected with the enrolment token; sending the request");

    let reply = client.new_inbox();
    let subscribed = match client.subscribe(reply.clone()).await {
        Ok(answers) => client
            .flush()
            .await
            .map(|()| answers)
            .map_err(|e| dial::chain(&e)),
        Err(e) => Err(dial::chain(&e)),
    };
    let mut answers = match subscribed {
        Ok(a) => a,
        // Nothing was sent yet. Another enrolment with this token may have
        // won meanwhile: its reload drops the token's key, the server
        // closes this connection and refuses the reconnect.
        Err(reason) => {
            return Err(
                match loss_within(&mut events, Loss::None, LOSS_SHOWS_WITHIN).await {
                    Loss::Refused => EnrolError::Spent { node: node.clone() },
                    Loss::Lost | Loss::None => EnrolError::NotSent { reason },
                },
            );
        }
    };
    let request = request(node, enrolment_key, &keys, reply, state_dir)?;
    let js = async_nats::jetstream::new(client.clone());
    // A controller starting beside this host may not have made CONTROL yet:
    // "no stream" is retried for as long as a connect would be.
    let deadline = tokio::time::Instant::now() + opts.connect_within;
    let mut wait = Duration::from_millis(100);
    let to = AnswerTo::of(&request);
    // What the connection reported while the request was on its way.
    let mut seen = Loss::None;
    let stored = loop {
        let publish = async {
            match js
                .publish(subjects::enrol(node), request.to_json().into())
                .await
            {
                Ok(ack) => ack.await.map_err(|e| (no_stream(&e), dial::chain(&e))),
                Err(e) => Err((false, dial::chain(&e))),
            }
        };
        // A publish the principal may not make is never acknowledged: the
        // server says so at once, on the connection, and that is the answer.
        let stored = tokio::select! {
            r = publish => r,
            reason = permission_violation(&mut events, &mut seen) => {
                return Err(EnrolError::NotPermitted { node: node.clone(), reason });
            }
        };
        match stored {
            Err((true, reason)) if tokio::time::Instant::now() + wait < deadline => {
                tracing::info!(node = %node, %reason, ?wait, "no stream stores enrolments yet; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(2));
            }
            other => break other.map_err(|(_, reason)| reason),
        }
    };
    let host_configs: Vec<BusConfig> = token
        .bus_urls
        .iter()
        .map(|url| host_bus_config(url, node, keys.nkey_seed().clone(), pin))
        .collect();
    let answered = match stored {
        Ok(ack) => {
            tracing::info!(node = %node, stream = %ack.stream, sequence = ack.sequence, "enrolment request stored; waiting for the answer");
            wait_for_answer(
                &mut answers,
                &mut events,
                &controller,
                &to,
                opts.answer_within,
            )
            .await
        }
        // The request may have been stored and acted on before the reload
        // closed the connection and took the confirmation with it.
        // The failed publish may be the first sign of the loss (a broken
        // pipe): its event comes through the callback a moment later.
        Err(reason) if loss_within(&mut events, seen, LOSS_SHOWS_WITHIN).await != Loss::None => {
            tracing::info!(node = %node, %reason, "the enrolment connection closed before the request was confirmed");
            Waited::Lost
        }
        Err(reason) => return Err(EnrolError::NotStored { reason }),
    };
    match answered {
        Waited::Refused => return Err(EnrolError::Refused),
        Waited::NotSigned => return Err(EnrolError::NotSignedByController { node: node.clone() }),
        Waited::NotPermitted(reason) => {
            return Err(EnrolError::NotPermitted {
                node: node.clone(),
                reason,
            });
        }
        Waited::Enrolled => {
            welcomed.store(true, Ordering::Relaxed);
            tracing::info!(node = %node, "the controller's signed answer admits this node; waiting for the broker to admit its key");
            // The composition that admits the host's key is the one that
            // drops the token's: the broker ends this connection then.
            // Connecting with the host's key before would only be refused
            // (and logged by the broker as an authentication error).
            let ended = ended_within(&mut events, opts.admit_within).await;
            let admitted = match ended {
                true => admit(&host_configs, &mut answers, &controller, &to, token, opts).await,
                false => Err(EnrolError::Refused),
            };
            match admitted {
                Ok(()) => {}
                // Enrolled by the controller's signed word: the host keeps
                // its enrolment and goes on connecting until the broker
                // admits it. Giving up here would strand a node the records
                // say is enrolled, with its token spent.
                Err(EnrolError::Refused) => tracing::warn!(
                    node = %node,
                    within = %format!("{} s", opts.admit_within.as_secs()),
                    "the broker has not admitted this host's key since the controller's signed answer: the composition admitting it is not live yet (the controller's log says why); the enrolment is kept and the host goes on trying (should it never be admitted, `mesh node add {node} --reissue` on the controller issues a new token)"
                ),
                Err(e) => return Err(e),
            }
        }
        Waited::Lost | Waited::Silent => {
            tracing::warn!(node = %node, "no answer on the enrolment connection; connecting with the host's own key (the controller key is checked on the first declaration)");
            admit(&host_configs, &mut answers, &controller, &to, token, opts).await?;
        }
    }
    drop(answers);
    // Closing is best effort: the server may have closed it already (and
    // a connection waiting to reconnect would never finish draining).
    let _ = tokio::time::timeout(Duration::from_secs(1), client.drain()).await;
    let state = HostState::record(
        state_dir,
        node.clone(),
        token.bus_urls.clone(),
        token.cert_sha256.clone(),
        token.controller_key.clone(),
    )?;
    tracing::info!(node = %node, "enrolled");
    Ok(state)
}

enum Waited {
    /// A signed welcome.
    Enrolled,
    /// A signed refusal.
    Refused,
    /// An answer whose signature is not the token's controller key.
    NotSigned,
    /// The server refused the principal a subscribe or publish.
    NotPermitted(String),
    /// The enrolment connection was closed or refused by the server.
    Lost,
    /// No answer in time.
    Silent,
}

fn read_answer(payload: &[u8], controller: &VerifyingKey, to: &AnswerTo) -> Option<Waited> {
    match EnrolAnswer::verify(payload, controller, to) {
        Ok(EnrolAnswer::Enrolled { .. }) => Some(Waited::Enrolled),
        Ok(EnrolAnswer::Refused { .. }) => Some(Waited::Refused),
        Err(AnswerError::NotSigned) => Some(Waited::NotSigned),
        Err(e) => {
            tracing::warn!(reason = %e, "ignoring a message on the enrolment inbox");
            None
        }
    }
}

async fn wait_for_answer(
    answers: &mut async_nats::Subscriber,
    events: &mut mpsc::UnboundedReceiver<Event>,
    controller: &VerifyingKey,
    to: &AnswerTo,
    within: Duration,
) -> Waited {
    let deadline = Instant::now() + within;
    loop {
        tokio::select! {
            m = answers.next() => match m {
                Some(m) => if let Some(w) = read_answer(&m.payload, controller, to) { return w },
                None => return Waited::Lost,
            },
            e = events.recv() => match e {
                Some(e) if is_loss(&e) => return Waited::Lost,
                Some(e) if permission_text(&e).is_some() => {
                    return Waited::NotPermitted(permission_text(&e).unwrap_or_default());
                }
                None => return Waited::Lost,
                Some(other) => tracing::debug!(event = %other, "enrolment connection"),
            },
            _ = tokio::time::sleep_until(deadline) => return Waited::Silent,
        }
    }
}

/// Connects as the host until admitted or `admit_within` passes, still
/// heeding an explicit refusal on the enrolment inbox should one arrive.
async fn admit(
    host_configs: &[BusConfig],
    answers: &mut async_nats::Subscriber,
    controller: &VerifyingKey,
    to: &AnswerTo,
    token: &Token,
    opts: &EnrolOptions,
) -> Result<(), EnrolError> {
    let mut backoff = Backoff::new(BACKOFF_START, BACKOFF_MAX);
    let deadline = Instant::now() + opts.admit_within;
    let admitted = dial::connect_until(
        host_configs,
        Some(deadline),
        &mut backoff,
        opts.connect_within,
        |o| o,
    );
    tokio::pin!(admitted);
    let mut inbox_open = true;
    loop {
        tokio::select! {
            r = &mut admitted => {
                return match r {
                    Ok(client) => {
                        let flushed = client.flush().await;
                        let _ = client.drain().await;
                        flushed.map_err(|_| EnrolError::Refused)
                    }
                    // Never admitted: whatever the controller decided, it
                    // did not let this host in.
                    Err(GaveUp::Deadline { .. } | GaveUp::NoAddress) => Err(EnrolError::Refused),
                    Err(g) => Err(gave_up(g, token, opts.admit_within)),
                };
            }
            // A welcome already read is not repeated; what else comes is
            // heeded, a welcome included (it does not end the wait for
            // admission: the reload may still be on its way).
            m = answers.next(), if inbox_open => match m {
                Some(m) => match read_answer(&m.payload, controller, to) {
                    Some(Waited::Refused) => return Err(EnrolError::Refused),
                    Some(Waited::NotSigned) => {
                        return Err(EnrolError::NotSignedByController { node: token.node.clone() });
                    }
                    _ => {}
                },
                None => inbox_open = false,
            },
        }
    }
}

fn gave_up(g: GaveUp, token: &Token, within: Duration) -> EnrolError {
    match g {
        GaveUp::Pin { url, expected, got } => EnrolError::CertificateMismatch {
            url,
            node: token.node.clone(),
            expected,
            got,
        },
        GaveUp::Fatal(e) => EnrolError::Connect(e),
        GaveUp::Deadline { refused: true, .. } => EnrolError::Refused,
        GaveUp::Deadline {
            refused: false,
            last,
        } => EnrolError::Unreachable {
            urls: token.bus_urls.join(", "),
            within,
            source: Some(last),
        },
        GaveUp::NoAddress => EnrolError::Unreachable {
            urls: String::new(),
            within,
            source: None,
        },
    }
}

/// The request: the host's keys, its spares, and the RabbitMQ hash of each
/// (a mesh on AMQP admits them by it; one on NATS keeps them for a move).
fn request(
    node: &Name,
    enrolment_key: String,
    keys: &HostKeys,
    reply: String,
    state_dir: &Path,
) -> Result<EnrolRequest, EnrolError> {
    let spare_keys = crate::spare::top_up(state_dir)?;
    let mut amqp_hashes = crate::spare::hashes(state_dir, &spare_keys);
    amqp_hashes.insert(
        keys.host_key().to_string(),
        mesh_core::authority::amqp::announced_hash(keys.nkey_seed().expose()),
    );
    Ok(EnrolRequest {
        node: node.clone(),
        enrolment_key,
        host_key: keys.host_key().to_string(),
        xkey: keys.xkey().to_string(),
        reply,
        spare_keys,
        amqp_hashes,
    })
}

/// Whether a publish found no stream for its subject (CONTROL not made yet).
fn no_stream(e: &async_nats::jetstream::context::PublishError) -> bool {
    matches!(
        e.kind(),
        async_nats::jetstream::context::PublishErrorKind::StreamNotFound
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_core::secret::Secret;

    fn token(expires_at: u64) -> (Token, String) {
        let seed = nkeys::KeyPair::new_user().seed().unwrap();
        (
            Token {
                // Nothing listens on port 1.
                bus_urls: vec!["tls://127.0.0.1:1".into()],
                cert_sha256: "ab".repeat(32),
                controller_key: hex::encode(
                    ed25519_dalek::SigningKey::from_bytes(&[3; 32])
                        .verifying_key()
                        .to_bytes(),
                ),
                node: Name::new("n1").unwrap(),
                enrolment_seed: Secret::new(seed.clone()),
                expires_at,
            },
            seed,
        )
    }

    fn quick() -> EnrolOptions {
        EnrolOptions {
            answer_within: Duration::from_millis(200),
            admit_within: Duration::from_millis(200),
            connect_within: Duration::from_millis(300),
            refused_within: Duration::from_millis(300),
        }
    }

    #[test]
    fn a_refusal_says_exactly_the_one_message() {
        assert_eq!(EnrolError::Refused.to_string(), REFUSED);
    }

    #[tokio::test]
    async fn an_expired_token_is_refused_before_anything_is_written() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        let (t, seed) = token(1);
        let err = enrol(&t, &dir, &quick()).await.unwrap_err();
        assert!(matches!(err, EnrolError::Spent { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            "this token was already used or has expired: if node n1 enrolled with it, start that host from the state directory it enrolled into, with no token (`mesh host --state DIR`); if its host never kept that enrolment, `mesh node add n1 --reissue` on the controller issues a new token (for a node not enrolled yet: `mesh node add n1`)"
        );
        assert!(!dir.exists());
        assert!(!format!("{err:?}").contains(&seed[2..]));
    }

    #[tokio::test]
    async fn an_enrolled_directory_is_refused_with_the_command_to_run_it() {
        let tmp = tempfile::tempdir().unwrap();
        HostKeys::load_or_create(tmp.path()).unwrap();
        HostState::record(
            tmp.path(),
            Name::new("n1").unwrap(),
            vec!["tls://127.0.0.1:1".into()],
            "ab".repeat(32),
            "0c".repeat(32),
        )
        .unwrap();
        let (t, _) = token(u64::MAX);
        let err = enrol(&t, tmp.path(), &quick()).await.unwrap_err();
        assert!(matches!(err, EnrolError::AlreadyEnrolled { .. }), "{err}");
        let want = format!("mesh host --state {}", tmp.path().display());
        assert!(err.to_string().contains(&want), "{err}");
    }

    #[tokio::test]
    async fn an_unreachable_broker_is_named_and_the_keys_are_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let (t, seed) = token(u64::MAX);
        let err = enrol(&t, tmp.path(), &quick()).await.unwrap_err();
        assert!(matches!(err, EnrolError::Unreachable { .. }), "{err}");
        assert!(err.to_string().contains("tls://127.0.0.1:1"), "{err}");
        assert!(!format!("{err:?}").contains(&seed[2..]), "{err:?}");
        // Keys written before connecting, reused by the next attempt.
        let keys = HostKeys::load(tmp.path()).unwrap();
        assert!(!tmp.path().join(HOST_FILE).exists());
        let again = HostKeys::load_or_create(tmp.path()).unwrap();
        assert_eq!(keys.host_key(), again.host_key());
    }
}

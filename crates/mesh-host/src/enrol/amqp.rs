//! Enrolling on a mesh whose bus is RabbitMQ: the same request, answer and
//! admission as on NATS (DESIGN §6), through the bus seam. RabbitMQ says
//! at once what NATS says through connection events: a user it does not
//! know is refused at connect (the token's user not made yet, or removed
//! once spent), a request no queue takes comes back unroutable (the
//! controller has not declared CONTROL yet), and a deleted user's
//! connection is closed.

use std::path::Path;
use std::time::Duration;

use ed25519_dalek::VerifyingKey;
use mesh_bus::seam::{Bus, SeamConnectError, SeamError};
use mesh_bus::{BusConfig, CertPin};
use mesh_core::enrolment::{AnswerTo, EnrolAnswer};
use mesh_core::subjects;
use mesh_core::token::Token;
use tokio::time::Instant;

use super::{EnrolError, EnrolOptions, request};
use crate::backoff::Backoff;
use crate::dial;
use crate::state::{HostKeys, HostState, host_bus_config};

/// What an enrolment is made with.
pub(super) struct With<'a> {
    pub token: &'a Token,
    pub state_dir: &'a Path,
    pub opts: &'a EnrolOptions,
    pub keys: &'a HostKeys,
    pub controller: &'a VerifyingKey,
    pub enrolment_key: String,
    pub pin: CertPin,
}

pub(super) async fn enrol_once(w: &With<'_>, config: &BusConfig) -> Result<HostState, EnrolError> {
    let node = &w.token.node;
    let bus = connect_within(w, config, w.opts.connect_within, w.opts.refused_within).await?;
    tracing::info!(node = %node, "connected with the enrolment token; sending the request");
    let reply = format!(
        "{}.{}",
        subjects::enrol_inbox_prefix(node),
        hex::encode(rand::random::<[u8; 8]>())
    );
    let mut answers = bus
        .subscribe(&reply)
        .await
        .map_err(|e| EnrolError::NotSent {
            reason: dial::chain(&e),
        })?;
    let request = request(node, w.enrolment_key.clone(), w.keys, reply, w.state_dir)?;
    let to = AnswerTo::of(&request);
    // The controller may not have declared CONTROL yet: unroutable is
    // retried for as long as a connect would be.
    let deadline = Instant::now() + w.opts.connect_within;
    let mut wait = Duration::from_millis(100);
    loop {
        match bus
            .publish_stored(&subjects::enrol(node), &request.to_json())
            .await
        {
            Ok(()) => break,
            Err(SeamError::Unroutable { .. }) if Instant::now() + wait < deadline => {
                tracing::info!(node = %node, ?wait, "no queue takes enrolments yet; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(2));
            }
            Err(e @ SeamError::Refused { .. }) => {
                return Err(EnrolError::NotPermitted {
                    node: node.clone(),
                    reason: dial::chain(&e),
                });
            }
            Err(e) => {
                return Err(EnrolError::NotStored {
                    reason: dial::chain(&e),
                });
            }
        }
    }
    tracing::info!(node = %node, "enrolment request stored; waiting for the answer");
    let answered = tokio::time::timeout(w.opts.answer_within, async {
        while let Some(m) = answers.next().await {
            let Ok(m) = m else { continue };
            match EnrolAnswer::verify(&m.payload, w.controller, &to) {
                Ok(a) => return Some(Ok(a)),
                Err(mesh_core::enrolment::AnswerError::NotSigned) => return Some(Err(())),
                Err(e) => tracing::warn!(reason = %e, "ignoring a message on the enrolment inbox"),
            }
        }
        None
    })
    .await;
    match answered {
        Ok(Some(Ok(EnrolAnswer::Enrolled { .. }))) => {
            tracing::info!(node = %node, "the controller's signed answer admits this node; waiting for the broker to admit its key");
        }
        Ok(Some(Ok(EnrolAnswer::Refused { .. }))) => return Err(EnrolError::Refused),
        Ok(Some(Err(()))) => return Err(EnrolError::NotSignedByController { node: node.clone() }),
        // Closed (the spend removed the token's user) or silent: whether
        // the host is in is the broker's word, asked next.
        Ok(None) | Err(_) => {
            tracing::warn!(node = %node, "no answer on the enrolment connection; connecting with the host's own key (the controller key is checked on the first declaration)");
        }
    }
    drop(answers);
    bus.close().await;
    let host = host_bus_config(&config.url, node, w.keys.nkey_seed().clone(), w.pin);
    match connect_within(w, &host, w.opts.admit_within, w.opts.admit_within).await {
        Ok(admitted) => admitted.close().await,
        Err(EnrolError::Spent { .. }) => tracing::warn!(
            node = %node,
            within = %format!("{} s", w.opts.admit_within.as_secs()),
            "RabbitMQ has not admitted this host's key since the controller's answer: the composition admitting it is not live yet (the controller's log says why); the enrolment is kept and the host goes on trying"
        ),
        Err(e) => return Err(e),
    }
    let state = HostState::record(
        w.state_dir,
        node.clone(),
        w.token.bus_urls.clone(),
        w.token.cert_sha256.clone(),
        w.token.controller_key.clone(),
    )?;
    tracing::info!(node = %node, "enrolled");
    Ok(state)
}

/// Connects as `config`'s principal, retrying until `within`; a refusal
/// lasting `refused_within` is the token spent (or the host not admitted).
async fn connect_within(
    w: &With<'_>,
    config: &BusConfig,
    within: Duration,
    refused_within: Duration,
) -> Result<Bus, EnrolError> {
    let start = Instant::now();
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    loop {
        let e = match Bus::connect(config).await {
            Ok(b) => return Ok(b),
            Err(e) => e,
        };
        if let Some(p) = dial::pin_mismatch(&e) {
            return Err(EnrolError::CertificateMismatch {
                url: config.url.clone(),
                node: w.token.node.clone(),
                expected: p.expected.clone(),
                got: p.got.clone(),
            });
        }
        let refused = is_refusal(&e);
        let elapsed = start.elapsed();
        if refused && elapsed >= refused_within {
            return Err(EnrolError::Spent {
                node: w.token.node.clone(),
            });
        }
        if elapsed >= within {
            return Err(EnrolError::UnreachableAmqp {
                url: config.url.clone(),
                within,
                reason: dial::chain(&e),
            });
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

/// Whether the broker answered and turned the user away (403
/// ACCESS_REFUSED at login), rather than not answering.
fn is_refusal(e: &SeamConnectError) -> bool {
    dial::chain(e).contains("ACCESS_REFUSED")
}

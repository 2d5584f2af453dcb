//! Enrolment and heartbeats on the wire (DESIGN §6), and the controller's
//! plan for one enrolment request.
//!
//! Request on `mesh.control.enrol.<node>` (stored in CONTROL):
//! `{"node", "enrolment_key": "U…", "host_key": "U…", "xkey": "X…",
//! "reply": "_INBOX.enrol.<node>.…"}`. The reply address travels in the
//! payload: a JetStream delivery's reply field is its ack address. No secret
//! is in it: the server authenticated the sender by the token's key.
//!
//! Answer on the request's `reply`, signed by the controller's Ed25519 key
//! (the one the token names): the envelope `{"answer": "<base64 of the exact
//! bytes>", "signature": "<base64 Ed25519>"}` over `{"reply", "host_key",
//! "answer"}`, where the answer is `{"enrolled": true, "node", "principal",
//! "inbox_prefix", "consumer"}` or `{"enrolled": false, "message"}` and the
//! message is [`REFUSED`] whatever the reason (the log says which). The reply
//! address and the host key bind the answer to one request; the signature
//! proves the token's controller key is this mesh's, before the node records
//! anything (a token whose key was altered would otherwise enrol a node that
//! refuses every declaration).
//!
//! Heartbeat on `mesh.control.heartbeat.<node>` (core NATS): `{"node",
//! "sent_at"}` with unix milliseconds.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};
use serde::{Deserialize, Serialize};

use crate::authority::PrincipalKind;
use crate::jetstream::{self, ConsumerSpec};
use crate::names::Name;
use crate::subjects;
use crate::users_file::UserCredential;

/// Larger payloads are refused unread: a request is four short fields.
pub const MAX_REQUEST_BYTES: usize = 4096;
/// A heartbeat is two fields.
pub const MAX_HEARTBEAT_BYTES: usize = 512;

/// What a node is told for every refusal, whatever the reason: a caller
/// probing tokens learns nothing from the wording.
pub const REFUSED: &str = "enrolment refused: the token is spent, expired, or not this node's; issue a new one with `mesh node add <node>` on the controller";

/// A checked enrolment request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnrolRequest {
    pub node: Name,
    /// The token's enrolment public key (`U…`): the spend matches it.
    pub enrolment_key: String,
    /// The host's own NKey public key (`U…`), generated on the node.
    pub host_key: String,
    /// The host's X25519 sealing public key (`X…`).
    pub xkey: String,
    /// Where the answer goes: under `_INBOX.enrol.<node>.`.
    pub reply: String,
    /// Module keys the host made ahead (public halves): the first modules
    /// declared to it start with these, admitted before they start.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spare_keys: Vec<String>,
    /// The RabbitMQ password hash of each of those keys (DESIGN "the bus
    /// seam"), by public key: what a mesh on AMQP admits them with.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub amqp_hashes: BTreeMap<String, String>,
}

/// At most this many spare keys a host announces (it keeps about four).
pub const MAX_SPARE_KEYS: usize = 16;

/// Whether `keys` are spare keys a host may announce: at most
/// [`MAX_SPARE_KEYS`], each an NKey user public key, none twice.
pub fn spare_keys_ok(keys: &[String]) -> bool {
    let distinct: std::collections::BTreeSet<&String> = keys.iter().collect();
    keys.len() <= MAX_SPARE_KEYS
        && distinct.len() == keys.len()
        && keys.iter().all(|k| UserCredential::is_user_nkey(k))
}

/// The controller's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum EnrolAnswer {
    Enrolled {
        enrolled: True,
        node: Name,
        /// The host's principal (`host_<node>`).
        principal: String,
        /// The inbox prefix the host must connect with.
        inbox_prefix: String,
        /// The host's consumer on NODES.
        consumer: String,
    },
    Refused {
        enrolled: False,
        message: String,
    },
}

/// `true` on the wire; a type so that `{"enrolled": true}` and
/// `{"enrolled": false}` select the variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "bool", into = "bool")]
pub struct True;
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "bool", into = "bool")]
pub struct False;

impl TryFrom<bool> for True {
    type Error = &'static str;
    fn try_from(b: bool) -> Result<Self, Self::Error> {
        b.then_some(True).ok_or("expected true")
    }
}
impl From<True> for bool {
    fn from(_: True) -> bool {
        true
    }
}
impl TryFrom<bool> for False {
    type Error = &'static str;
    fn try_from(b: bool) -> Result<Self, Self::Error> {
        (!b).then_some(False).ok_or("expected false")
    }
}
impl From<False> for bool {
    fn from(_: False) -> bool {
        false
    }
}

impl EnrolAnswer {
    pub fn enrolled(node: &Name) -> EnrolAnswer {
        let principal = PrincipalKind::Host { node: node.clone() }.principal_name();
        EnrolAnswer::Enrolled {
            enrolled: True,
            node: node.clone(),
            inbox_prefix: subjects::inbox_prefix(&principal),
            principal,
            consumer: subjects::consumer::node(node),
        }
    }

    pub fn refused() -> EnrolAnswer {
        EnrolAnswer::Refused {
            enrolled: False,
            message: REFUSED.into(),
        }
    }

    pub fn to_json(&self) -> Vec<u8> {
        // Strings and booleans only: serialising cannot fail.
        serde_json::to_vec(self).expect("answer JSON")
    }

    /// Reads an answer's JSON; anything else is `None`.
    pub fn parse(payload: &[u8]) -> Option<EnrolAnswer> {
        if payload.len() > MAX_REQUEST_BYTES {
            return None;
        }
        serde_json::from_slice(payload).ok()
    }

    /// The signed envelope, ready to publish on the request's `reply`.
    pub fn sign(&self, to: &AnswerTo, key: &SigningKey) -> Vec<u8> {
        let bytes = serde_json::to_vec(&Signed {
            reply: to.reply.clone(),
            host_key: to.host_key.clone(),
            answer: self.clone(),
        })
        .expect("answer JSON");
        let signature = key.sign(&bytes);
        serde_json::to_vec(&AnswerEnvelope {
            answer: STANDARD.encode(&bytes),
            signature: STANDARD.encode(signature.to_bytes()),
        })
        .expect("envelope JSON")
    }

    /// Checks an envelope delivered on the enrolment inbox: the signature
    /// first, against the controller key the token names, then that it
    /// answers this request.
    pub fn verify(
        payload: &[u8],
        controller: &VerifyingKey,
        to: &AnswerTo,
    ) -> Result<EnrolAnswer, AnswerError> {
        if payload.len() > MAX_REQUEST_BYTES {
            return Err(AnswerError::NotAnAnswer);
        }
        let env: AnswerEnvelope =
            serde_json::from_slice(payload).map_err(|_| AnswerError::NotAnAnswer)?;
        let bytes = STANDARD
            .decode(env.answer)
            .map_err(|_| AnswerError::NotAnAnswer)?;
        let sig: [u8; 64] = STANDARD
            .decode(env.signature)
            .ok()
            .and_then(|s| s.try_into().ok())
            .ok_or(AnswerError::NotSigned)?;
        controller
            .verify(&bytes, &Signature::from_bytes(&sig))
            .map_err(|_| AnswerError::NotSigned)?;
        let signed: Signed =
            serde_json::from_slice(&bytes).map_err(|_| AnswerError::NotAnAnswer)?;
        if signed.reply != to.reply || signed.host_key != to.host_key {
            return Err(AnswerError::OtherRequest);
        }
        Ok(signed.answer)
    }
}

/// The request an answer is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AnswerTo {
    pub reply: String,
    pub host_key: String,
}

impl AnswerTo {
    pub fn of(req: &EnrolRequest) -> AnswerTo {
        AnswerTo {
            reply: req.reply.clone(),
            host_key: req.host_key.clone(),
        }
    }
}

/// What the controller signs.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Signed {
    reply: String,
    host_key: String,
    answer: EnrolAnswer,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerEnvelope {
    answer: String,
    signature: String,
}

/// Why a message on the enrolment inbox is not this request's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error("the message is not an enrolment answer")]
    NotAnAnswer,
    #[error("the answer is not signed by the controller the token names")]
    NotSigned,
    #[error("the answer is signed for another enrolment request")]
    OtherRequest,
}

/// Why a message on an enrolment or heartbeat subject is not one: it is
/// terminated (never redelivered) and logged with this reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadMessage {
    #[error("{subject} is not a per-node subject of this kind")]
    Subject { subject: String },
    #[error("the payload is {size} bytes, more than the {max} allowed")]
    TooLarge { size: usize, max: usize },
    #[error("the payload is not the expected JSON ({reason})")]
    Json { reason: String },
    #[error("the payload names node {payload}, the subject node {subject}")]
    OtherNode { subject: String, payload: String },
    #[error("{field} is not an NKey {kind} public key")]
    Key {
        field: &'static str,
        kind: &'static str,
    },
    #[error("the reply address is not under {prefix}. (or holds a wildcard or space)")]
    Reply { prefix: String },
}

/// The node a per-node subject names: `mesh.control.<kind>.<node>`.
fn subject_node(subject: &str, of: fn(&Name) -> String) -> Result<Name, BadMessage> {
    let bad = || BadMessage::Subject {
        subject: subject.to_string(),
    };
    let node = subject.rsplit('.').next().ok_or_else(bad)?;
    let name = Name::new(node).map_err(|_| bad())?;
    // Round-trip through the generator: the subject must be exactly the one
    // a publisher for this node would use.
    if of(&name) != subject {
        return Err(bad());
    }
    Ok(name)
}

fn json_reason(e: &serde_json::Error) -> BadMessage {
    // serde's message may quote the payload; keep the category and place.
    let kind = match e.classify() {
        serde_json::error::Category::Data => "a field is missing, unknown or of the wrong type",
        serde_json::error::Category::Io => "unreadable",
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof => "malformed",
    };
    BadMessage::Json {
        reason: format!("{kind} at line {} column {}", e.line(), e.column()),
    }
}

fn is_plain_subject(s: &str) -> bool {
    !s.is_empty()
        && !s.split('.').any(|t| t.is_empty() || t == "*" || t == ">")
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

impl EnrolRequest {
    /// Reads and checks a request delivered on `subject`.
    pub fn parse(subject: &str, payload: &[u8]) -> Result<EnrolRequest, BadMessage> {
        let node = subject_node(subject, subjects::enrol)?;
        if payload.len() > MAX_REQUEST_BYTES {
            return Err(BadMessage::TooLarge {
                size: payload.len(),
                max: MAX_REQUEST_BYTES,
            });
        }
        let req: EnrolRequest = serde_json::from_slice(payload).map_err(|e| json_reason(&e))?;
        if req.node != node {
            return Err(BadMessage::OtherNode {
                subject: node.to_string(),
                payload: req.node.to_string(),
            });
        }
        for (field, key) in [
            ("enrolment_key", &req.enrolment_key),
            ("host_key", &req.host_key),
        ] {
            if !UserCredential::is_user_nkey(key) {
                return Err(BadMessage::Key {
                    field,
                    kind: "user",
                });
            }
        }
        if nkeys::XKey::from_public_key(&req.xkey).is_err() {
            return Err(BadMessage::Key {
                field: "xkey",
                kind: "curve (X…)",
            });
        }
        if !spare_keys_ok(&req.spare_keys) || req.spare_keys.contains(&req.host_key) {
            return Err(BadMessage::Key {
                field: "spare_keys",
                kind: "distinct user (at most 16, none the host's own)",
            });
        }
        let keys: Vec<&str> = std::iter::once(req.host_key.as_str())
            .chain(req.spare_keys.iter().map(String::as_str))
            .collect();
        if crate::authority::amqp::check_announced(&req.amqp_hashes, &keys).is_err() {
            return Err(BadMessage::Key {
                field: "amqp_hashes",
                kind: "password hash, one for each announced",
            });
        }
        let prefix = subjects::enrol_inbox_prefix(&node);
        let under = req
            .reply
            .strip_prefix(prefix.as_str())
            .and_then(|rest| rest.strip_prefix('.'))
            .is_some_and(|rest| !rest.is_empty());
        if !under || !is_plain_subject(&req.reply) {
            return Err(BadMessage::Reply { prefix });
        }
        Ok(req)
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("request JSON")
    }
}

/// One step of handling an enrolment. The executor runs them in order; the
/// first that refuses ends the plan with [`EnrolPlan::refusal`] sent to the
/// reply address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "step", rename_all = "kebab-case")]
pub enum EnrolStep {
    /// One statement spends the node's unspent, unexpired token whose key
    /// the request names; only then are the host's keys recorded.
    SpendToken {
        node: Name,
        enrolment_key: String,
        host_key: String,
        xkey: String,
        /// Module keys the host made ahead.
        spare_keys: Vec<String>,
        /// Recorded before the spend: a hash admits nobody until its key
        /// is a credential, and the host's own is announced only here.
        #[serde(skip_serializing_if = "BTreeMap::is_empty")]
        amqp_hashes: BTreeMap<String, String>,
    },
    /// The node's consumer: a host has no right to create it.
    AssertConsumer { consumer: ConsumerSpec },
    /// Recompose the users file: the enrolment principal gone, the host in.
    Compose,
    /// Wait until that composition is live (its canary admitted).
    AwaitLive,
    /// Signed with the controller's key, bound to the request.
    Answer { to: AnswerTo, answer: EnrolAnswer },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EnrolPlan {
    pub steps: Vec<EnrolStep>,
    pub to: AnswerTo,
    /// Sent instead of the answer when a step refuses.
    pub refusal: EnrolAnswer,
}

/// The controller's plan for a checked request: spend first, record after,
/// the consumer before the host may bind it, and the answer before the
/// composition that admits the host: that reload closes the enrolment
/// connection (its principal is gone), and the signed answer must reach the
/// node first, so that it can check the token's controller key. The node
/// then connects as itself until the reload admits it.
pub fn plan(req: &EnrolRequest) -> EnrolPlan {
    EnrolPlan {
        steps: vec![
            EnrolStep::SpendToken {
                node: req.node.clone(),
                enrolment_key: req.enrolment_key.clone(),
                host_key: req.host_key.clone(),
                xkey: req.xkey.clone(),
                spare_keys: req.spare_keys.clone(),
                amqp_hashes: req.amqp_hashes.clone(),
            },
            EnrolStep::AssertConsumer {
                consumer: jetstream::node_consumer(&req.node),
            },
            EnrolStep::Answer {
                to: AnswerTo::of(req),
                answer: EnrolAnswer::enrolled(&req.node),
            },
            EnrolStep::Compose,
            EnrolStep::AwaitLive,
        ],
        to: AnswerTo::of(req),
        refusal: EnrolAnswer::refused(),
    }
}

/// A heartbeat as sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    pub node: Name,
    /// Unix milliseconds on the host's clock (for display; last seen is the
    /// controller's clock).
    pub sent_at: u64,
}

impl Heartbeat {
    pub fn parse(subject: &str, payload: &[u8]) -> Result<Heartbeat, BadMessage> {
        let node = subject_node(subject, subjects::heartbeat)?;
        if payload.len() > MAX_HEARTBEAT_BYTES {
            return Err(BadMessage::TooLarge {
                size: payload.len(),
                max: MAX_HEARTBEAT_BYTES,
            });
        }
        let hb: Heartbeat = serde_json::from_slice(payload).map_err(|e| json_reason(&e))?;
        if hb.node != node {
            return Err(BadMessage::OtherNode {
                subject: node.to_string(),
                payload: hb.node.to_string(),
            });
        }
        Ok(hb)
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("heartbeat JSON")
    }
}

#[cfg(test)]
#[path = "enrolment_tests.rs"]
mod tests;

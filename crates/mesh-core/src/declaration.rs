//! Declarations (DESIGN §6): what one node must run, composed from the
//! records, numbered, signed by the controller, and verified by the host
//! before it reads anything else.
//!
//! Wire (public interface): the envelope `{"declaration": "<base64 of the
//! exact bytes>", "signature": "<base64 Ed25519>"}`; the bytes are
//! `{"node", "sequence", "composed_at", "modules": [{"name", "version",
//! "run": {"command", "driver", "image": {"artifact"} | {"reference"}, "env", "stop_grace_s",
//! "sealed_env"}, "files": [{"name", "path", "content" | "sealed"}],
//! "secrets", "key", "artifacts": [{"name", "reference", "size", "sha256",
//! "nuid"}]}], "bus": {"urls"}, "sealed_by"}`. A sealed value is base64 of an XKey box from the
//! controller's XKey (`sealed_by`) to the node's.

mod apply;
mod compose;
pub mod seat_address;

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};
use serde::{Deserialize, Serialize};

use crate::names::Name;

pub use crate::artifact::ArtifactDecl;
pub use crate::manifest::Driver;
pub use apply::{ApplyStep, Running, plan_apply};
#[cfg(test)]
pub(crate) use compose::NoSecrets;
pub use compose::{
    ComposeError, Inputs, NodeModules, Secrets, compose_assigned, compose_modules,
    next_declaration, next_declaration_after,
};

/// A declaration larger than this is refused unread (a node's modules and
/// files; the users file for a broker holder is the largest part).
pub const MAX_ENVELOPE_BYTES: usize = 8 * 1024 * 1024;

/// How long a module has between SIGTERM and SIGKILL unless it says.
pub const DEFAULT_STOP_GRACE_S: u64 = 10;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Declaration {
    pub node: Name,
    /// Strictly increasing per node; a host refuses one not newer than the
    /// last it applied.
    pub sequence: u64,
    /// Unix milliseconds.
    pub composed_at: u64,
    pub modules: Vec<ModuleDecl>,
    /// Where the node reaches the broker: a host that sees them change
    /// follows the broker there, keeping its key (no enrolment again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bus: Option<BusDecl>,
    /// The controller's XKey (`X…`) the sealed values were sealed by: what
    /// the host opens them with, beside its own seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed_by: Option<String>,
}

/// The broker's addresses, as the records hold them (`mesh broker
/// set-address`). The certificate pin is not here: it stays the one the
/// node enrolled with, so a declaration can move the node to another
/// address of the same broker but never to another broker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BusDecl {
    pub urls: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModuleDecl {
    pub name: Name,
    /// Changes whenever what runs changes (the registered manifest's digest).
    pub version: String,
    pub run: RunDecl,
    pub files: Vec<FileDecl>,
    /// A keyed digest (HMAC under a controller key) of the plaintext of
    /// every value sealed here: a new value is a change (the module
    /// restarts), the same value sealed again with a fresh nonce is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<String>,
    /// The module's NKey public key as the mesh records it (one of the
    /// host's spare keys, given by the controller): the host starts the
    /// module with that key's seed, which the broker already admits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The artifacts its run names (`${artifact:..}`), of the version its
    /// assignment pinned: the host fetches each, checks size and SHA-256,
    /// and fills the placeholders with its cached file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<ArtifactDecl>,
    /// The version its assignment pinned, which the host reports running
    /// (a deployment waits for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<String>,
    /// The manifest's `[health]`, placeholders filled; none: healthy once
    /// it has run for the default `healthy_after`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthDecl>,
}

/// How the host checks a module (DESIGN "health and deploys").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthDecl {
    pub check: CheckDecl,
    pub interval_ms: u64,
    pub timeout_ms: u64,
    pub healthy_after_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum CheckDecl {
    /// `GET` this URL, answered 2xx.
    Http(String),
    /// Connect to this `HOST:PORT`.
    Tcp(String),
    /// Run this argv (in the container, for a container module): exit 0.
    Exec(Vec<String>),
    /// The module said ready through the SDK since it started (`"sdk"`).
    Sdk,
}

impl ModuleDecl {
    /// Whether `self` and `other` run the same thing: equal but for the
    /// ciphertext of sealed values, which the `secrets` digest stands for.
    pub fn same_as(&self, other: &ModuleDecl) -> bool {
        fn unsealed(m: &ModuleDecl) -> ModuleDecl {
            let mut m = m.clone();
            for v in m.run.sealed_env.values_mut() {
                v.clear();
            }
            for f in &mut m.files {
                if let FileBody::Sealed(s) = &mut f.body {
                    s.clear();
                }
            }
            m
        }
        unsealed(self) == unsealed(other)
    }
}

/// [`ModuleDecl::same_as`] over two module lists.
pub fn same_modules(a: &[ModuleDecl], b: &[ModuleDecl]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same_as(y))
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunDecl {
    /// What runs (process driver), or the arguments to the image's
    /// entrypoint (container driver). With `artifacts` named, each string
    /// is a template the host fills: `${artifact:NAME}` is the cached file,
    /// `$${` a literal `${`.
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "is_process")]
    pub driver: Driver,
    /// The container's image (container driver), as decided when the
    /// manifest was checked: the host loads or pulls it, deciding nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageDecl>,
    pub env: BTreeMap<String, String>,
    pub stop_grace_s: u64,
    /// Environment values holding a secret, each sealed whole to the node
    /// (base64 of an XKey box): only its host opens them, into the
    /// module's environment alone.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sealed_env: BTreeMap<String, String>,
}

/// A container module's image: `{"artifact": "NAME"}` (an OCI archive,
/// one of the module's `artifacts`, loaded from the host's cache) or
/// `{"reference": "name@sha256:HEX"}` (pinned by digest, pulled by the
/// node when missing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum ImageDecl {
    Artifact(Name),
    Reference(String),
}

fn is_process(d: &Driver) -> bool {
    *d == Driver::Process
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileDecl {
    pub name: Name,
    /// Relative to the module's directory; never absolute, never `..`.
    pub path: String,
    #[serde(flatten)]
    pub body: FileBody,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileBody {
    Content(String),
    /// Base64 of an XKey box sealed to the node by the controller.
    Sealed(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    pub declaration: String,
    pub signature: String,
}

impl Declaration {
    /// The exact bytes that are signed and published.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Strings, numbers and maps only: serialising cannot fail.
        serde_json::to_vec(self).expect("declaration JSON")
    }

    /// Signs with the controller's key: the envelope's JSON, ready to publish.
    pub fn sign(&self, key: &SigningKey) -> Vec<u8> {
        let bytes = self.to_bytes();
        let signature = key.sign(&bytes);
        serde_json::to_vec(&Envelope {
            declaration: STANDARD.encode(&bytes),
            signature: STANDARD.encode(signature.to_bytes()),
        })
        .expect("envelope JSON")
    }
}

/// The declaration a recorded envelope carries, unverified: for the
/// controller's own records (it signed them; a host is the one that
/// verifies). None when the body is not one.
pub fn recorded(body: &str) -> Option<Declaration> {
    let env: Envelope = serde_json::from_str(body).ok()?;
    let bytes = STANDARD.decode(env.declaration).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Why a host refuses what was delivered. None quotes the payload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the declaration is {size} bytes, more than the {max} allowed")]
    TooLarge { size: usize, max: usize },
    #[error("the payload is not a declaration envelope")]
    Envelope,
    #[error(
        "the signature is not the controller's: the declaration was altered or signed by another key"
    )]
    Signature,
    #[error("the signed bytes are not a declaration ({reason})")]
    Body { reason: String },
    #[error("the declaration is for node {found}, not this node ({expected})")]
    OtherNode { expected: String, found: String },
    #[error("sequence {sequence} is not newer than {applied}, the last applied")]
    Stale { sequence: u64, applied: u64 },
}

/// Checks the signature over the exact bytes first and reads the
/// declaration only then; then that it is this node's and newer than
/// `applied` (the last sequence this host applied).
pub fn verify(
    payload: &[u8],
    controller: &VerifyingKey,
    node: &Name,
    applied: Option<u64>,
) -> Result<Declaration, VerifyError> {
    if payload.len() > MAX_ENVELOPE_BYTES {
        return Err(VerifyError::TooLarge {
            size: payload.len(),
            max: MAX_ENVELOPE_BYTES,
        });
    }
    let env: Envelope = serde_json::from_slice(payload).map_err(|_| VerifyError::Envelope)?;
    let bytes = STANDARD
        .decode(env.declaration)
        .map_err(|_| VerifyError::Envelope)?;
    let sig: [u8; 64] = STANDARD
        .decode(env.signature)
        .ok()
        .and_then(|s| s.try_into().ok())
        .ok_or(VerifyError::Signature)?;
    controller
        .verify(&bytes, &Signature::from_bytes(&sig))
        .map_err(|_| VerifyError::Signature)?;
    let d: Declaration = serde_json::from_slice(&bytes).map_err(|e| VerifyError::Body {
        reason: format!("line {} column {}", e.line(), e.column()),
    })?;
    if d.node != *node {
        return Err(VerifyError::OtherNode {
            expected: node.to_string(),
            found: d.node.to_string(),
        });
    }
    if let Some(applied) = applied
        && d.sequence <= applied
    {
        return Err(VerifyError::Stale {
            sequence: d.sequence,
            applied,
        });
    }
    Ok(d)
}

/// The controller's public signing key from the lowercase hex a token and a
/// host's record carry.
pub fn verifying_key(hex_key: &str) -> Option<VerifyingKey> {
    let bytes: [u8; 32] = hex::decode(hex_key).ok()?.try_into().ok()?;
    VerifyingKey::from_bytes(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    fn key(b: u8) -> SigningKey {
        SigningKey::from_bytes(&[b; 32])
    }

    #[test]
    fn a_recorded_envelope_is_read_back_and_anything_else_is_none() {
        let d = decl("n1", 4);
        let body = String::from_utf8(d.sign(&key(1))).unwrap();
        assert_eq!(recorded(&body), Some(d));
        assert_eq!(recorded("{}"), None);
        assert_eq!(recorded("not json"), None);
    }

    fn decl(node: &str, sequence: u64) -> Declaration {
        Declaration {
            node: n(node),
            sequence,
            composed_at: 1,
            modules: vec![ModuleDecl {
                name: n("echo"),
                version: "sha256:ab".into(),
                run: RunDecl {
                    command: vec!["mesh-echo".into()],
                    env: BTreeMap::from([("A".into(), "1".into())]),
                    stop_grace_s: 5,
                    sealed_env: BTreeMap::new(),
                    driver: Driver::Process,
                    image: None,
                },
                files: vec![FileDecl {
                    name: n("conf"),
                    path: "conf.toml".into(),
                    body: FileBody::Content("x = 1".into()),
                }],
                secrets: None,
                key: None,
                artifacts: Vec::new(),
                pinned: None,
                health: None,
            }],
            bus: None,
            sealed_by: None,
        }
    }

    #[test]
    fn a_signed_declaration_verifies_and_reads_back() {
        let k = key(1);
        let d = decl("n1", 3);
        let wire = d.sign(&k);
        let got = verify(&wire, &k.verifying_key(), &n("n1"), Some(2)).unwrap();
        assert_eq!(got, d);
        let v: serde_json::Value = serde_json::from_slice(&wire).unwrap();
        assert!(v["declaration"].is_string() && v["signature"].is_string());
        let hex_key = hex::encode(k.verifying_key().to_bytes());
        assert_eq!(verifying_key(&hex_key), Some(k.verifying_key()));
        assert_eq!(verifying_key("zz"), None);
    }

    #[test]
    fn a_flipped_byte_another_key_another_node_and_a_replay_are_refused() {
        let k = key(1);
        let wire = decl("n1", 3).sign(&k);
        // One byte of the signed bytes flipped, re-encoded.
        let env: Envelope = serde_json::from_slice(&wire).unwrap();
        let mut bytes = STANDARD.decode(&env.declaration).unwrap();
        let i = bytes.len() / 2;
        bytes[i] ^= 0x01;
        let flipped = serde_json::to_vec(&Envelope {
            declaration: STANDARD.encode(&bytes),
            signature: env.signature.clone(),
        })
        .unwrap();
        assert_eq!(
            verify(&flipped, &k.verifying_key(), &n("n1"), None),
            Err(VerifyError::Signature)
        );
        let other = decl("n1", 3).sign(&key(2));
        assert_eq!(
            verify(&other, &k.verifying_key(), &n("n1"), None),
            Err(VerifyError::Signature)
        );
        assert_eq!(
            verify(&wire, &k.verifying_key(), &n("n2"), None),
            Err(VerifyError::OtherNode {
                expected: "n2".into(),
                found: "n1".into()
            })
        );
        for applied in [3, 4] {
            assert_eq!(
                verify(&wire, &k.verifying_key(), &n("n1"), Some(applied)),
                Err(VerifyError::Stale {
                    sequence: 3,
                    applied
                })
            );
        }
        assert_eq!(
            verify(b"{}", &k.verifying_key(), &n("n1"), None),
            Err(VerifyError::Envelope)
        );
        let big = vec![b' '; MAX_ENVELOPE_BYTES + 1];
        assert!(matches!(
            verify(&big, &k.verifying_key(), &n("n1"), None),
            Err(VerifyError::TooLarge { .. })
        ));
    }

    #[test]
    fn a_large_declaration_is_read_up_to_the_byte_of_the_bound() {
        let k = key(1);
        let mut d = decl("n1", 1);
        // 2 MiB of file content: a broker holder's users file can be large.
        d.modules[0].files[0].body = FileBody::Content("x".repeat(2 << 20));
        let mut wire = d.sign(&k);
        assert!(verify(&wire, &k.verifying_key(), &n("n1"), None).is_ok());
        // Padded (trailing whitespace is still JSON) to exactly the bound.
        wire.resize(MAX_ENVELOPE_BYTES, b' ');
        assert!(verify(&wire, &k.verifying_key(), &n("n1"), None).is_ok());
        wire.push(b' ');
        assert!(matches!(
            verify(&wire, &k.verifying_key(), &n("n1"), None),
            Err(VerifyError::TooLarge { .. })
        ));
    }

    #[test]
    fn the_body_is_read_only_after_the_signature() {
        // Signed garbage: a valid signature over bytes that are no
        // declaration is refused as a body, not trusted.
        let k = key(1);
        let bytes = b"not json";
        let wire = serde_json::to_vec(&Envelope {
            declaration: STANDARD.encode(bytes),
            signature: STANDARD.encode(k.sign(bytes).to_bytes()),
        })
        .unwrap();
        assert!(matches!(
            verify(&wire, &k.verifying_key(), &n("n1"), None),
            Err(VerifyError::Body { .. })
        ));
    }
}

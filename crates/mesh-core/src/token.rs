//! The one-time enrolment token (`mesh node add N` prints it, `mesh host
//! --token` reads it): everything a new node needs to reach the bus and trust
//! what answers, in one printable string an operator can paste.
//!
//! Format: `mesh2.`, then base64url without padding of a JSON object, then
//! `.` and a checksum: 8 lowercase hex digits of the CRC-32 (IEEE) of
//! everything before that last dot (`mesh2.<body>`). A CRC-32 catches every
//! change of one character (and every burst up to 32 bits), so a mistyped
//! or damaged token is refused on the node before anything is sent. It is
//! not a defence against a deliberate edit: the controller's signed
//! enrolment answer is (see `enrolment`).
//!
//! The JSON object:
//!
//! | field | meaning |
//! |---|---|
//! | `bus_urls` | `tls://` (NATS) or `amqps://` (RabbitMQ) addresses of the broker, all of one bus (at least one; the pin is only checked over TLS) |
//! | `cert_sha256` | lowercase hex SHA-256 of the broker certificate's DER bytes (64 hex) |
//! | `controller_key` | the controller's Ed25519 signing public key, **lowercase hex** of its 32 bytes (64 hex) |
//! | `node` | the node's [`Name`] |
//! | `enrolment_seed` | the one-time NKey user seed (`SU…`) the node connects with |
//! | `expires_at` | unix time in milliseconds after which the token is spent by time |
//!
//! `mesh1.` tokens (no checksum) are refused, asking for a new one: a token
//! lives an hour by default, and one whose controller key was damaged used to
//! enrol a node that then refused every declaration.
//!
//! The string carries a seed, so [`Token::encode`] returns a [`Secret`] and no
//! [`TokenError`] ever repeats any part of the input: the operator pasted a
//! credential, and an error line is where it would otherwise leak.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use crate::names::Name;
use crate::secret::Secret;

/// What every token starts with; the digit is the format version.
pub const PREFIX: &str = "mesh2.";
/// The format before the checksum, refused by name.
const OLD_PREFIX: &str = "mesh1.";
/// Hex digits of the checksum after the body's last `.`.
const CHECKSUM_LEN: usize = 8;

mod person;
pub use person::{PERSON_PREFIX, PersonToken, PersonTokenError};

/// A decoded, checked enrolment token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub bus_urls: Vec<String>,
    /// Lowercase hex SHA-256 of the broker certificate's DER bytes.
    pub cert_sha256: String,
    /// Lowercase hex of the controller's Ed25519 signing public key (32 bytes).
    pub controller_key: String,
    pub node: Name,
    /// NKey user seed (`SU…`).
    pub enrolment_seed: Secret,
    /// Unix milliseconds.
    pub expires_at: u64,
}

/// The JSON on the wire. Unknown fields are refused so that a token from a
/// newer format is not silently half-read.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    bus_urls: Vec<String>,
    cert_sha256: String,
    controller_key: String,
    node: String,
    enrolment_seed: String,
    expires_at: u64,
}

const REISSUE: &str = "issue a new one with `mesh node add <node>`";

/// Why a string is not a usable token. No variant holds any part of the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error(
        "this is not a mesh token: a token is one line starting with `mesh2.` (as printed by `mesh node add <node>`); paste it whole"
    )]
    WrongPrefix,
    #[error(
        "this token is of the older `mesh1.` format, which carries no checksum and is no longer read; {REISSUE}"
    )]
    OldFormat,
    #[error(
        "the token is damaged: it does not end with `.` and its {CHECKSUM_LEN}-digit checksum (was it cut?); paste it whole or {REISSUE}"
    )]
    NoChecksum,
    #[error(
        "the token is damaged: its checksum does not match its content (a character was changed, dropped or added); paste it again exactly as printed, or {REISSUE}"
    )]
    BadChecksum,
    #[error(
        "the token is damaged: the text after `mesh2.` is not base64url (was it cut or wrapped?); paste it whole or {REISSUE}"
    )]
    BadBase64,
    #[error("the token is damaged: its content is not a token's JSON ({reason}); {REISSUE}")]
    BadJson { reason: String },
    #[error("the token names no bus address; {REISSUE}")]
    NoBusUrls,
    /// 1-based position among the token's addresses; the address itself is
    /// not repeated (no part of the input is).
    #[error(
        "the token's bus address {position} is not a tls:// (NATS) or amqps:// (RabbitMQ) address of the bus its first one names (the certificate pin holds only over TLS, and a mesh runs on one bus); {REISSUE}"
    )]
    NotTls { position: usize },
    #[error(
        "the token's node is not a valid name (lowercase letters, digits and '-', at most 64); {REISSUE}"
    )]
    BadNode,
    #[error("the token's certificate fingerprint is not a SHA-256 (64 hex characters); {REISSUE}")]
    BadFingerprint,
    #[error(
        "the token's controller key is not an Ed25519 public key (64 hex characters); {REISSUE}"
    )]
    BadControllerKey,
    #[error("the token's enrolment secret is not an NKey user seed (`SU…`); {REISSUE}")]
    BadSeed,
    #[error("the token expired at {expires_at} (unix ms); {REISSUE}")]
    Expired { expires_at: u64 },
}

impl Token {
    /// The printable token. The whole string is a secret: it carries the seed.
    pub fn encode(&self) -> Secret {
        let wire = Wire {
            bus_urls: self.bus_urls.clone(),
            cert_sha256: self.cert_sha256.clone(),
            controller_key: self.controller_key.clone(),
            node: self.node.as_str().to_string(),
            enrolment_seed: self.enrolment_seed.expose().to_string(),
            expires_at: self.expires_at,
        };
        // Serialising a struct of strings and a number cannot fail.
        let json = serde_json::to_vec(&wire).expect("token JSON");
        Secret::new(sealed(&format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(json))))
    }

    /// Reads a pasted token. Whitespace anywhere is dropped first (base64url
    /// has none): a terminal or mail client that wrapped the line, or a
    /// trailing newline, must not make a good token unreadable.
    pub fn decode(text: &str) -> Result<Token, TokenError> {
        let compact: String = text.split_whitespace().collect();
        if compact.starts_with(OLD_PREFIX) {
            return Err(TokenError::OldFormat);
        }
        if !compact.starts_with(PREFIX) {
            return Err(TokenError::WrongPrefix);
        }
        let (signed, sum) = compact
            .rsplit_once('.')
            .filter(|(signed, sum)| signed.len() >= PREFIX.len() && sum.len() == CHECKSUM_LEN)
            .ok_or(TokenError::NoChecksum)?;
        // Lowercase only, as printed: one spelling per token.
        if checksum(signed) != sum {
            return Err(TokenError::BadChecksum);
        }
        let body = &signed[PREFIX.len()..];
        let json = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| TokenError::BadBase64)?;
        let wire: Wire = serde_json::from_slice(&json).map_err(json_reason)?;
        if wire.bus_urls.is_empty() {
            return Err(TokenError::NoBusUrls);
        }
        // Refused here rather than at connect, where it would look like a
        // network problem on a node that has not yet said anything.
        if let Some(i) = not_one_bus(&wire.bus_urls) {
            return Err(TokenError::NotTls { position: i + 1 });
        }
        // The name error would repeat the value, which may be anything pasted.
        let node = Name::new(wire.node).map_err(|_| TokenError::BadNode)?;
        let cert_sha256 = hex32(&wire.cert_sha256).ok_or(TokenError::BadFingerprint)?;
        let controller_key = hex32(&wire.controller_key)
            .filter(|k| crate::declaration::verifying_key(k).is_some())
            .ok_or(TokenError::BadControllerKey)?;
        check_user_seed(&wire.enrolment_seed)?;
        Ok(Token {
            bus_urls: wire.bus_urls,
            cert_sha256,
            controller_key,
            node,
            enrolment_seed: Secret::new(wire.enrolment_seed),
            expires_at: wire.expires_at,
        })
    }

    /// Whether the token is past its expiry at `now_ms` (unix ms). The expiry
    /// instant itself counts as expired, so "valid for 0 ms" is never valid.
    pub fn is_expired(&self, now_ms: u64) -> bool {
        now_ms >= self.expires_at
    }

    /// [`Self::is_expired`] as a refusal.
    pub fn ensure_fresh(&self, now_ms: u64) -> Result<(), TokenError> {
        if self.is_expired(now_ms) {
            return Err(TokenError::Expired {
                expires_at: self.expires_at,
            });
        }
        Ok(())
    }
}

/// `text` followed by `.` and its checksum: the one place the format's
/// trailer is written.
fn sealed(text: &str) -> String {
    format!("{text}.{}", checksum(text))
}

/// 8 lowercase hex digits of the CRC-32 (IEEE 802.3, reflected, as zlib's)
/// of `text`'s bytes.
fn checksum(text: &str) -> String {
    let mut crc: u32 = !0;
    for &b in text.as_bytes() {
        crc ^= u32::from(b);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0xEDB8_8320 & mask);
        }
    }
    format!("{:08x}", !crc)
}

/// serde_json's own text for a type mismatch quotes the value
/// (`invalid type: string "SU…"`), which may be the seed in the wrong field:
/// keep only messages that name fields, never values.
fn json_reason(e: serde_json::Error) -> TokenError {
    let msg = e.to_string();
    let reason = if matches!(
        e.classify(),
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof
    ) {
        format!("malformed JSON at line {} column {}", e.line(), e.column())
    } else if ["missing field", "unknown field", "duplicate field"]
        .iter()
        .any(|p| msg.starts_with(p))
    {
        // Cut serde's "expected one of …" list and position; the field is enough.
        msg.split(", expected")
            .next()
            .unwrap_or(&msg)
            .split(" at line")
            .next()
            .unwrap_or(&msg)
            .to_string()
    } else {
        format!(
            "a field holds a value of the wrong type (line {} column {})",
            e.line(),
            e.column()
        )
    };
    TokenError::BadJson { reason }
}

/// The first of `urls` that is no TLS address of a bus (`tls://` NATS,
/// `amqps://` RabbitMQ, no credentials) or not of the first's bus.
fn not_one_bus(urls: &[String]) -> Option<usize> {
    let first = urls
        .first()
        .and_then(|u| crate::bus::BusKind::of_address(u));
    urls.iter()
        .position(|u| first.is_none() || crate::bus::BusKind::of_address(u) != first)
}

/// Lowercase hex of exactly 32 bytes, or `None`.
fn hex32(s: &str) -> Option<String> {
    let bytes = hex::decode(s).ok()?;
    (bytes.len() == 32).then(|| hex::encode(bytes))
}

/// A user seed, decoded through its checksum: a seed with one character
/// changed would otherwise reach the broker and fail there as "authorization
/// violation", far from the cause.
fn check_user_seed(seed: &str) -> Result<(), TokenError> {
    if !seed.starts_with("SU") {
        return Err(TokenError::BadSeed);
    }
    let kp = nkeys::KeyPair::from_seed(seed).map_err(|_| TokenError::BadSeed)?;
    if !matches!(kp.key_pair_type(), nkeys::KeyPairType::User) {
        return Err(TokenError::BadSeed);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed() -> String {
        nkeys::KeyPair::new_user().seed().unwrap()
    }

    fn controller_key() -> String {
        let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
        hex::encode(key.verifying_key().to_bytes())
    }

    fn token(seed: &str) -> Token {
        Token {
            bus_urls: vec![
                "tls://10.0.0.1:4222".into(),
                "tls://ctl.example:4222".into(),
            ],
            cert_sha256: "ab".repeat(32),
            controller_key: controller_key(),
            node: Name::new("n1").unwrap(),
            enrolment_seed: Secret::new(seed),
            expires_at: 1_800_000_000_000,
        }
    }

    fn wire(seed: &str) -> serde_json::Value {
        serde_json::json!({
            "bus_urls": ["tls://10.0.0.1:4222"],
            "cert_sha256": "ab".repeat(32),
            "controller_key": controller_key(),
            "node": "n1",
            "enrolment_seed": seed,
            "expires_at": 1_800_000_000_000u64,
        })
    }

    fn encode_value(v: &serde_json::Value) -> String {
        sealed(&format!(
            "{PREFIX}{}",
            URL_SAFE_NO_PAD.encode(v.to_string())
        ))
    }

    /// The text between the prefix and the checksum.
    fn body_of(text: &str) -> &str {
        &text[PREFIX.len()..text.len() - CHECKSUM_LEN - 1]
    }

    /// Decodes, expecting refusal; asserts the message holds no part of the seed.
    fn refused(text: &str, seed: &str) -> TokenError {
        let err = Token::decode(text).unwrap_err();
        let msg = err.to_string();
        assert!(!msg.contains(seed), "{msg}");
        // A seed's body (past "SU") must not leak either.
        assert!(!msg.contains(&seed[2..12]), "{msg}");
        assert!(!format!("{err:?}").contains(seed), "{err:?}");
        err
    }

    #[test]
    fn round_trip() {
        let s = seed();
        let t = token(&s);
        let text = t.encode();
        assert!(text.expose().starts_with("mesh2."));
        assert!(!text.expose().contains('='), "no padding");
        let (signed, sum) = text.expose().rsplit_once('.').unwrap();
        assert_eq!(sum, checksum(signed));
        assert!(
            body_of(text.expose())
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
            "base64url alphabet only"
        );
        assert_eq!(Token::decode(text.expose()).unwrap(), t);
    }

    #[test]
    fn debug_of_token_and_encoding_hides_the_seed() {
        let s = seed();
        let t = token(&s);
        assert!(!format!("{t:?}").contains(&s));
        assert!(!format!("{:?}", t.encode()).contains("mesh2."));
    }

    #[test]
    fn surrounding_and_wrapping_whitespace_is_tolerated() {
        let s = seed();
        let t = token(&s);
        let text = t.encode().into_string();
        let (a, b) = text.split_at(40);
        for pasted in [
            format!("  {text}\n"),
            format!("\r\n\t{text}\r\n"),
            format!("{a}\n{b}"),
        ] {
            assert_eq!(Token::decode(&pasted).unwrap(), t, "{pasted:?}");
        }
    }

    #[test]
    fn wrong_prefix_is_refused_saying_what_a_token_looks_like() {
        let s = seed();
        let good = token(&s).encode().into_string();
        let rest = &good[PREFIX.len()..];
        for text in [
            rest.to_string(),
            format!("mesh3.{rest}"),
            format!("MESH2.{rest}"),
            s.clone(),
            String::new(),
        ] {
            let err = refused(&text, &s);
            assert_eq!(err, TokenError::WrongPrefix, "{text:?}");
            assert!(err.to_string().contains("starting with `mesh2.`"));
        }
    }

    #[test]
    fn an_old_format_token_is_refused_asking_for_a_new_one() {
        let s = seed();
        let v = wire(&s);
        let old = format!("mesh1.{}", URL_SAFE_NO_PAD.encode(v.to_string()));
        let err = refused(&old, &s);
        assert_eq!(err, TokenError::OldFormat);
        assert!(err.to_string().contains("mesh node add"), "{err}");
    }

    #[test]
    fn the_checksum_is_crc32_ieee() {
        // The standard check value, and the empty string.
        assert_eq!(checksum("123456789"), "cbf43926");
        assert_eq!(checksum(""), "00000000");
        assert_eq!(checksum("a"), "e8b7be43");
    }

    #[test]
    fn a_token_without_its_checksum_or_with_another_is_refused() {
        let s = seed();
        let good = token(&s).encode().into_string();
        let (signed, sum) = good.rsplit_once('.').unwrap();
        let upper = format!("{signed}.{}", sum.to_uppercase());
        let flipped = format!(
            "{signed}.{}",
            if sum == "00000000" {
                "00000001"
            } else {
                "00000000"
            }
        );
        for (text, want) in [
            (signed.to_string(), TokenError::NoChecksum),
            (format!("{signed}.{}", &sum[1..]), TokenError::NoChecksum),
            (format!("{signed}.{sum}0"), TokenError::NoChecksum),
            (format!("{PREFIX}.{sum}"), TokenError::BadChecksum),
            (flipped, TokenError::BadChecksum),
            (format!("{signed}x.{sum}"), TokenError::BadChecksum),
        ] {
            assert_eq!(refused(&text, &s), want, "{text:?}");
        }
        if upper != good {
            assert_eq!(refused(&upper, &s), TokenError::BadChecksum);
        }
        // The only dot the prefix's: no checksum, even one that would match.
        assert_eq!(refused(&sealed("mesh2"), &s), TokenError::NoChecksum);
        assert_eq!(refused("mesh2.00000000", &s), TokenError::NoChecksum);
        // The checksum is over the prefix too.
        assert_eq!(refused("mesh2..00000000", &s), TokenError::BadChecksum);
        assert_eq!(
            refused(&sealed("mesh2."), &s),
            TokenError::BadJson {
                reason: "malformed JSON at line 1 column 0".into()
            }
        );
    }

    #[test]
    fn bad_base64_is_refused() {
        let s = seed();
        let good = token(&s).encode().into_string();
        // Standard-alphabet and padded forms are not what we print.
        for text in [
            sealed(&format!("{}=", &good[..good.len() - CHECKSUM_LEN - 1])),
            sealed(&format!(
                "{}+/{}",
                &good[..20],
                &good[20..good.len() - CHECKSUM_LEN - 1]
            )),
            sealed(&format!("{PREFIX}{s}!")),
        ] {
            assert_eq!(refused(&text, &s), TokenError::BadBase64, "{text:?}");
        }
    }

    #[test]
    fn bad_json_is_refused_without_echoing_values() {
        let s = seed();
        let not_json = sealed(&format!(
            "{PREFIX}{}",
            URL_SAFE_NO_PAD.encode(format!("{{{s}"))
        ));
        assert!(matches!(refused(&not_json, &s), TokenError::BadJson { .. }));

        // The seed in a number's place: serde would quote it.
        let mut v = wire(&s);
        v["expires_at"] = serde_json::Value::String(s.clone());
        let err = refused(&encode_value(&v), &s);
        assert!(matches!(err, TokenError::BadJson { .. }), "{err}");

        let mut v = wire(&s);
        v["extra"] = serde_json::Value::String(s.clone());
        let err = refused(&encode_value(&v), &s);
        assert!(err.to_string().contains("unknown field `extra`"), "{err}");

        let mut v = wire(&s);
        v.as_object_mut().unwrap().remove("node");
        let err = refused(&encode_value(&v), &s);
        assert!(err.to_string().contains("missing field `node`"), "{err}");
    }

    #[test]
    fn no_bus_url_is_refused() {
        let s = seed();
        let mut v = wire(&s);
        v["bus_urls"] = serde_json::json!([]);
        assert_eq!(refused(&encode_value(&v), &s), TokenError::NoBusUrls);
    }

    #[test]
    fn a_token_of_a_mesh_on_rabbitmq_names_amqps_addresses() {
        let s = seed();
        let mut v = wire(&s);
        v["bus_urls"] = serde_json::json!(["amqps://10.0.0.1:5671", "amqps://ctl.example:5671"]);
        let t = Token::decode(&encode_value(&v)).unwrap();
        assert_eq!(t.bus_urls[1], "amqps://ctl.example:5671");
    }

    #[test]
    fn a_bus_address_that_is_not_tls_is_refused_by_position() {
        let s = seed();
        for (urls, position) in [
            (serde_json::json!(["nats://10.0.0.1:4222"]), 1),
            (
                serde_json::json!(["tls://10.0.0.1:4222", "10.0.0.2:4222"]),
                2,
            ),
            (serde_json::json!(["tls://"]), 1),
            (serde_json::json!([format!("tls://u:{s}@10.0.0.1:4222")]), 1),
            (serde_json::json!(["amqp://10.0.0.1:5672"]), 1),
            // A mesh runs on one bus.
            (
                serde_json::json!(["tls://10.0.0.1:4222", "amqps://10.0.0.1:5671"]),
                2,
            ),
            (
                serde_json::json!(["amqps://10.0.0.1:5671", "tls://10.0.0.1:4222"]),
                2,
            ),
        ] {
            let mut v = wire(&s);
            v["bus_urls"] = urls;
            assert_eq!(
                refused(&encode_value(&v), &s),
                TokenError::NotTls { position }
            );
        }
    }

    #[test]
    fn bad_node_is_refused_without_echoing_it() {
        let s = seed();
        for node in ["N1", "a.b", "", &s] {
            let mut v = wire(&s);
            v["node"] = serde_json::Value::String(node.to_string());
            assert_eq!(refused(&encode_value(&v), &s), TokenError::BadNode);
        }
    }

    #[test]
    fn bad_fingerprint_is_refused() {
        let s = seed();
        for fp in [
            "ab".repeat(31),
            "ab".repeat(33),
            "zz".repeat(32),
            String::new(),
        ] {
            let mut v = wire(&s);
            v["cert_sha256"] = serde_json::Value::String(fp);
            assert_eq!(refused(&encode_value(&v), &s), TokenError::BadFingerprint);
        }
        // Uppercase hex is a fingerprint all the same, kept in one spelling.
        let mut v = wire(&s);
        v["cert_sha256"] = serde_json::Value::String("AB".repeat(32));
        let t = Token::decode(&encode_value(&v)).unwrap();
        assert_eq!(t.cert_sha256, "ab".repeat(32));
    }

    #[test]
    fn bad_controller_key_is_refused() {
        let s = seed();
        // Too short, and 32 bytes that are no Ed25519 point.
        let not_a_point = (0..=255u8)
            .map(|b| [b; 32])
            .find(|k| ed25519_dalek::VerifyingKey::from_bytes(k).is_err())
            .map(hex::encode)
            .unwrap();
        for key in ["0c".repeat(16), not_a_point] {
            let mut v = wire(&s);
            v["controller_key"] = serde_json::Value::String(key);
            assert_eq!(refused(&encode_value(&v), &s), TokenError::BadControllerKey);
        }
    }

    #[test]
    fn bad_seed_is_refused_without_echoing_it() {
        let user = seed();
        let account = nkeys::KeyPair::new_account().seed().unwrap();
        let public = nkeys::KeyPair::new_user().public_key();
        // One character changed: the checksum catches it.
        let mut damaged = user.clone().into_bytes();
        damaged[10] = if damaged[10] == b'A' { b'B' } else { b'A' };
        let damaged = String::from_utf8(damaged).unwrap();
        for bad in [account, public, damaged, "SU".to_string(), String::new()] {
            let mut v = wire(&bad);
            v["enrolment_seed"] = serde_json::Value::String(bad.clone());
            let err = Token::decode(&encode_value(&v)).unwrap_err();
            assert_eq!(err, TokenError::BadSeed, "{bad}");
            if bad.len() > 12 {
                assert!(!err.to_string().contains(&bad[2..12]), "{err}");
            }
        }
    }

    #[test]
    fn expiry_is_a_pure_comparison() {
        let t = token(&seed());
        assert!(!t.is_expired(t.expires_at - 1));
        assert!(t.is_expired(t.expires_at));
        assert!(t.is_expired(t.expires_at + 1));
        assert_eq!(t.ensure_fresh(t.expires_at - 1), Ok(()));
        assert_eq!(
            t.ensure_fresh(t.expires_at),
            Err(TokenError::Expired {
                expires_at: t.expires_at
            })
        );
    }
}

//! A person's one-time login token (`mesh person add NAME --role ROLE`
//! without a key prints it, `mesh login` reads it on their machine):
//! where the bus is, the broker certificate's pin, the person, and the
//! seed of their one-time login principal. Format as the node's token,
//! with its own prefix: `meshp1.`, base64url of a JSON object, `.` and a
//! CRC-32; no error repeats any part of the input.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use super::{CHECKSUM_LEN, TokenError, check_user_seed, checksum, hex32, not_one_bus, sealed};
use crate::names::Name;
use crate::secret::Secret;

/// What every person token starts with.
pub const PERSON_PREFIX: &str = "meshp1.";

const REISSUE: &str = "ask an admin for a new one (`mesh person add <name> --role <role>`)";

/// A decoded, checked person token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersonToken {
    pub bus_urls: Vec<String>,
    /// Lowercase hex SHA-256 of the broker certificate's DER bytes.
    pub cert_sha256: String,
    pub person: Name,
    /// The login principal's NKey user seed (`SU…`).
    pub login_seed: Secret,
    /// Unix milliseconds.
    pub expires_at: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    bus_urls: Vec<String>,
    cert_sha256: String,
    person: String,
    login_seed: String,
    expires_at: u64,
}

/// Why a string is not a usable person token. No variant holds any part of
/// the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PersonTokenError {
    #[error(
        "this is not a login token: one starts with `meshp1.` (as `mesh person add` prints it); paste it whole"
    )]
    WrongPrefix,
    #[error("the login token is damaged ({0}); paste it again exactly as printed, or {REISSUE}")]
    Damaged(&'static str),
    #[error("the login token's content is not a login token's ({0}); {REISSUE}")]
    BadContent(String),
    #[error("the login token expired at {expires_at} (unix ms); {REISSUE}")]
    Expired { expires_at: u64 },
}

impl PersonToken {
    /// The printable token: a secret, as it carries the seed.
    pub fn encode(&self) -> Secret {
        let wire = Wire {
            bus_urls: self.bus_urls.clone(),
            cert_sha256: self.cert_sha256.clone(),
            person: self.person.as_str().to_string(),
            login_seed: self.login_seed.expose().to_string(),
            expires_at: self.expires_at,
        };
        // Serialising a struct of strings and a number cannot fail.
        let json = serde_json::to_vec(&wire).expect("token JSON");
        Secret::new(sealed(&format!(
            "{PERSON_PREFIX}{}",
            URL_SAFE_NO_PAD.encode(json)
        )))
    }

    /// Reads a pasted token (whitespace anywhere dropped first).
    pub fn decode(text: &str) -> Result<PersonToken, PersonTokenError> {
        let compact: String = text.split_whitespace().collect();
        if !compact.starts_with(PERSON_PREFIX) {
            return Err(PersonTokenError::WrongPrefix);
        }
        let (signed, sum) = compact
            .rsplit_once('.')
            .filter(|(signed, sum)| {
                signed.len() >= PERSON_PREFIX.len() && sum.len() == CHECKSUM_LEN
            })
            .ok_or(PersonTokenError::Damaged(
                "no checksum at its end: was it cut?",
            ))?;
        if checksum(signed) != sum {
            return Err(PersonTokenError::Damaged(
                "its checksum does not match: a character was changed, dropped or added",
            ));
        }
        let json = URL_SAFE_NO_PAD
            .decode(&signed[PERSON_PREFIX.len()..])
            .map_err(|_| PersonTokenError::Damaged("not base64url: was it cut or wrapped?"))?;
        let wire: Wire =
            serde_json::from_slice(&json).map_err(|e| match super::json_reason(e) {
                TokenError::BadJson { reason } => PersonTokenError::BadContent(reason),
                other => PersonTokenError::BadContent(other.to_string()),
            })?;
        let content = |what: &str| PersonTokenError::BadContent(what.to_string());
        if wire.bus_urls.is_empty() {
            return Err(content("no bus address"));
        }
        if not_one_bus(&wire.bus_urls).is_some() {
            return Err(content(
                "a bus address is not tls:// or amqps://, or not of the first's bus",
            ));
        }
        let person = Name::new(wire.person).map_err(|_| content("the person is no name"))?;
        let cert_sha256 =
            hex32(&wire.cert_sha256).ok_or_else(|| content("the pin is not a SHA-256"))?;
        check_user_seed(&wire.login_seed)
            .map_err(|_| content("the login secret is not an NKey user seed"))?;
        Ok(PersonToken {
            bus_urls: wire.bus_urls,
            cert_sha256,
            person,
            login_seed: Secret::new(wire.login_seed),
            expires_at: wire.expires_at,
        })
    }

    /// Refused past its expiry at `now_ms` (the instant itself included).
    pub fn ensure_fresh(&self, now_ms: u64) -> Result<(), PersonTokenError> {
        if now_ms >= self.expires_at {
            return Err(PersonTokenError::Expired {
                expires_at: self.expires_at,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> PersonToken {
        let kp = nkeys::KeyPair::new_user();
        PersonToken {
            bus_urls: vec!["tls://10.0.0.1:4222".into()],
            cert_sha256: "ab".repeat(32),
            person: Name::new("ada").unwrap(),
            login_seed: Secret::new(kp.seed().unwrap()),
            expires_at: 2_000,
        }
    }

    #[test]
    fn a_token_reads_back_and_any_changed_character_is_refused_without_echo() {
        let t = token();
        let text = t.encode().expose().to_string();
        assert!(text.starts_with(PERSON_PREFIX));
        assert_eq!(PersonToken::decode(&text).unwrap(), t);
        // Wrapped by a terminal: still read.
        let wrapped = format!("{}\n{}\n", &text[..20], &text[20..]);
        assert_eq!(PersonToken::decode(&wrapped).unwrap(), t);
        for i in PERSON_PREFIX.len()..text.len() {
            let mut b = text.clone().into_bytes();
            b[i] = if b[i] == b'a' { b'b' } else { b'a' };
            let changed = String::from_utf8(b).unwrap();
            if changed == text {
                continue;
            }
            let e = PersonToken::decode(&changed).unwrap_err();
            assert!(!e.to_string().contains(t.login_seed.expose()), "{e}");
        }
        // Cut short: no checksum at its end, said as such.
        let cut = &text[..text.len() - 3];
        assert_eq!(
            PersonToken::decode(cut),
            Err(PersonTokenError::Damaged(
                "no checksum at its end: was it cut?"
            ))
        );
        assert_eq!(
            PersonToken::decode("meshp1.abc"),
            Err(PersonTokenError::Damaged(
                "no checksum at its end: was it cut?"
            ))
        );
        // A node's token is not a login token.
        assert_eq!(
            PersonToken::decode("mesh2.abc.01234567"),
            Err(PersonTokenError::WrongPrefix)
        );
    }

    #[test]
    fn a_token_past_its_expiry_is_refused() {
        let t = token();
        assert!(t.ensure_fresh(1_999).is_ok());
        assert_eq!(
            t.ensure_fresh(2_000),
            Err(PersonTokenError::Expired { expires_at: 2_000 })
        );
    }
}

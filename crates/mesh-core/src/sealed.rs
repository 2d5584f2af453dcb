//! Sealed values (DESIGN §6 "Secrets"): a secret travels and rests only as
//! an XKey (X25519 + XSalsa20-Poly1305) box from one key to another, base64
//! in text. At rest in the store it is sealed to the controller's XKey; in a
//! declaration, from the controller's XKey to the node's; only the node's
//! host opens it, into the module's environment or a 0600 file.
//!
//! A seal draws a fresh nonce (the operating system's randomness, inside
//! `nkeys`), so the same value sealed twice differs; what tells a changed
//! value from a new sealing is [`digest`], keyed by the controller.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac as _};
use sha2::{Digest as _, Sha256};

use crate::secret::Secret;

/// Why a value could not be sealed or opened. None carries the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("{what} is not an XKey public key (X…)")]
    NotAPublicKey { what: &'static str },
    #[error("the sealing seed is not an XKey seed (SX…)")]
    NotASeed,
    #[error("the sealed value is not base64")]
    NotBase64,
    #[error(
        "the sealed value does not open with this key: it was sealed to another key, by another key, or altered"
    )]
    DoesNotOpen,
    #[error("the value could not be sealed")]
    Seal,
    #[error("the opened value is not UTF-8 text")]
    NotText,
}

fn public(key: &str, what: &'static str) -> Result<nkeys::XKey, SealError> {
    nkeys::XKey::from_public_key(key).map_err(|_| SealError::NotAPublicKey { what })
}

fn own(seed: &Secret) -> Result<nkeys::XKey, SealError> {
    nkeys::XKey::from_seed(seed.expose()).map_err(|_| SealError::NotASeed)
}

/// `plaintext` sealed by `sealer_seed` to `recipient` (`X…`), base64.
pub fn seal(sealer_seed: &Secret, recipient: &str, plaintext: &str) -> Result<String, SealError> {
    let sealer = own(sealer_seed)?;
    let to = public(recipient, "the recipient")?;
    let boxed = sealer
        .seal(plaintext.as_bytes(), &to)
        .map_err(|_| SealError::Seal)?;
    Ok(STANDARD.encode(boxed))
}

/// Opens `sealed` (base64) with `own_seed`, sealed by `sender` (`X…`).
pub fn open(own_seed: &Secret, sender: &str, sealed: &str) -> Result<Secret, SealError> {
    let me = own(own_seed)?;
    let from = public(sender, "the sealer")?;
    let boxed = STANDARD.decode(sealed).map_err(|_| SealError::NotBase64)?;
    let bytes = me.open(&boxed, &from).map_err(|_| SealError::DoesNotOpen)?;
    String::from_utf8(bytes)
        .map(Secret::new)
        .map_err(|_| SealError::NotText)
}

/// The key of [`digest`], derived from a secret only the controller holds
/// (its signing seed): a digest tells nobody else anything about a value.
pub fn digest_key(controller_secret: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"mesh sealed-value digest v1\0");
    h.update(controller_secret);
    h.finalize().into()
}

/// HMAC-SHA256 under `key` of `(where, plaintext)` pairs, each part
/// length-prefixed (no two lists read alike), as lowercase hex.
pub fn digest(key: &[u8; 32], values: &[(String, String)]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    for (place, value) in values {
        for part in [place.as_bytes(), value.as_bytes()] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
    }
    hex::encode(mac.finalize().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (Secret, String) {
        let k = nkeys::XKey::new();
        (Secret::new(k.seed().unwrap()), k.public_key())
    }

    #[test]
    fn only_the_recipient_opens_what_the_sealer_sealed() {
        let (controller, controller_pub) = pair();
        let (n1, n1_pub) = pair();
        let (n2, _) = pair();
        let sealed = seal(&controller, &n1_pub, "hunter2").unwrap();
        assert!(!sealed.contains("hunter2"));
        assert_eq!(
            open(&n1, &controller_pub, &sealed).unwrap().expose(),
            "hunter2"
        );
        // Another node's key, or another sealer named, opens nothing.
        assert_eq!(
            open(&n2, &controller_pub, &sealed).unwrap_err(),
            SealError::DoesNotOpen
        );
        let (_, other_pub) = pair();
        assert_eq!(
            open(&n1, &other_pub, &sealed).unwrap_err(),
            SealError::DoesNotOpen
        );
        // One byte changed: refused, not opened to something else.
        let mut bytes = STANDARD.decode(&sealed).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert_eq!(
            open(&n1, &controller_pub, &STANDARD.encode(bytes)).unwrap_err(),
            SealError::DoesNotOpen
        );
        // Sealed twice, two boxes: a fresh nonce each time.
        assert_ne!(seal(&controller, &n1_pub, "hunter2").unwrap(), sealed);
        assert_eq!(
            seal(&controller, "UNOTX", "x").unwrap_err(),
            SealError::NotAPublicKey {
                what: "the recipient"
            }
        );
        assert_eq!(
            open(&n1, &controller_pub, "%%%").unwrap_err(),
            SealError::NotBase64
        );
    }

    #[test]
    fn the_digest_is_keyed_and_tells_values_and_places_apart() {
        let k = digest_key(b"controller seed");
        let v = |p: &str, s: &str| vec![(p.to_string(), s.to_string())];
        let d = digest(&k, &v("env A", "x"));
        assert_eq!(d, digest(&k, &v("env A", "x")), "deterministic");
        assert_ne!(d, digest(&k, &v("env A", "y")));
        assert_ne!(d, digest(&k, &v("env B", "x")));
        assert_ne!(d, digest(&digest_key(b"another"), &v("env A", "x")));
        // Length-prefixed: moving a boundary is another list.
        assert_ne!(digest(&k, &v("ab", "c")), digest(&k, &v("a", "bc")));
        assert_eq!(d.len(), 64);
        assert!(!d.contains('x'));
    }
}

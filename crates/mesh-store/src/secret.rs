//! Secrets: generated here, shown once; only public keys and person hashes
//! are recorded.

use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::error::{HashError, MalformedValue, StoreError};

/// bcrypt cost for a person's credential: a person may reuse or type it, so
/// it gets the cost that makes an offline guess expensive.
pub const PERSON_BCRYPT_COST: u32 = 11;

pub use mesh_core::secret::Secret;

/// 256 bits from the thread CSPRNG (ChaCha, seeded from the OS), as 64 hex
/// characters: safe inside a NATS config string and under bcrypt's 72-byte
/// input limit.
pub(crate) fn generate() -> Secret {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    Secret::new(hex::encode(bytes))
}

/// 128 random bits as 32 hex characters: a store's identity. Not a secret.
pub(crate) fn generate_id() -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// A fresh NKey user key pair: its seed (`SU…`, for whoever connects with it)
/// and its public key (`U…`, the one thing the store records).
pub fn new_user_key() -> (Secret, String) {
    let kp = nkeys::KeyPair::new_user();
    // `seed()` fails only for a pair built from a public key alone.
    let seed = kp.seed().expect("a generated pair has its seed");
    (Secret::new(seed), kp.public_key())
}

/// Refuses anything but an NKey *user* public key: a seed handed over by
/// mistake would be a secret at rest, and an account or server key would
/// admit nobody.
pub(crate) fn check_user_key(what: &'static str, key: &str) -> Result<(), StoreError> {
    if mesh_core::users_file::UserCredential::is_user_nkey(key) {
        return Ok(());
    }
    Err(StoreError::Invalid {
        what,
        detail: "not an nkey user public key (U…)".to_string(),
    })
}

/// An XKey (X25519) public key (`X…`), what a host's secrets are sealed to.
pub(crate) fn check_xkey(key: &str) -> Result<(), StoreError> {
    if nkeys::XKey::from_public_key(key).is_ok() {
        return Ok(());
    }
    Err(StoreError::Invalid {
        what: "a host sealing key",
        detail: "not an xkey public key (X…)".to_string(),
    })
}

/// The public key of an NKey seed, if it is a user seed.
pub(crate) fn user_public_key(seed: &str) -> Option<String> {
    let kp = nkeys::KeyPair::from_seed(seed).ok()?;
    matches!(kp.key_pair_type(), nkeys::KeyPairType::User).then(|| kp.public_key())
}

/// `sha256:<hex>` of a text, the digest form mesh uses everywhere.
pub fn sha256_digest(text: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

/// Runs a bcrypt call off the async runtime: at cost 11 a hash takes long
/// enough to stall every other task on the worker thread.
async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Hash {
            source: HashError::Task(e),
        })
}

pub(crate) async fn bcrypt_hash(secret: &Secret, cost: u32) -> Result<String, StoreError> {
    let plaintext = secret.expose().to_owned();
    let parts = off_runtime(move || bcrypt::hash_with_result(plaintext, cost))
        .await?
        .map_err(|e| StoreError::Hash {
            source: HashError::Bcrypt(e),
        })?;
    // `$2a$`: identical to `$2b$` for inputs this short, and the one prefix the
    // NATS config parser does not mistake for a variable reference when a hash
    // is written unquoted (DESIGN §8).
    Ok(parts.format_for_version(bcrypt::Version::TwoA))
}

pub(crate) async fn bcrypt_verify(secret: &str, hash: &str) -> Result<bool, StoreError> {
    let plaintext = secret.to_string();
    let hash = hash.to_string();
    off_runtime(move || bcrypt::verify(plaintext, &hash))
        .await?
        // A hash bcrypt cannot parse was not written by mesh.
        .map_err(|e| StoreError::malformed("credential", MalformedValue::Hash(e)))
}

//! Secrets: generated here, shown once, only their hashes recorded.

use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::error::{HashError, MalformedValue, StoreError};

/// bcrypt cost for machine credentials (hosts, modules, the controller).
///
/// Their secrets are 256-bit random, so no cost makes guessing one feasible or
/// infeasible; the cost only decides how fast the broker admits connections.
/// DESIGN §8, measured on a 2-core broker: cost 4 ≈ 1,000 connects/s, cost 6 ≈
/// 400/s, cost 10 ≈ 2/s — at 10 a reconnect storm of a thousand hosts would
/// take minutes of broker CPU. 4 is bcrypt's minimum.
pub const MACHINE_BCRYPT_COST: u32 = 4;

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

/// SHA-256 of a token secret, hex. A token secret is 256 random bits, so a
/// fast hash is as strong as a slow one (there is nothing to guess), and being
/// unsalted and deterministic it can sit in the spend statement's WHERE clause
/// — a salted bcrypt hash could not be looked up in one statement.
pub(crate) fn token_hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
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

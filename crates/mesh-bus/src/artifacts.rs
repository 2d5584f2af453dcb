//! The artifact store's bus side (DESIGN §6 Artifacts): the `ARTIFACTS`
//! object store bucket, asserted at every controller start; objects written
//! once under content-addressed names; and [`fetch`], which reads one object
//! through subjects that can be granted per object.
//!
//! Objects are written as async-nats and nats.go write them (chunks on
//! `$O.ARTIFACTS.C.<nuid>`, then an `ObjectInfo` meta rolled up on
//! `$O.ARTIFACTS.M.<base64url(name)>`), so any NATS client reads them. The
//! writing is ours rather than `ObjectStore::put`'s: that one replaces an
//! existing object (purging its chunks), where an artifact is written once,
//! and the server — not a check that a concurrent writer can slip past —
//! must refuse the second meta.

mod fetch;
mod store;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use async_nats::jetstream::context::{GetStreamError, PublishAckFuture, PublishError};
use async_nats::jetstream::object_store::{ObjectInfo, ObjectOptions};
use async_nats::jetstream::{self, ErrorCode};
use async_nats::{Client, RequestErrorKind, StatusCode};
use base64::Engine as _;
use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use futures::StreamExt as _;
use mesh_core::subjects::artifact::{self, BUCKET, METAS_STREAM, STREAM};
use rand::Rng as _;
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt as _;

pub use fetch::{BusError, FetchError, Fetched, Mismatched, Wanted, fetch};
pub use mesh_core::subjects::artifact::{InvalidNuid, Nuid};
pub use store::{
    BucketError, Ensured, ReadError, ensure_bucket, ensure_bucket_made_with, ensure_bucket_with,
};

/// Chunk size, async-nats's default: well under the server's 1 MB payload
/// limit, and what other clients write.
pub const CHUNK_SIZE: usize = 128 * 1024;
/// Chunks published before the oldest acknowledgement is awaited: one
/// round trip per chunk would make a 64 MiB put 512 sequential waits.
const ACKS_IN_FLIGHT: usize = 16;

/// An object the store holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub name: String,
    pub size: u64,
    /// Lowercase hex.
    pub sha256: String,
    /// The token of its chunk subject (`$O.ARTIFACTS.C.<nuid>`): a reader's
    /// grant names it.
    pub nuid: String,
    /// It was already there with this content (a second put of the same
    /// bytes is not an error).
    pub existed: bool,
}

/// One entry of [`list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub name: String,
    pub size: u64,
    pub nuid: String,
    /// Lowercase hex, from the meta's digest (absent when a writer gave none).
    pub sha256: Option<String>,
    pub modified: Option<SystemTime>,
}

/// Reading an object's meta failed.
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    #[error("the artifact store does not answer (no stream {STREAM} with direct get on the bus)")]
    NoStore,
    #[error("the request for its meta failed")]
    Request(#[source] async_nats::RequestError),
    #[error("the server answered {status}: {description}")]
    Status { status: u16, description: String },
    #[error("its meta is not an object record")]
    Malformed(#[source] serde_json::Error),
    #[error("its meta names another object, {0:?}")]
    OtherName(String),
    #[error("its meta's digest {0:?} is not SHA-256=<base64url of 32 bytes>")]
    BadDigest(String),
    #[error(
        "its meta was stored but the bucket did not hold it within {0:?} (stream {STREAM} sources stream {METAS_STREAM})"
    )]
    NotReadable(Duration),
}

/// The newest meta of `name` by a direct get of the last message on its
/// meta subject (the one subject a reader's grant names); `None` when the
/// store never held it.
pub(crate) async fn read_meta(
    client: &Client,
    name: &str,
) -> Result<Option<ObjectInfo>, MetaError> {
    let reply = client
        .request(artifact::meta_get(name), Default::default())
        .await
        .map_err(|e| match e.kind() {
            RequestErrorKind::NoResponders => MetaError::NoStore,
            _ => MetaError::Request(e),
        })?;
    match reply.status {
        None => {}
        Some(StatusCode::NOT_FOUND) => return Ok(None),
        Some(s) => {
            return Err(MetaError::Status {
                status: s.as_u16(),
                description: reply.description.unwrap_or_default(),
            });
        }
    }
    let info: ObjectInfo = serde_json::from_slice(&reply.payload).map_err(MetaError::Malformed)?;
    if info.name != name {
        return Err(MetaError::OtherName(info.name));
    }
    Ok(Some(info))
}

/// Whether `name` is stored (and not deleted), with its size, digest and
/// chunk token, read from its meta alone: what a grant of the meta's direct
/// get allows, no chunk read.
pub async fn stat(client: &Client, name: &str) -> Result<Option<Listed>, MetaError> {
    let Some(m) = read_meta(client, name).await? else {
        return Ok(None);
    };
    if m.deleted {
        return Ok(None);
    }
    let sha256 = match m.digest.as_deref() {
        Some(d) => Some(digest_hex(d)?),
        None => None,
    };
    Ok(Some(Listed {
        name: m.name.clone(),
        size: m.size as u64,
        nuid: m.nuid.clone(),
        sha256,
        modified: m.modified.map(SystemTime::from),
    }))
}

/// The lowercase hex SHA-256 of a meta's `SHA-256=<base64url>` digest.
/// Padded or not: async-nats and nats.go pad, a writer that does not is
/// still read.
pub(crate) fn digest_hex(digest: &str) -> Result<String, MetaError> {
    let bad = || MetaError::BadDigest(digest.to_string());
    let b64 = digest.strip_prefix("SHA-256=").ok_or_else(bad)?;
    let raw = URL_SAFE
        .decode(b64)
        .or_else(|_| URL_SAFE_NO_PAD.decode(b64))
        .map_err(|_| bad())?;
    if raw.len() != 32 {
        return Err(bad());
    }
    Ok(hex::encode(raw))
}

fn digest_field(sha256_hex: &str) -> Option<String> {
    let raw = hex::decode(sha256_hex).ok()?;
    Some(format!("SHA-256={}", URL_SAFE.encode(raw)))
}

#[derive(Debug, thiserror::Error)]
pub enum PutError {
    #[error(
        "{name:?} is not an artifact object name (<module>/<artifact>/sha256-<64 lowercase hex digits>)"
    )]
    BadName { name: String },
    #[error("{name} does not name the content of {}: its sha256 is {sha256}", path.display())]
    NotItsContent {
        name: String,
        path: PathBuf,
        sha256: String,
    },
    #[error(
        "artifact {name} is already stored with other content ({size} bytes, sha256 {sha256}); an artifact is written once"
    )]
    OtherContent {
        name: String,
        size: u64,
        sha256: String,
    },
    #[error("{} changed while it was being stored; nothing was recorded", path.display())]
    Changed { path: PathBuf },
    #[error(
        "artifact {name} was deleted from the artifact store, and a name is written once: build or put the content under another version, or remove its meta from stream {METAS_STREAM} to store it again"
    )]
    Deleted { name: String },
    #[error("could not read {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("could not read the artifact store's record of {name}")]
    Meta {
        name: String,
        #[source]
        source: MetaError,
    },
    #[error("could not store {what} of {name}")]
    Publish {
        name: String,
        what: &'static str,
        #[source]
        source: PublishError,
    },
}

/// Stores `file` under `name` once. The name must say the file's content
/// (`…/sha256-<its digest>`). Already stored with this size and digest: the
/// stored object, `existed: true`. Stored with anything else: refused,
/// naming it. The file is streamed, never held whole in memory. A put that
/// fails after its chunks went out leaves them unreferenced in the stream:
/// a writer holds no purge right (it would let it erase any object).
pub async fn put(js: &jetstream::Context, name: &str, file: &Path) -> Result<Stored, PutError> {
    let Some(named) = artifact::named_digest(name) else {
        return Err(PutError::BadName { name: name.into() });
    };
    let io = |source| PutError::Io {
        path: file.to_path_buf(),
        source,
    };
    let (size, sha256) = digest_file(file).await.map_err(io)?;
    if sha256 != named {
        return Err(PutError::NotItsContent {
            name: name.into(),
            path: file.to_path_buf(),
            sha256,
        });
    }
    let client = js.client();
    let meta_err = |source| PutError::Meta {
        name: name.into(),
        source,
    };
    if let Some(m) = read_meta(&client, name).await.map_err(meta_err)? {
        return already(name, &m, size, &sha256);
    }

    let nuid = random_token(22);
    let chunks =
        artifact::chunks(&Nuid::new(&nuid).map_err(|_| PutError::BadName { name: name.into() })?);
    let publish_err = |what| {
        move |source| PutError::Publish {
            name: name.into(),
            what,
            source,
        }
    };
    let mut f = tokio::fs::File::open(file).await.map_err(io)?;
    let mut hasher = Sha256::new();
    let (mut written, mut count) = (0u64, 0usize);
    let mut acks: VecDeque<PublishAckFuture> = VecDeque::with_capacity(ACKS_IN_FLIGHT);
    loop {
        let chunk = read_chunk(&mut f).await.map_err(io)?;
        if chunk.is_empty() {
            break;
        }
        hasher.update(&chunk);
        written += chunk.len() as u64;
        count += 1;
        if acks.len() == ACKS_IN_FLIGHT
            && let Some(ack) = acks.pop_front()
        {
            ack.await.map_err(publish_err("a chunk"))?;
        }
        let ack = js
            .publish(chunks.clone(), chunk.into())
            .await
            .map_err(publish_err("a chunk"))?;
        acks.push_back(ack);
    }
    for ack in acks {
        ack.await.map_err(publish_err("a chunk"))?;
    }
    // What was sent must be what was named: a file rewritten between the
    // two reads would otherwise be stored under a digest it does not have.
    if written != size || hex::encode(hasher.finalize()) != sha256 {
        return Err(PutError::Changed {
            path: file.to_path_buf(),
        });
    }

    let info = ObjectInfo {
        name: name.into(),
        description: None,
        metadata: Default::default(),
        headers: None,
        options: Some(ObjectOptions {
            link: None,
            max_chunk_size: Some(CHUNK_SIZE),
        }),
        bucket: BUCKET.into(),
        nuid: nuid.clone(),
        size: usize::try_from(size).unwrap_or(usize::MAX),
        chunks: count,
        modified: Some(SystemTime::now().into()),
        digest: digest_field(&sha256),
        deleted: false,
    };
    let body = serde_json::to_vec(&info).map_err(|e| PutError::Meta {
        name: name.into(),
        source: MetaError::Malformed(e),
    })?;
    // No roll-up and no expected sequence: the metas stream refuses any
    // second meta of a name, so the first to land is the object.
    let acked = match js.publish(artifact::meta(name), body.into()).await {
        Ok(ack) => ack.await,
        Err(e) => Err(e),
    };
    let ours = match acked {
        Ok(_) => true,
        // Another writer's meta landed first: its content decides.
        Err(e) if is_refused_as(&e, ErrorCode::STREAM_STORE_FAILED) => false,
        Err(e) => return Err(publish_err("the meta")(e)),
    };
    // Stored means readable: the meta reaches the bucket by sourcing, and a
    // build announced before it does would name an object no one can read.
    let m = readable(&client, name).await.map_err(meta_err)?;
    if ours && m.nuid == nuid {
        return Ok(Stored {
            name: name.into(),
            size,
            sha256,
            nuid,
            existed: false,
        });
    }
    already(name, &m, size, &sha256)
}

/// How long a stored meta may take to reach the bucket by sourcing.
const READABLE_WITHIN: Duration = Duration::from_secs(30);

/// `name`'s meta once the bucket holds it.
async fn readable(client: &Client, name: &str) -> Result<ObjectInfo, MetaError> {
    let deadline = tokio::time::Instant::now() + READABLE_WITHIN;
    let mut wait = Duration::from_millis(5);
    loop {
        if let Some(m) = read_meta(client, name).await? {
            return Ok(m);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(MetaError::NotReadable(READABLE_WITHIN));
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_millis(500));
    }
}

/// Whether the server refused a publish with JetStream error `code`.
pub(crate) fn is_refused_as(e: &PublishError, code: ErrorCode) -> bool {
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<jetstream::Error>())
        .is_some_and(|j| j.error_code() == code)
}

/// The stored object when it has this content; refused otherwise.
fn already(name: &str, info: &ObjectInfo, size: u64, sha256: &str) -> Result<Stored, PutError> {
    if info.deleted {
        return Err(PutError::Deleted { name: name.into() });
    }
    let stored = info.digest.as_deref().and_then(|d| digest_hex(d).ok());
    if info.size as u64 == size && stored.as_deref() == Some(sha256) {
        return Ok(Stored {
            name: name.into(),
            size,
            sha256: sha256.into(),
            nuid: info.nuid.clone(),
            existed: true,
        });
    }
    Err(PutError::OtherContent {
        name: name.into(),
        size: info.size as u64,
        sha256: stored.unwrap_or_else(|| "unknown".into()),
    })
}

async fn digest_file(path: &Path) -> std::io::Result<(u64, String)> {
    let mut f = tokio::fs::File::open(path).await?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    loop {
        let chunk = read_chunk(&mut f).await?;
        if chunk.is_empty() {
            return Ok((size, hex::encode(hasher.finalize())));
        }
        size += chunk.len() as u64;
        hasher.update(&chunk);
    }
}

/// Up to [`CHUNK_SIZE`] bytes; empty at the end. Full chunks except the
/// last, whatever sizes the reads return.
async fn read_chunk(f: &mut tokio::fs::File) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0; CHUNK_SIZE];
    let mut filled = 0;
    while filled < CHUNK_SIZE {
        let n = f.read(&mut buf[filled..]).await?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    buf.truncate(filled);
    Ok(buf)
}

/// Letters and digits, as NATS nuids are.
pub(crate) fn random_token(len: usize) -> String {
    rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}

#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error("could not reach stream {STREAM}")]
    Open(#[source] GetStreamError),
    #[error("could not list the artifact store")]
    List(#[source] async_nats::jetstream::stream::ConsumerError),
    #[error("could not list the artifact store")]
    Subscribe(#[source] async_nats::jetstream::consumer::StreamError),
    #[error("the artifact store's list was cut off")]
    Read(#[source] async_nats::jetstream::consumer::push::OrderedError),
    #[error("the artifact store's list ended early")]
    Ended,
}

/// What the bucket holds: its objects by name (deleted ones left out), and
/// the metas no client could read, each named, rather than one bad meta
/// hiding the rest.
#[derive(Debug, Default)]
pub struct Listing {
    pub objects: Vec<Listed>,
    pub unreadable: Vec<Unreadable>,
}

/// A meta that does not read as an object.
#[derive(Debug)]
pub struct Unreadable {
    /// The object's name when its subject decodes to one, else the subject.
    pub name: String,
    pub error: MetaError,
}

/// The newest meta on each meta subject of the bucket, one after another,
/// through an ordered consumer (the controller's view: it holds the whole
/// API).
pub(crate) struct Metas {
    messages: jetstream::consumer::push::Ordered,
    pending: u64,
}

impl Metas {
    /// The next meta's subject and body; `None` after the last.
    pub(crate) async fn next(&mut self) -> Result<Option<(String, Vec<u8>)>, ListError> {
        if self.pending == 0 {
            return Ok(None);
        }
        let m = self
            .messages
            .next()
            .await
            .ok_or(ListError::Ended)?
            .map_err(ListError::Read)?;
        self.pending = m.info().map(|i| i.pending).unwrap_or(0);
        Ok(Some((m.subject.to_string(), m.payload.to_vec())))
    }
}

pub(crate) async fn metas_of(js: &jetstream::Context) -> Result<Metas, ListError> {
    let stream = js
        .get_stream_no_info(STREAM)
        .await
        .map_err(ListError::Open)?;
    let consumer = stream
        .create_consumer(jetstream::consumer::push::OrderedConfig {
            deliver_subject: js.client().new_inbox(),
            filter_subject: artifact::ALL_META.into(),
            deliver_policy: jetstream::consumer::DeliverPolicy::LastPerSubject,
            ..Default::default()
        })
        .await
        .map_err(ListError::List)?;
    let pending = consumer.cached_info().num_pending;
    let messages = consumer.messages().await.map_err(ListError::Subscribe)?;
    Ok(Metas { messages, pending })
}

/// The newest meta of every object (deleted ones left out), with the metas
/// no client could read named rather than hiding the rest.
pub async fn list(js: &jetstream::Context) -> Result<Listing, ListError> {
    let mut metas = metas_of(js).await?;
    let mut listing = Listing::default();
    while let Some((subject, payload)) = metas.next().await? {
        let subject_name = || {
            let token = subject.rsplit('.').next().unwrap_or_default();
            URL_SAFE
                .decode(token)
                .ok()
                .and_then(|raw| String::from_utf8(raw).ok())
                .unwrap_or_else(|| subject.clone())
        };
        let info: ObjectInfo = match serde_json::from_slice(&payload) {
            Ok(info) => info,
            Err(e) => {
                listing.unreadable.push(Unreadable {
                    name: subject_name(),
                    error: MetaError::Malformed(e),
                });
                continue;
            }
        };
        if info.deleted {
            continue;
        }
        let sha256 = match info.digest.as_deref().map(digest_hex).transpose() {
            Ok(s) => s,
            Err(error) => {
                listing.unreadable.push(Unreadable {
                    name: info.name,
                    error,
                });
                continue;
            }
        };
        listing.objects.push(Listed {
            size: info.size as u64,
            nuid: info.nuid,
            sha256,
            modified: info.modified.map(SystemTime::from),
            name: info.name,
        });
    }
    listing.objects.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(listing)
}

/// What a principal needs to [`fetch`] one object: `publish` the subjects
/// of [`artifact::reader_publish`], `subscribe` its own inbox (where the
/// replies and the chunk deliveries come).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaderGrants {
    pub publish: Vec<String>,
    pub subscribe: Vec<String>,
}

/// The grants for `principal` to fetch the object `name` stored under `nuid`.
pub fn reader_grants(principal: &str, name: &str, nuid: &str) -> Result<ReaderGrants, InvalidNuid> {
    let nuid = Nuid::new(nuid)?;
    Ok(ReaderGrants {
        publish: artifact::reader_publish(name, &nuid),
        subscribe: vec![mesh_core::subjects::inbox(principal)],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_reads_as_the_clients_write_it() {
        let hex = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        let field = digest_field(hex).unwrap();
        // async-nats and nats.go: URL-safe base64 with padding.
        assert_eq!(
            field,
            "SHA-256=n4bQgYhMfWWaL-qgxVrQFaO_TxsrC4Is0V1sFbDwCgg="
        );
        assert_eq!(digest_hex(&field).unwrap(), hex);
        assert_eq!(digest_hex(field.trim_end_matches('=')).unwrap(), hex);
        for bad in [
            "",
            "SHA-256=",
            "SHA-512=n4bQ",
            "SHA-256=n4bQgYhM",
            "n4bQgYhMfWWaL",
        ] {
            assert!(
                matches!(digest_hex(bad), Err(MetaError::BadDigest(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn reader_grants_refuse_a_nuid_that_would_widen_them() {
        assert!(reader_grants("host_n1", "a", "x.>").is_err());
        let g = reader_grants("host_n1", "a", "abc").unwrap();
        assert_eq!(g.subscribe, ["_INBOX.host_n1.>"]);
        assert_eq!(g.publish.len(), 3);
    }

    #[test]
    fn random_tokens_are_nuids() {
        let t = random_token(22);
        assert_eq!(t.len(), 22);
        assert!(Nuid::new(&t).is_ok());
    }
}

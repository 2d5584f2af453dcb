//! Reading one object with nothing but what a per-object grant allows:
//! the meta by direct get on its own subject, the chunks through an
//! ephemeral push consumer created with the filtered subject form (the
//! server holds the body's filter to the subject's), flow control answered,
//! replies and deliveries under the client's own inbox. async-nats's
//! `ObjectStore::get` asks stream info and creates its consumer with the
//! unfiltered `…CONSUMER.CREATE.OBJ_ARTIFACTS`, a grant that reads every
//! object.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream::consumer::{self, AckPolicy, DeliverPolicy};
use async_nats::jetstream::response::Response;
use async_nats::{Client, StatusCode};
use futures::StreamExt as _;
use mesh_core::subjects::artifact::{self, Nuid, STREAM};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt as _;

use super::{MetaError, digest_hex, random_token, read_meta};
use crate::refusals::{Refusal, Refusals};

/// How often the server signals an idle consumer: silence for
/// [`STALL_AFTER`] means the consumer is gone (a restarted server, a
/// deleted consumer), which would otherwise wait out the caller's timeout.
const HEARTBEAT: Duration = Duration::from_secs(1);
const STALL_AFTER: Duration = Duration::from_secs(5);
/// The consumer is deleted by the server this long after its subscription
/// goes: the reader needs no delete right, which would reach others'
/// consumers on the stream.
const INACTIVE_THRESHOLD: Duration = Duration::from_secs(5);
/// Heartbeat header: a flow-control request the server is still waiting on.
const CONSUMER_STALLED: &str = "Nats-Consumer-Stalled";

/// What the caller's (signed) declaration says the object is.
#[derive(Debug, Clone, Copy)]
pub struct Wanted<'a> {
    pub name: &'a str,
    pub nuid: &'a str,
    pub size: u64,
    /// Lowercase hex.
    pub sha256: &'a str,
}

/// What was written to the destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    pub size: u64,
    pub sha256: String,
}

/// Which declared property the store's object lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatched {
    Nuid,
    Size,
    Sha256,
}

impl std::fmt::Display for Mismatched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mismatched::Nuid => "nuid",
            Mismatched::Size => "size",
            Mismatched::Sha256 => "sha256",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("artifact {name} is not in the artifact store{}", if *deleted { " (it was deleted)" } else { "" })]
    Missing { name: String, deleted: bool },
    #[error("the bus refused reading artifact {name}: {} \"{}\" is not granted", refusal.denied, refusal.subject)]
    Refused { name: String, refusal: Refusal },
    #[error(
        "artifact {name} does not match its declaration: its {what} is {got}, the declaration says {expected}"
    )]
    Mismatch {
        name: String,
        what: Mismatched,
        expected: String,
        got: String,
    },
    #[error("the declaration of artifact {name} is unusable: {reason}")]
    BadWanted { name: String, reason: String },
    #[error("could not {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("reading artifact {name} took longer than {after:?}")]
    Timeout { name: String, after: Duration },
    #[error("reading artifact {name} stalled: nothing arrived for {after:?}")]
    Stalled { name: String, after: Duration },
    #[error(
        "artifact {name} ended after {got} of its {size} bytes in the artifact store (deleted while it was read?)"
    )]
    Truncated { name: String, got: u64, size: u64 },
    #[error("the chunks of artifact {name} arrived with a gap (delivery {got} after {last})")]
    Gap { name: String, last: u64, got: u64 },
    #[error("could not read artifact {name} from the artifact store")]
    Bus {
        name: String,
        #[source]
        source: BusError,
    },
}

/// A bus operation of a fetch that failed.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error(transparent)]
    Meta(#[from] MetaError),
    #[error("could not subscribe to its deliveries")]
    Subscribe(#[source] async_nats::SubscribeError),
    #[error("the request for its chunk consumer failed")]
    Request(#[source] async_nats::RequestError),
    #[error("the server's answer to its chunk consumer is not one")]
    Answer(#[source] serde_json::Error),
    #[error("the server refused its chunk consumer")]
    Consumer(#[source] async_nats::jetstream::Error),
    #[error("the server ended the delivery: {status} {description}")]
    Status { status: u16, description: String },
    #[error("a delivery carries no consumer sequence (reply {0:?})")]
    Sequence(String),
    #[error("the subscription to its deliveries ended")]
    Closed,
    #[error("could not answer the server's flow control")]
    FlowControl(#[source] async_nats::PublishError),
}

/// Reads the object `want` names into `dest`, checked against `want`.
/// `dest` appears only complete and matching (written beside it, synced,
/// renamed); every failure leaves no file behind. The whole fetch is bounded
/// by `timeout`. The client must use its principal's inbox prefix, and
/// `refusals` must hear the client's events ([`Refusals::note`]): a refused
/// request is never answered, and the refusal is what ends the wait.
pub async fn fetch(
    client: &Client,
    refusals: &Refusals,
    want: &Wanted<'_>,
    dest: &Path,
    timeout: Duration,
) -> Result<Fetched, FetchError> {
    let name = want.name.to_string();
    let bad = |reason: String| FetchError::BadWanted {
        name: name.clone(),
        reason,
    };
    let nuid = Nuid::new(want.nuid).map_err(|e| bad(e.to_string()))?;
    if want.sha256.len() != 64
        || !want
            .sha256
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(bad(format!(
            "sha256 {:?} is not 64 lowercase hex digits",
            want.sha256
        )));
    }
    let consumer = format!("fetch_{}", random_token(16));
    let deliver = client.new_inbox();
    let ours = Ours {
        subjects: [
            artifact::meta_get(want.name),
            artifact::consumer_create(&consumer, &nuid),
        ],
        flow_control: format!("$JS.FC.{STREAM}.{consumer}."),
        inbox: match deliver.rsplit_once('.') {
            Some((prefix, _)) => format!("{prefix}."),
            None => deliver.clone(),
        },
    };
    // Open before the first request: the refusal can come back before
    // anything awaits it.
    let mut watch = refusals.watch();
    let plan = Plan {
        client,
        want,
        nuid: &nuid,
        consumer: &consumer,
        deliver: &deliver,
    };
    let raced = async {
        tokio::select! {
            done = plan.download(dest) => done,
            refusal = watch.refused(|r| ours.claims(r)) => Err(FetchError::Refused {
                name: name.clone(),
                refusal,
            }),
        }
    };
    match tokio::time::timeout(timeout, raced).await {
        Ok(done) => done,
        Err(_) => Err(FetchError::Timeout {
            name,
            after: timeout,
        }),
    }
}

/// The subjects one fetch uses: a refusal of any other belongs to other
/// work on the same connection.
struct Ours {
    subjects: [String; 2],
    flow_control: String,
    inbox: String,
}

impl Ours {
    fn claims(&self, r: &Refusal) -> bool {
        self.subjects.contains(&r.subject)
            || r.subject.starts_with(&self.flow_control)
            || r.subject.starts_with(&self.inbox)
    }
}

struct Plan<'a> {
    client: &'a Client,
    want: &'a Wanted<'a>,
    nuid: &'a Nuid,
    consumer: &'a str,
    deliver: &'a str,
}

impl Plan<'_> {
    fn name(&self) -> String {
        self.want.name.to_string()
    }

    fn bus(&self) -> impl Fn(BusError) -> FetchError + '_ {
        move |source| FetchError::Bus {
            name: self.name(),
            source,
        }
    }

    fn mismatch(
        &self,
        what: Mismatched,
        expected: impl ToString,
        got: impl ToString,
    ) -> FetchError {
        FetchError::Mismatch {
            name: self.name(),
            what,
            expected: expected.to_string(),
            got: got.to_string(),
        }
    }

    async fn download(&self, dest: &Path) -> Result<Fetched, FetchError> {
        let want = self.want;
        let meta = read_meta(self.client, want.name)
            .await
            .map_err(|e| self.bus()(e.into()))?;
        let Some(info) = meta else {
            return Err(FetchError::Missing {
                name: self.name(),
                deleted: false,
            });
        };
        if info.deleted {
            return Err(FetchError::Missing {
                name: self.name(),
                deleted: true,
            });
        }
        // The meta is checked before a byte is read: an object stored again
        // (another nuid) or under other content fails here, not after a
        // download. The bytes are checked again below; the meta may lie.
        if info.nuid != self.nuid.as_str() {
            return Err(self.mismatch(Mismatched::Nuid, self.nuid, &info.nuid));
        }
        if info.size as u64 != want.size {
            return Err(self.mismatch(Mismatched::Size, want.size, info.size));
        }
        if let Some(digest) = &info.digest {
            let stored = digest_hex(digest).map_err(|e| self.bus()(e.into()))?;
            if stored != want.sha256 {
                return Err(self.mismatch(Mismatched::Sha256, want.sha256, stored));
            }
        }

        let mut part = Partial::create(dest).await?;
        let mut hasher = Sha256::new();
        let got = if want.size == 0 {
            // An empty object has no chunks to wait for.
            0
        } else {
            self.receive(&mut part, &mut hasher).await?
        };
        if got != want.size {
            return Err(self.mismatch(Mismatched::Size, want.size, got));
        }
        let sha256 = hex::encode(hasher.finalize());
        if sha256 != want.sha256 {
            return Err(self.mismatch(Mismatched::Sha256, want.sha256, &sha256));
        }
        part.commit(dest).await?;
        Ok(Fetched { size: got, sha256 })
    }

    /// Receives every chunk into `part`; the number of bytes written.
    async fn receive(&self, part: &mut Partial, hasher: &mut Sha256) -> Result<u64, FetchError> {
        let bus = self.bus();
        // Subscribed before the consumer exists: its first deliveries go
        // out as it is created.
        let mut sub = self
            .client
            .subscribe(self.deliver.to_string())
            .await
            .map_err(|e| bus(BusError::Subscribe(e)))?;
        self.create_consumer().await.map_err(&bus)?;
        let js = async_nats::jetstream::new(self.client.clone());
        let (mut last, mut got, mut idle) = (0u64, 0u64, 0u32);
        loop {
            let message = match tokio::time::timeout(STALL_AFTER, sub.next()).await {
                Err(_) => {
                    return Err(FetchError::Stalled {
                        name: self.name(),
                        after: STALL_AFTER,
                    });
                }
                Ok(None) => return Err(bus(BusError::Closed)),
                Ok(Some(m)) => m,
            };
            match message.status {
                None => {}
                Some(StatusCode::IDLE_HEARTBEAT) => {
                    // Idle with everything delivered and the last chunk not
                    // seen: the chunks were removed while being read (an
                    // object deleted), and nothing more will come. Twice, so
                    // a server slow to read its disk is not taken for it.
                    idle = if self.control(&message, last).await? {
                        idle + 1
                    } else {
                        0
                    };
                    if idle >= 2 {
                        return Err(FetchError::Truncated {
                            name: self.name(),
                            got,
                            size: self.want.size,
                        });
                    }
                    continue;
                }
                Some(s) => {
                    return Err(bus(BusError::Status {
                        status: s.as_u16(),
                        description: message.description.unwrap_or_default(),
                    }));
                }
            }
            let message = async_nats::jetstream::Message {
                message,
                context: js.clone(),
            };
            let (sequence, pending) = match message.info() {
                Ok(i) => (i.consumer_sequence, i.pending),
                Err(_) => {
                    let reply = message.reply.as_deref().unwrap_or_default().to_string();
                    return Err(bus(BusError::Sequence(reply)));
                }
            };
            // A lost delivery would be a hole in the file that only the
            // digest notices; say what happened instead.
            if sequence != last + 1 {
                return Err(FetchError::Gap {
                    name: self.name(),
                    last,
                    got: sequence,
                });
            }
            (last, idle) = (sequence, 0);
            got += message.payload.len() as u64;
            // More than declared is already wrong: stop before the disk
            // fills with whatever the store holds.
            if got > self.want.size {
                return Err(self.mismatch(
                    Mismatched::Size,
                    self.want.size,
                    format!("more than {}", self.want.size),
                ));
            }
            hasher.update(&message.payload);
            part.write(&message.payload).await?;
            // Done at the declared size, whatever follows: a chunk appended
            // to a stored object's subject (a writer chooses the subject, so
            // no grant can forbid it) is never read. Short of it with
            // nothing pending, the object is short.
            if got == self.want.size || pending == 0 {
                return Ok(got);
            }
        }
    }

    /// A flow-control request or a heartbeat. Unanswered flow control
    /// pauses delivery for good after about 1 MB; a heartbeat names the
    /// last delivery, so a lost tail shows as a gap instead of a stall.
    /// `true` for a heartbeat of a consumer with nothing left to send.
    async fn control(&self, message: &async_nats::Message, last: u64) -> Result<bool, FetchError> {
        let bus = self.bus();
        let headers = message.headers.as_ref();
        let stalled = headers.and_then(|h| h.get(CONSUMER_STALLED));
        let mut answered = false;
        for reply in [message.reply.as_deref(), stalled.map(|v| v.as_str())]
            .into_iter()
            .flatten()
        {
            self.client
                .publish(reply.to_string(), Default::default())
                .await
                .map_err(|e| bus(BusError::FlowControl(e)))?;
            answered = true;
        }
        let sent = headers
            .and_then(|h| h.get(async_nats::header::NATS_LAST_CONSUMER))
            .and_then(|v| v.as_str().parse::<u64>().ok());
        match sent {
            Some(sent) if sent > last => Err(FetchError::Gap {
                name: self.name(),
                last,
                got: sent,
            }),
            Some(sent) => Ok(sent == last && !answered),
            None => Ok(false),
        }
    }

    async fn create_consumer(&self) -> Result<(), BusError> {
        let config = consumer::Config {
            name: Some(self.consumer.to_string()),
            deliver_subject: Some(self.deliver.to_string()),
            deliver_policy: DeliverPolicy::All,
            ack_policy: AckPolicy::None,
            // Must equal the filter in the create subject (error 10131).
            filter_subject: artifact::chunks(self.nuid),
            flow_control: true,
            idle_heartbeat: HEARTBEAT,
            inactive_threshold: INACTIVE_THRESHOLD,
            memory_storage: true,
            num_replicas: 1,
            ..Default::default()
        };
        let body =
            serde_json::json!({ "stream_name": STREAM, "config": config, "action": "create" });
        let reply = self
            .client
            .request(
                artifact::consumer_create(self.consumer, self.nuid),
                body.to_string().into(),
            )
            .await
            .map_err(BusError::Request)?;
        match serde_json::from_slice::<Response<consumer::Info>>(&reply.payload)
            .map_err(BusError::Answer)?
        {
            Response::Ok(_) => Ok(()),
            Response::Err { error } => Err(BusError::Consumer(error)),
        }
    }
}

/// The file a download is written to, beside its destination (one
/// filesystem, so the rename is atomic). Removed when dropped uncommitted:
/// on an error, a timeout or a refusal alike, no partial file stays.
struct Partial {
    path: PathBuf,
    file: Option<tokio::fs::File>,
}

impl Partial {
    async fn create(dest: &Path) -> Result<Partial, FetchError> {
        let io = |action, path: &Path| {
            let path = path.to_path_buf();
            move |source| FetchError::Io {
                action,
                path,
                source,
            }
        };
        let Some(file_name) = dest.file_name() else {
            return Err(io("write to", dest)(std::io::Error::from(
                std::io::ErrorKind::InvalidInput,
            )));
        };
        let path = dest.with_file_name(format!(
            ".{}.partial-{}",
            file_name.to_string_lossy(),
            random_token(8)
        ));
        let file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .await
            .map_err(io("create", &path))?;
        Ok(Partial {
            path,
            file: Some(file),
        })
    }

    fn io(&self, action: &'static str) -> impl FnOnce(std::io::Error) -> FetchError + use<> {
        let path = self.path.clone();
        move |source| FetchError::Io {
            action,
            path,
            source,
        }
    }

    async fn write(&mut self, bytes: &[u8]) -> Result<(), FetchError> {
        let err = self.io("write");
        match self.file.as_mut() {
            Some(f) => f.write_all(bytes).await.map_err(err),
            None => Err(err(std::io::ErrorKind::NotConnected.into())),
        }
    }

    /// Synced, then renamed onto `dest`, then the directory synced: after
    /// a crash `dest` is either absent or whole.
    async fn commit(mut self, dest: &Path) -> Result<(), FetchError> {
        if let Some(mut f) = self.file.take() {
            f.flush().await.map_err(self.io("write"))?;
            f.sync_all().await.map_err(self.io("sync"))?;
        }
        tokio::fs::rename(&self.path, dest)
            .await
            .map_err(self.io("rename"))?;
        let dir = match dest.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        // Renamed: nothing is left to remove, whatever the sync says.
        self.path = PathBuf::new();
        let sync = async { tokio::fs::File::open(&dir).await?.sync_all().await };
        sync.await.map_err(|source| FetchError::Io {
            action: "sync",
            path: dir,
            source,
        })
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if !self.path.as_os_str().is_empty() {
            // Close before removing; the error is moot (it may be gone).
            drop(self.file.take());
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

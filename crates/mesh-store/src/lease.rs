//! The controller's lease: of the controllers sharing one store, exactly one
//! is active.
//!
//! PostgreSQL: a session advisory lock, held on a connection of its own that
//! the server ends after the lease's length without a word from it
//! (`idle_session_timeout`), so a controller frozen or cut off loses the
//! lock by the server's clock, not its own. Taking the lock moves the
//! fencing epoch in `controller_lease`; every write transaction of a fenced
//! [`Store`] first reads its epoch `FOR SHARE`, so the epoch cannot move
//! while one of the holder's writes is open, and once it has moved no write
//! of the old epoch lands — a deposed controller whose pool connections
//! outlived its lock (frozen, it kept them all) writes nothing more.
//!
//! SQLite holds one controller: a lock on a file beside the database, and a
//! second controller is refused at once, naming the first.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use mesh_files::lock::{Claim, DirLock, LockError};
use sqlx::Connection as _;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use tokio::sync::watch;

use crate::error::{BackendKind, StoreError};
use crate::records::LeaseRecord;
use crate::{Backend, Store, now_ms, with_pool};

/// The advisory lock the lease is (the migrations take 7046218).
const LEASE_LOCK: i64 = 7_046_219;

/// Beside a SQLite database: held by its one controller.
const SQLITE_LOCK_SUFFIX: &str = "-controller.lock";

const SQLITE_CLAIM: Claim = Claim {
    holder: "mesh controller",
    what: "the store",
    option: "--store",
};

/// What a fenced store checks its writes against, shared by its clones.
#[derive(Debug)]
pub(crate) struct Fence {
    epoch: AtomicI64,
    /// The epoch a write found moved past; none while it holds.
    deposed: watch::Sender<Option<i64>>,
}

impl Fence {
    pub(crate) fn epoch(&self) -> i64 {
        self.epoch.load(Ordering::SeqCst)
    }

    pub(crate) fn deposed(&self, epoch: i64) {
        self.deposed.send_replace(Some(epoch));
    }
}

/// Who a controller is, as it writes itself into the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// `mesh controller on HOST (pid N, DIR)`: who `mesh status` names.
    pub holder: String,
    /// Where it serves HTTP.
    pub http: Option<String>,
}

/// Why a lease held is held no more.
#[derive(Debug, thiserror::Error)]
pub enum LeaseLost {
    #[error("the lease moved to epoch {now} ({holder}); this controller held epoch {held}")]
    Moved { held: i64, now: i64, holder: String },
    /// The lock's session ended: the store went away, or its server ended
    /// the session after the lease's length without a word from it. Whether
    /// another controller holds the lease now is not known yet.
    #[error("the lease's session with the store ended")]
    Session(#[source] StoreError),
}

/// A controller's claim on the lease; taken with [`Lease::try_take`].
pub struct Lease {
    /// Unfenced: the epoch is moved and read outside any fence.
    store: Store,
    me: Candidate,
    ttl: Duration,
    held: Option<i64>,
    fence: Arc<Fence>,
    how: How,
}

enum How {
    Postgres {
        connect: Box<PgConnectOptions>,
        conn: Option<PgConnection>,
    },
    Sqlite {
        lock_file: PathBuf,
        database: PathBuf,
        lock: Option<DirLock>,
    },
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("store", &self.store)
            .field("me", &self.me)
            .field("ttl", &self.ttl)
            .field("held", &self.held)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// A claim on the lease for `me`, whose session the server ends after
    /// `ttl` without a word (PostgreSQL); nothing is taken yet.
    pub fn lease(&self, me: Candidate, ttl: Duration) -> Lease {
        let how = match &self.backend {
            Backend::Postgres(pool) => How::Postgres {
                connect: Box::new((*pool.connect_options()).clone()),
                conn: None,
            },
            Backend::Sqlite(pool) => {
                let database = pool.connect_options().get_filename().to_path_buf();
                let mut name = database.file_name().unwrap_or_default().to_os_string();
                name.push(SQLITE_LOCK_SUFFIX);
                How::Sqlite {
                    lock_file: database.with_file_name(name),
                    database,
                    lock: None,
                }
            }
        };
        let (deposed, _) = watch::channel(None);
        Lease {
            store: Store {
                fence: None,
                ..self.clone()
            },
            me,
            ttl,
            held: None,
            fence: Arc::new(Fence {
                epoch: AtomicI64::new(0),
                deposed,
            }),
            how,
        }
    }

    /// This store with every write checked against `lease`'s epoch: once
    /// the lease has moved on, a write is [`StoreError::Deposed`].
    pub fn fenced_by(&self, lease: &Lease) -> Store {
        Store {
            fence: Some(lease.fence.clone()),
            ..self.clone()
        }
    }

    /// The epoch this store's writes are fenced at; none when unfenced.
    pub(crate) fn fence_epoch(&self) -> Option<i64> {
        self.fence.as_ref().map(|f| f.epoch())
    }

    /// Resolves with the epoch once a write of this fenced store found the
    /// lease moved past it; never on an unfenced store.
    pub async fn deposed(&self) -> i64 {
        let Some(fence) = &self.fence else {
            return std::future::pending().await;
        };
        let mut rx = fence.deposed.subscribe();
        let found = rx.wait_for(Option::is_some).await.map(|e| *e);
        match found {
            Ok(e) => e.unwrap_or_default(),
            // The fence lives as long as this store: never.
            Err(_) => std::future::pending().await,
        }
    }

    /// Whether this store's fence still holds (always, unfenced): for what
    /// a controller does outside the store — writing the users file — and
    /// must not do once deposed.
    pub async fn confirm_fence(&self) -> Result<(), StoreError> {
        with_pool!(self, |pool| {
            let tx = self.begin_write_on(pool).await?;
            tx.rollback().await?;
            Ok(())
        })
    }

    /// Who holds the lease (or held it, and may have died holding it), or
    /// that its last holder released it; none before any controller took
    /// it.
    pub async fn lease_record(&self) -> Result<Option<LeaseRecord>, StoreError> {
        let row: Option<(i64, String, Option<String>, i64)> = with_pool!(self, |pool| {
            Ok(sqlx::query_as(
                "SELECT epoch, holder, http, since FROM controller_lease WHERE id = 1 AND epoch > 0",
            )
            .fetch_optional(pool)
            .await?)
        })?;
        Ok(row.map(|(epoch, holder, http, since)| LeaseRecord {
            epoch,
            holder: (!holder.is_empty()).then_some(holder),
            http,
            since,
        }))
    }
}

const MOVE_EPOCH: &str = "UPDATE controller_lease SET epoch = epoch + 1, holder = $1, http = $2, since = $3 \
     WHERE id = 1 RETURNING epoch";

/// The record of a lease given up, unless another controller took it since.
const RELEASED: &str =
    "UPDATE controller_lease SET holder = '', http = NULL, since = $1 WHERE id = 1 AND epoch = $2";

impl Lease {
    /// The epoch held; none while standing by.
    pub fn epoch(&self) -> Option<i64> {
        self.held
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Tries once to take the lease: the epoch taken, or none while another
    /// controller holds it (PostgreSQL). On SQLite another holder is
    /// [`StoreError::ControllerRunning`]: the store holds one controller.
    /// Taken again after a lost session, the epoch moves again and the
    /// fence follows it.
    pub async fn try_take(&mut self) -> Result<Option<i64>, StoreError> {
        let pg = |e| StoreError::classify(BackendKind::Postgres, e);
        let epoch = match &mut self.how {
            How::Postgres { connect, conn } => {
                let c = match conn {
                    Some(c) => c,
                    None => {
                        // Ended by the server once it hears nothing for the
                        // lease's length: a frozen holder loses the lock.
                        let opts = connect
                            .as_ref()
                            .clone()
                            .application_name("mesh controller lease")
                            .options([(
                                "idle_session_timeout",
                                format!("{}ms", self.ttl.as_millis().max(1)),
                            )]);
                        conn.insert(PgConnection::connect_with(&opts).await.map_err(pg)?)
                    }
                };
                let taken = async {
                    let (locked,): (bool,) = sqlx::query_as("SELECT pg_try_advisory_lock($1)")
                        .bind(LEASE_LOCK)
                        .fetch_one(&mut *c)
                        .await?;
                    if !locked {
                        return Ok(None);
                    }
                    // Waits for the deposed holder's open writes (their
                    // share lock on the row) to end, so none lands after.
                    let (epoch,): (i64,) = sqlx::query_as(MOVE_EPOCH)
                        .bind(&self.me.holder)
                        .bind(self.me.http.as_deref())
                        .bind(now_ms())
                        .fetch_one(&mut *c)
                        .await?;
                    Ok(Some(epoch))
                }
                .await;
                match taken {
                    Ok(e) => e,
                    Err(e) => {
                        // A broken session is made anew next time.
                        *conn = None;
                        return Err(pg(e));
                    }
                }
            }
            How::Sqlite {
                lock_file,
                database,
                lock,
            } => {
                if lock.is_none() {
                    match DirLock::acquire_file(lock_file, database, SQLITE_CLAIM) {
                        Ok(l) => *lock = Some(l),
                        Err(LockError::Held { holder, .. }) => {
                            let recorded = self.store.lease_record().await.ok().flatten();
                            return Err(StoreError::ControllerRunning {
                                store: self.store.url().to_string(),
                                holder: recorded
                                    .and_then(|r| r.holder)
                                    .unwrap_or_else(|| holder.to_string()),
                            });
                        }
                        Err(e) => {
                            return Err(StoreError::Invalid {
                                what: "the controller's lock beside the store",
                                detail: e.to_string(),
                            });
                        }
                    }
                }
                let me = self.me.clone();
                let store = &self.store;
                let epoch: i64 = with_pool!(store, |pool| {
                    let mut tx = store.begin_write_on(pool).await?;
                    let (epoch,): (i64,) = sqlx::query_as(MOVE_EPOCH)
                        .bind(&me.holder)
                        .bind(me.http.as_deref())
                        .bind(now_ms())
                        .fetch_one(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    Ok(epoch)
                })?;
                Some(epoch)
            }
        };
        if let Some(e) = epoch {
            self.held = Some(e);
            self.fence.epoch.store(e, Ordering::SeqCst);
            self.fence.deposed.send_replace(None);
        }
        Ok(epoch)
    }

    /// Confirms the lease is still this controller's; called more often
    /// than its length, this is also what keeps the session alive.
    pub async fn keep(&mut self) -> Result<(), LeaseLost> {
        let Some(held) = self.held else {
            return Err(LeaseLost::Moved {
                held: 0,
                now: 0,
                holder: "none: this controller holds no lease".into(),
            });
        };
        const READ: &str = "SELECT epoch, holder FROM controller_lease WHERE id = 1";
        let row: Result<(i64, String), StoreError> = match &mut self.how {
            How::Postgres { conn, .. } => match conn {
                None => Err(StoreError::Invalid {
                    what: "the lease",
                    detail: "its session is gone".into(),
                }),
                Some(c) => {
                    let read =
                        tokio::time::timeout(self.ttl, sqlx::query_as(READ).fetch_one(&mut *c))
                            .await;
                    match read {
                        Ok(Ok(r)) => Ok(r),
                        Ok(Err(e)) => Err(StoreError::classify(BackendKind::Postgres, e)),
                        Err(_) => Err(StoreError::Invalid {
                            what: "the lease",
                            detail: format!("the store did not answer within {:?}", self.ttl),
                        }),
                    }
                }
            },
            How::Sqlite { .. } => {
                let store = &self.store;
                with_pool!(store, |pool| Ok(sqlx::query_as(READ)
                    .fetch_one(pool)
                    .await?))
            }
        };
        match row {
            Ok((now, _)) if now == held => Ok(()),
            Ok((now, holder)) => {
                self.held = None;
                self.fence.deposed(held);
                self.drop_session();
                Err(LeaseLost::Moved { held, now, holder })
            }
            Err(e) => {
                if let How::Postgres { conn, .. } = &mut self.how {
                    *conn = None;
                }
                Err(LeaseLost::Session(e))
            }
        }
    }

    /// Gives the lease up (a standby may take it at once) and stops
    /// holding anything. The record says so first, while the lease is
    /// still held (once it is let go, the next holder writes its own name
    /// there): `mesh status` then names no stopped controller as holding
    /// it. That write is bounded by the lease's length; its error (the
    /// record then names this controller until the next one takes the
    /// lease) is returned once the lease is given up all the same.
    pub async fn release(&mut self) -> Result<(), StoreError> {
        let mut said = Ok(());
        if let Some(held) = self.held.take() {
            let store = &self.store;
            let write = async {
                with_pool!(store, |pool| {
                    sqlx::query(RELEASED)
                        .bind(now_ms())
                        .bind(held)
                        .execute(pool)
                        .await?;
                    Ok(())
                })
            };
            said = match tokio::time::timeout(self.ttl, write).await {
                Ok(r) => r,
                Err(_) => Err(StoreError::Invalid {
                    what: "the lease",
                    detail: format!("the store did not record its release within {:?}", self.ttl),
                }),
            };
        }
        if let How::Postgres { conn: Some(c), .. } = &mut self.how {
            let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
                .bind(LEASE_LOCK)
                .execute(&mut *c)
                .await;
        }
        self.drop_session();
        said
    }

    fn drop_session(&mut self) {
        match &mut self.how {
            How::Postgres { conn, .. } => {
                // Closing the session releases the advisory lock.
                *conn = None;
            }
            How::Sqlite { lock, .. } => *lock = None,
        }
    }
}

//! mesh-store: the mesh's records on SQLite (embedded default) or PostgreSQL.
//!
//! One [`Store`] type dispatches to either backend; every statement is written
//! once (portable SQL, `$N` placeholders, which sqlx's SQLite driver also
//! binds by number) and expanded for both pool types by the internal
//! `with_pool!` macro, so the two backends cannot drift apart in what they do. The conformance suite in
//! `tests/` runs the same bodies against both.
//!
//! Timestamps are unix milliseconds in `BIGINT` columns: portable, and
//! comparable inside SQL (the token spend compares `expires_at > now`).

mod error;
mod files;
mod lease;
mod migrations;
pub mod principal;
mod records;
mod secret;
mod store;
mod url;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};

pub use error::{
    BackendKind, DriverError, HashError, MalformedValue, RefusalKind, RefusalReason, StoreError,
    TokenRefused,
};
pub use lease::{Candidate, Lease, LeaseLost};
pub use migrations::SCHEMA_VERSION;
pub use records::*;
pub use secret::{PERSON_BCRYPT_COST, Secret, new_user_key, sha256_digest};
pub use store::{
    Actor, Appended, ArtifactRow, AuditEntry, AuditFilter, AuditRow, BusMove, DeploymentRow,
    FleetApplied, FleetChange, IssuedLogin, LiveLogin, Outcome, PreparedCredential, PreparedToken,
    Registration, ReportSeen, SharedUsersFile, Upload, prepare_machine_key, prepare_password,
    prepare_token, version_ok,
};
pub use url::{DEFAULT_URL, redact_url};

use migrations::{CREATE_SCHEMA_TABLE, MIGRATIONS};

/// Unix time in milliseconds.
pub type Millis = i64;

pub fn now_ms() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(duration_ms)
        .unwrap_or(0)
}

/// The store's schema version; 0 before the first migration.
const CURRENT_VERSION: &str = "SELECT COALESCE(MAX(version), 0) FROM mesh_schema";

/// How a store is opened.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Connections in the pool. Concurrent callers beyond this wait.
    pub max_connections: u32,
    /// How long a call waits for a connection before it fails as
    /// [`StoreError::Unavailable`]. Short, so the store window opens promptly
    /// instead of every call hanging while the database is away.
    pub acquire_timeout: Duration,
    /// SQLite only: how long a writer waits for another writer's lock before
    /// giving up (without it a concurrent write fails at once with BUSY).
    pub busy_timeout: Duration,
    /// PostgreSQL only: how long a session may sit in an open transaction
    /// saying nothing before the server ends it. A controller sets its
    /// lease's length: frozen mid-transaction, it would otherwise hold the
    /// lease row's share lock, and no standby could move the epoch past it.
    pub idle_in_transaction: Option<Duration>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            max_connections: 8,
            acquire_timeout: Duration::from_secs(5),
            busy_timeout: Duration::from_secs(10),
            idle_in_transaction: None,
        }
    }
}

/// Whether opening may create and migrate the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Create,
    Existing,
}

#[derive(Clone)]
pub(crate) enum Backend {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// The mesh's records. Cheap to clone (a pool handle).
#[derive(Clone)]
pub struct Store {
    pub(crate) backend: Backend,
    /// The URL with any password replaced, for messages.
    redacted_url: String,
    /// Set on a controller's store once it holds the lease: every write
    /// transaction checks the epoch first (see [`lease`]).
    pub(crate) fence: Option<Arc<lease::Fence>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.kind())
            .field("url", &self.redacted_url)
            .finish()
    }
}

/// An internal failure inside a backend-generic body: either a driver error
/// (classified once the backend is known) or an already-typed store error.
pub(crate) enum Fail {
    Db(sqlx::Error),
    Store(StoreError),
}

impl From<sqlx::Error> for Fail {
    fn from(e: sqlx::Error) -> Self {
        Fail::Db(e)
    }
}

impl From<StoreError> for Fail {
    fn from(e: StoreError) -> Self {
        Fail::Store(e)
    }
}

impl Fail {
    pub(crate) fn into_store_error(self, backend: BackendKind) -> StoreError {
        match self {
            Fail::Db(e) => StoreError::classify(backend, e),
            Fail::Store(e) => e,
        }
    }
}

/// Runs `body` with `$pool` bound to the concrete pool of whichever backend
/// the store has. The body is expanded once per backend, so it is written
/// once and type-checked against both drivers.
macro_rules! with_pool {
    ($store:expr, |$pool:ident| $($body:tt)*) => {{
        let backend = $store.kind();
        let result: ::std::result::Result<_, $crate::Fail> = match &$store.backend {
            $crate::Backend::Sqlite($pool) => async { $($body)* }.await,
            $crate::Backend::Postgres($pool) => async { $($body)* }.await,
        };
        result.map_err(|f| f.into_store_error(backend))
    }};
}
pub(crate) use with_pool;

/// Begins a transaction that will write.
pub(crate) trait BeginWrite {
    type Db: sqlx::Database;
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, Self::Db>, sqlx::Error>;
    /// Whether the lease is still at `epoch`, read in `tx` so that the
    /// epoch cannot move until `tx` ends (see [`lease`]).
    async fn epoch_holds(
        tx: &mut sqlx::Transaction<'static, Self::Db>,
        epoch: i64,
    ) -> Result<bool, sqlx::Error>;
}

impl BeginWrite for SqlitePool {
    type Db = sqlx::Sqlite;
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, sqlx::Error> {
        // IMMEDIATE takes the write lock up front (waiting out busy_timeout).
        // A deferred transaction that reads first and writes later fails at
        // once with BUSY when another writer got in between.
        self.begin_with("BEGIN IMMEDIATE").await
    }

    async fn epoch_holds(
        tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>,
        epoch: i64,
    ) -> Result<bool, sqlx::Error> {
        // The write lock IMMEDIATE took keeps every other writer out.
        let row: Option<(i64,)> =
            sqlx::query_as("SELECT epoch FROM controller_lease WHERE id = 1 AND epoch = $1")
                .bind(epoch)
                .fetch_optional(&mut **tx)
                .await?;
        Ok(row.is_some())
    }
}

impl BeginWrite for PgPool {
    type Db = sqlx::Postgres;
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
        self.begin().await
    }

    async fn epoch_holds(
        tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
        epoch: i64,
    ) -> Result<bool, sqlx::Error> {
        // FOR SHARE: a standby's move of the epoch waits for this
        // transaction to end, and one that moved it first leaves no row
        // here (the condition is checked again on the newest row).
        let row: Option<(i64,)> = sqlx::query_as(
            "SELECT epoch FROM controller_lease WHERE id = 1 AND epoch = $1 FOR SHARE",
        )
        .bind(epoch)
        .fetch_optional(&mut **tx)
        .await?;
        Ok(row.is_some())
    }
}

impl Store {
    /// Begins a write transaction on `pool` (this store's own): on a
    /// fenced store, refused as [`StoreError::Deposed`] once the lease has
    /// moved past its epoch.
    pub(crate) async fn begin_write_on<P: BeginWrite>(
        &self,
        pool: &P,
    ) -> Result<sqlx::Transaction<'static, P::Db>, Fail> {
        let mut tx = pool.begin_write().await?;
        if let Some(fence) = &self.fence {
            let epoch = fence.epoch();
            if !P::epoch_holds(&mut tx, epoch).await? {
                // Taken again meanwhile (after a lost session): the fence
                // moved with the lease, and this write is still ours.
                let now = fence.epoch();
                if now == epoch || !P::epoch_holds(&mut tx, now).await? {
                    drop(tx);
                    fence.deposed(now);
                    return Err(StoreError::Deposed { epoch: now }.into());
                }
            }
        }
        Ok(tx)
    }
}

/// Whether `url` names a store mesh can open, without opening it: a command
/// checks it before it writes anything else (a secrets directory, say).
pub fn check_url(url: &str) -> Result<(), StoreError> {
    url::parse(url).map(|_| ())
}

/// Which backend `url` names, without opening it.
pub fn url_kind(url: &str) -> Result<BackendKind, StoreError> {
    Ok(match url::parse(url)? {
        url::Target::Sqlite(_) => BackendKind::Sqlite,
        url::Target::Postgres(_) => BackendKind::Postgres,
    })
}

impl Store {
    /// Opens the store at `url` (`sqlite://PATH` or `postgres://...`) and
    /// brings its schema up to [`SCHEMA_VERSION`].
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        Store::open_with(url, StoreOptions::default()).await
    }

    pub async fn open_with(url: &str, options: StoreOptions) -> Result<Store, StoreError> {
        Store::open_at(url, options, SCHEMA_VERSION).await
    }

    /// Opens the store migrating only up to `version`. For tests of bringing an
    /// older store forward; mesh itself always opens at [`SCHEMA_VERSION`].
    #[doc(hidden)]
    pub async fn open_at(
        url: &str,
        options: StoreOptions,
        version: i64,
    ) -> Result<Store, StoreError> {
        let store = Store::connect(url, &options, Mode::Create).await?;
        if let Err(e) = store.migrate(version).await {
            store.close().await;
            return Err(e);
        }
        Ok(store)
    }

    /// Opens the store at `url` for reading only: one that does not exist is
    /// [`StoreError::Missing`] (nothing is created), one at an older schema is
    /// [`StoreError::SchemaTooOld`] (nothing is migrated). For commands that
    /// only read: a typo'd path must not leave an empty store behind.
    pub async fn open_existing(url: &str) -> Result<Store, StoreError> {
        Store::open_existing_with(url, StoreOptions::default()).await
    }

    pub async fn open_existing_with(url: &str, options: StoreOptions) -> Result<Store, StoreError> {
        let store = Store::connect(url, &options, Mode::Existing).await?;
        if let Err(e) = store.check_current().await {
            store.close().await;
            return Err(e);
        }
        Ok(store)
    }

    /// The one place a store is made: its URL is kept only with the password
    /// replaced, so neither `url()` nor `Debug` can show it.
    fn new(backend: Backend, url: &str) -> Store {
        Store {
            backend,
            redacted_url: redact_url(url),
            fence: None,
        }
    }

    async fn connect(url: &str, options: &StoreOptions, mode: Mode) -> Result<Store, StoreError> {
        match url::parse(url)? {
            url::Target::Sqlite(path) => {
                let sqlite = |e| StoreError::classify(BackendKind::Sqlite, e);
                // Followed: a link to the database is the operator's choice;
                // a directory, FIFO or device is no database, and left to
                // SQLite it would read as an outage.
                if let Ok(meta) = std::fs::metadata(&path)
                    && !meta.is_file()
                {
                    let kind = if meta.is_dir() {
                        "a directory"
                    } else {
                        "not a regular file"
                    };
                    return Err(StoreError::BadUrl {
                        url: redact_url(url),
                        reason: format!(
                            "{} is {kind}, not a database file; give the store a file's path (--store sqlite://PATH or MESH_STORE)",
                            path.display()
                        ),
                    });
                }
                match mode {
                    Mode::Create => {
                        files::create_private(&path).map_err(|e| StoreError::Unavailable {
                            backend: BackendKind::Sqlite,
                            source: DriverError(sqlx::Error::Io(e)),
                        })?
                    }
                    // Checked here, not left to SQLite: its "unable to open"
                    // reads as an outage and names no path.
                    Mode::Existing if !path.is_file() => {
                        return Err(StoreError::Missing {
                            url: redact_url(url),
                        });
                    }
                    Mode::Existing => {}
                }
                let mut connect = sqlx::sqlite::SqliteConnectOptions::new()
                    .filename(&path)
                    .create_if_missing(false)
                    .foreign_keys(true)
                    .busy_timeout(options.busy_timeout);
                connect = match mode {
                    // A reader changes nothing, not even the journal mode.
                    Mode::Existing => connect.read_only(true),
                    // WAL: readers never block the writer, so concurrent
                    // callers share the file for real. FULL: a committed
                    // token spend or credential survives a power cut, not
                    // only a process crash.
                    Mode::Create => connect
                        .journal_mode(SqliteJournalMode::Wal)
                        .synchronous(SqliteSynchronous::Full),
                };
                let pool = SqlitePoolOptions::new()
                    .max_connections(options.max_connections)
                    .acquire_timeout(options.acquire_timeout)
                    .connect_with(connect)
                    .await
                    .map_err(sqlite)?;
                Ok(Store::new(Backend::Sqlite(pool), url))
            }
            url::Target::Postgres(connect) => {
                let connect = match mode {
                    // The server itself refuses any write on these sessions.
                    Mode::Existing => connect.options([("default_transaction_read_only", "on")]),
                    Mode::Create => *connect,
                };
                let connect = match options.idle_in_transaction {
                    Some(d) => connect.options([(
                        "idle_in_transaction_session_timeout",
                        format!("{}ms", d.as_millis().max(1)),
                    )]),
                    None => connect,
                };
                let pool = PgPoolOptions::new()
                    .max_connections(options.max_connections)
                    .acquire_timeout(options.acquire_timeout)
                    .connect_with(connect)
                    .await
                    .map_err(|e| StoreError::classify(BackendKind::Postgres, e))?;
                Ok(Store::new(Backend::Postgres(pool), url))
            }
        }
    }

    pub fn kind(&self) -> BackendKind {
        match self.backend {
            Backend::Sqlite(_) => BackendKind::Sqlite,
            Backend::Postgres(_) => BackendKind::Postgres,
        }
    }

    /// The store's URL with any password replaced by `***`.
    pub fn url(&self) -> &str {
        &self.redacted_url
    }

    /// Closes every connection; later calls fail as unavailable.
    pub async fn close(&self) {
        match &self.backend {
            Backend::Sqlite(p) => p.close().await,
            Backend::Postgres(p) => p.close().await,
        }
    }

    /// The database's own version: SQLite's library version, or the
    /// PostgreSQL server's (what `mesh-bench` prints in its header).
    pub async fn backend_version(&self) -> Result<String, StoreError> {
        match &self.backend {
            Backend::Sqlite(pool) => {
                let r: Result<(String,), sqlx::Error> = sqlx::query_as("SELECT sqlite_version()")
                    .fetch_one(pool)
                    .await;
                r.map(|(v,)| format!("SQLite {v}"))
                    .map_err(|e| StoreError::classify(BackendKind::Sqlite, e))
            }
            Backend::Postgres(pool) => {
                let r: Result<(String,), sqlx::Error> =
                    sqlx::query_as("SHOW server_version").fetch_one(pool).await;
                r.map(|(v,)| format!("PostgreSQL {v}"))
                    .map_err(|e| StoreError::classify(BackendKind::Postgres, e))
            }
        }
    }

    /// The schema version recorded in the store.
    pub async fn schema_version(&self) -> Result<i64, StoreError> {
        with_pool!(self, |pool| {
            let (v,): (i64,) = sqlx::query_as(CURRENT_VERSION).fetch_one(pool).await?;
            Ok(v)
        })
    }

    /// Applies every migration newer than the store's version, up to `target`.
    async fn migrate(&self, target: i64) -> Result<(), StoreError> {
        let backend = self.kind();
        let tables = self.tables().await?;
        refuse_foreign(&tables)?;
        let store_id = secret::generate_id();
        with_pool!(self, |pool| {
            sqlx::query(CREATE_SCHEMA_TABLE).execute(pool).await?;
            let (current,): (i64,) = sqlx::query_as(CURRENT_VERSION).fetch_one(pool).await?;
            // Refuse before touching anything: a newer mesh may have moved
            // records this binary would misread or overwrite.
            if current > SCHEMA_VERSION {
                return Err(StoreError::SchemaTooNew {
                    found: current,
                    supported: SCHEMA_VERSION,
                }
                .into());
            }
            for m in MIGRATIONS
                .iter()
                .filter(|m| m.version > current && m.version <= target)
            {
                let mut tx = pool.begin_write().await?;
                if backend == BackendKind::Postgres {
                    // Two controllers opening one fresh database at once would
                    // both try to create the tables; the lock makes one wait.
                    sqlx::query("SELECT pg_advisory_xact_lock(7046218)")
                        .execute(&mut *tx)
                        .await?;
                }
                let (now_at,): (i64,) = sqlx::query_as(CURRENT_VERSION).fetch_one(&mut *tx).await?;
                if now_at >= m.version {
                    tx.rollback().await?;
                    continue;
                }
                sqlx::raw_sql(&m.sql_for(backend, &store_id))
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(
                    "INSERT INTO mesh_schema (version, name, applied_at) VALUES ($1, $2, $3)",
                )
                .bind(m.version)
                .bind(m.name)
                .bind(now_ms())
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
            }
            Ok(())
        })
    }
}

/// The tables in the store's database (SQLite: the file; PostgreSQL: the
/// current schema), by name.
const TABLES_SQLITE: &str = "SELECT name FROM sqlite_master \
     WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name";
const TABLES_POSTGRES: &str = "SELECT CAST(table_name AS TEXT) FROM information_schema.tables \
     WHERE table_schema = current_schema() ORDER BY table_name";

impl Store {
    async fn tables(&self) -> Result<Vec<String>, StoreError> {
        let rows: Vec<(String,)> = with_pool!(self, |pool| {
            let sql = match self.kind() {
                BackendKind::Sqlite => TABLES_SQLITE,
                BackendKind::Postgres => TABLES_POSTGRES,
            };
            Ok(sqlx::query_as(sql).fetch_all(pool).await?)
        })?;
        Ok(rows.into_iter().map(|(t,)| t).collect())
    }

    /// Refuses, before anything is read, a database that is not a mesh store
    /// at [`SCHEMA_VERSION`]: a reader never migrates, so it names the
    /// command that does.
    async fn check_current(&self) -> Result<(), StoreError> {
        let tables = self.tables().await?;
        refuse_foreign(&tables)?;
        if !tables.iter().any(|t| t == "mesh_schema") {
            return Err(StoreError::Missing {
                url: self.redacted_url.clone(),
            });
        }
        let found = self.schema_version().await?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::SchemaTooNew {
                found,
                supported: SCHEMA_VERSION,
            });
        }
        if found < SCHEMA_VERSION {
            return Err(StoreError::SchemaTooOld {
                found,
                current: SCHEMA_VERSION,
            });
        }
        Ok(())
    }

    /// The store's identity: a random id recorded at its first migration,
    /// so what lives beside a store (its secrets) can say whose it is.
    pub async fn id(&self) -> Result<String, StoreError> {
        with_pool!(self, |pool| {
            let (id,): (String,) = sqlx::query_as("SELECT id FROM mesh_identity")
                .fetch_one(pool)
                .await?;
            Ok(id)
        })
    }
}

/// A database holding tables but no `mesh_schema` belongs to something else:
/// creating mesh's tables among them would mix two applications' records.
fn refuse_foreign(tables: &[String]) -> Result<(), StoreError> {
    if tables.is_empty() || tables.iter().any(|t| t == "mesh_schema") {
        return Ok(());
    }
    Err(StoreError::Foreign {
        count: tables.len(),
        some: tables.iter().take(3).cloned().collect(),
    })
}

fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Postgres-backed store whose URL carries a password; the pool is lazy,
    /// so nothing connects.
    #[tokio::test]
    async fn debug_never_shows_the_password() {
        let url = "postgres://u:hunter2@127.0.0.1/db";
        let Ok(url::Target::Postgres(connect)) = url::parse(url) else {
            panic!("{url} is a postgres url")
        };
        let pool = PgPoolOptions::new().connect_lazy_with(*connect);
        let store = Store::new(Backend::Postgres(pool), url);
        let shown = format!("{store:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("u:***@127.0.0.1"), "{shown}");
        assert!(!store.url().contains("hunter2"), "{}", store.url());
    }

    /// Each spare key a report announces, and each enrolment's, is checked
    /// against every credential by its value: without an index that is a
    /// scan of the whole table per key (at 10,000 nodes, the controller's
    /// fan-out spent its time there).
    #[tokio::test]
    async fn a_credential_is_found_by_its_key_through_an_index() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("mesh.db").display());
        let store = Store::open(&url).await.unwrap();
        let Backend::Sqlite(pool) = &store.backend else {
            panic!("{url} is a sqlite store")
        };
        // An index whose first column is the key: the plan of a lookup
        // depends on the table's size, this does not.
        let indexes: Vec<(String,)> = sqlx::query_as(
            "SELECT il.name FROM pragma_index_list('credentials') il \
             JOIN pragma_index_info(il.name) ii ON ii.seqno = 0 WHERE ii.name = 'nkey'",
        )
        .fetch_all(pool)
        .await
        .unwrap();
        assert!(
            !indexes.is_empty(),
            "no index of credentials leads with nkey"
        );
    }
}

//! What every conformance case shares: the fixture that opens a store on one
//! backend, raw access to its database, and small record builders.

use std::time::Duration;

use mesh_core::names::Name;
use mesh_store::*;
use sqlx::Row;

pub(crate) fn n(s: &str) -> Name {
    Name::new(s).expect("test names are valid")
}

/// Short timeouts so an outage shows as an error in seconds, not a hang.
pub(crate) fn options() -> StoreOptions {
    StoreOptions {
        max_connections: 8,
        acquire_timeout: Duration::from_secs(3),
        busy_timeout: Duration::from_secs(20),
        idle_in_transaction: None,
    }
}

enum Keep {
    Sqlite(#[allow(dead_code)] tempfile::TempDir),
    Postgres(#[allow(dead_code)] mesh_testkit::postgres::TestDatabase),
}

/// One backend under test. `store` is declared before `_keep` so it drops
/// (closing connections) before the database goes away.
pub(crate) struct Fixture {
    pub(crate) store: Store,
    pub(crate) url: String,
    _keep: Keep,
}

impl Fixture {
    pub(crate) async fn sqlite() -> Fixture {
        let dir = tempfile::tempdir().expect("temp dir");
        // A nested path: opening must create the parent directories.
        let url = format!("sqlite://{}/state/mesh/mesh.db", dir.path().display());
        let store = Store::open_with(&url, options())
            .await
            .expect("open sqlite");
        Fixture {
            store,
            url,
            _keep: Keep::Sqlite(dir),
        }
    }

    pub(crate) async fn postgres() -> Fixture {
        let db = tokio::task::spawn_blocking(mesh_testkit::postgres::fresh_database)
            .await
            .expect("join")
            .expect("a fresh PostgreSQL database from mesh-testkit");
        let url = db.url().to_string();
        let store = Store::open_with(&url, options())
            .await
            .expect("open postgres");
        Fixture {
            store,
            url,
            _keep: Keep::Postgres(db),
        }
    }

    pub(crate) async fn reopen(&self) -> Result<Store, StoreError> {
        Store::open_with(&self.url, options()).await
    }

    /// Runs one statement straight against the database, bypassing the store.
    /// Runs one statement straight against the fixture's database, saying
    /// whether the database accepted it.
    pub(crate) async fn raw_try_execute(&self, sql: &str) -> Result<(), sqlx::Error> {
        match self.store.kind() {
            BackendKind::Sqlite => {
                let pool = sqlx::SqlitePool::connect(&self.url).await?;
                let r = sqlx::query(sql).execute(&pool).await.map(drop);
                pool.close().await;
                r
            }
            BackendKind::Postgres => {
                let pool = sqlx::PgPool::connect(&self.url).await?;
                let r = sqlx::query(sql).execute(&pool).await.map(drop);
                pool.close().await;
                r
            }
        }
    }

    pub(crate) async fn raw_execute(&self, sql: &str) {
        self.raw_execute_at(&self.url, sql).await
    }

    /// Runs one statement straight against the database at `url` (of the
    /// fixture's backend), bypassing any store.
    pub(crate) async fn raw_execute_at(&self, url: &str, sql: &str) {
        match self.store.kind() {
            BackendKind::Sqlite => {
                let pool = sqlx::SqlitePool::connect(url).await.expect("raw sqlite");
                sqlx::query(sql).execute(&pool).await.expect(sql);
                pool.close().await;
            }
            BackendKind::Postgres => {
                let pool = sqlx::PgPool::connect(url).await.expect("raw postgres");
                sqlx::query(sql).execute(&pool).await.expect(sql);
                pool.close().await;
            }
        }
    }

    /// Every table in the store, read from the database catalogue so that a
    /// table added later is covered without anyone remembering to list it.
    pub(crate) async fn tables(&self) -> Vec<String> {
        let tables: Vec<(String,)> = match self.store.kind() {
            BackendKind::Sqlite => {
                let pool = sqlx::SqlitePool::connect(&self.url)
                    .await
                    .expect("raw sqlite");
                let tables = sqlx::query_as("SELECT name FROM sqlite_master WHERE type = 'table'")
                    .fetch_all(&pool)
                    .await
                    .expect("tables");
                pool.close().await;
                tables
            }
            BackendKind::Postgres => {
                let pool = sqlx::PgPool::connect(&self.url)
                    .await
                    .expect("raw postgres");
                let tables = sqlx::query_as(
                    "SELECT CAST(table_name AS TEXT) FROM information_schema.tables \
                     WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'",
                )
                .fetch_all(&pool)
                .await
                .expect("tables");
                pool.close().await;
                tables
            }
        };
        assert!(tables.len() > 10, "{tables:?}");
        tables.into_iter().map(|(t,)| t).collect()
    }

    /// Every value of every column of every table, as bytes, labelled
    /// `table.column`.
    pub(crate) async fn every_value(&self) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        let tables = self.tables().await;
        match self.store.kind() {
            BackendKind::Sqlite => {
                let pool = sqlx::SqlitePool::connect(&self.url)
                    .await
                    .expect("raw sqlite");
                for table in tables {
                    let columns: Vec<(String,)> =
                        sqlx::query_as("SELECT name FROM pragma_table_info($1)")
                            .bind(&table)
                            .fetch_all(&pool)
                            .await
                            .expect("columns");
                    for (column,) in columns {
                        let sql = format!("SELECT CAST(\"{column}\" AS BLOB) FROM \"{table}\"");
                        for row in sqlx::query(&sql).fetch_all(&pool).await.expect(&sql) {
                            let v: Option<Vec<u8>> = row.try_get(0).expect("bytes");
                            out.push((format!("{table}.{column}"), v.unwrap_or_default()));
                        }
                    }
                }
                pool.close().await;
            }
            BackendKind::Postgres => {
                let pool = sqlx::PgPool::connect(&self.url)
                    .await
                    .expect("raw postgres");
                for table in tables {
                    let columns: Vec<(String,)> = sqlx::query_as(
                        "SELECT CAST(column_name AS TEXT) FROM information_schema.columns \
                         WHERE table_schema = current_schema() AND table_name = $1",
                    )
                    .bind(&table)
                    .fetch_all(&pool)
                    .await
                    .expect("columns");
                    for (column,) in columns {
                        let sql = format!(
                            "SELECT convert_to(CAST(\"{column}\" AS TEXT), 'UTF8') FROM \"{table}\""
                        );
                        for row in sqlx::query(&sql).fetch_all(&pool).await.expect(&sql) {
                            let v: Option<Vec<u8>> = row.try_get(0).expect("bytes");
                            out.push((format!("{table}.{column}"), v.unwrap_or_default()));
                        }
                    }
                }
                pool.close().await;
            }
        }
        out
    }
}

/// A machine's key pair made where it runs: the store is handed the public
/// key; the seed is returned for the test to verify and scan with.
pub(crate) async fn record_key(
    s: &Store,
    principal: &mesh_core::authority::PrincipalKind,
) -> Result<Secret, StoreError> {
    let (seed, public) = new_user_key();
    s.record_machine_key(principal, &public)
        .await
        .map(|()| seed)
}

/// Whether any 58-byte window starting `SU` decodes as an NKey user seed (a
/// bare "SU" also turns up inside base32 keys and bcrypt hashes).
pub(crate) fn holds_seed(value: &[u8]) -> bool {
    (0..value.len().saturating_sub(57)).any(|i| {
        value[i..].starts_with(b"SU")
            && std::str::from_utf8(&value[i..i + 58])
                .is_ok_and(|w| nkeys::KeyPair::from_seed(w).is_ok())
    })
}

pub(crate) fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A report from n1 with one outcome: git running.
pub(crate) fn git_running_on_n1(received_at: Millis) -> Report {
    Report {
        node: n("n1"),
        declaration_version: 1,
        outcomes: vec![ModuleOutcome {
            module: n("git"),
            state: ModuleState::Running,
            restarts: 0,
            pinned: None,
            health: None,
        }],
        received_at,
        refused: None,
        report_id: None,
    }
}

/// The principal of every credential in `s`, in order.
pub(crate) async fn principals(s: &Store) -> Vec<String> {
    let all = s.credentials().await.unwrap();
    all.into_iter().map(|c| c.principal).collect()
}

pub(crate) fn assert_refused(r: Result<Enrolled, StoreError>, want: fn(&RefusalReason) -> bool) {
    match r {
        Err(StoreError::TokenRefused(TokenRefused { reason, .. })) => {
            assert!(want(&reason), "refused for the wrong reason: {reason}")
        }
        other => panic!("expected a token refusal, got {other:?}"),
    }
}

//! Opening: a reader never creates or migrates a store; a database of
//! another application is refused before anything is written; every store
//! has an identity; the SQLite file is its owner's only.

use crate::fixture::*;
use mesh_store::*;

/// The URL of an empty database: SQLite a file beside the fixture's (not
/// created), PostgreSQL the fixture's database with every table dropped.
async fn empty_url(fx: &Fixture, file: &str) -> String {
    match fx.store.kind() {
        BackendKind::Sqlite => fx.url.replace("mesh.db", file),
        BackendKind::Postgres => {
            fx.store.close().await;
            let tables = fx.tables().await.join(", ");
            fx.raw_execute(&format!("DROP TABLE {tables}")).await;
            fx.url.clone()
        }
    }
}

/// Table names in the database at `url`, read around the store.
async fn raw_tables(fx: &Fixture, url: &str) -> Vec<String> {
    let rows: Vec<(String,)> = match fx.store.kind() {
        BackendKind::Sqlite => {
            let pool = sqlx::SqlitePool::connect(url).await.expect("raw sqlite");
            let t =
                sqlx::query_as("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
                    .fetch_all(&pool)
                    .await
                    .unwrap();
            pool.close().await;
            t
        }
        BackendKind::Postgres => {
            let pool = sqlx::PgPool::connect(url).await.expect("raw postgres");
            let t = sqlx::query_as(
                "SELECT CAST(table_name AS TEXT) FROM information_schema.tables \
                 WHERE table_schema = current_schema() ORDER BY table_name",
            )
            .fetch_all(&pool)
            .await
            .unwrap();
            pool.close().await;
            t
        }
    };
    rows.into_iter().map(|(t,)| t).collect()
}

async fn a_reader_never_creates_a_store(fx: &Fixture) {
    let url = empty_url(fx, "typo.db").await;
    let err = Store::open_existing_with(&url, options())
        .await
        .expect_err("no store there");
    assert!(matches!(err, StoreError::Missing { .. }), "{err:?}");
    let shown = err.to_string();
    assert!(
        shown.contains("mesh fleet load FILE --catalogue DIR"),
        "{shown}"
    );
    assert!(shown.contains(&redact_url(&url)), "{shown}");
    match fx.store.kind() {
        BackendKind::Sqlite => {
            let path = url.trim_start_matches("sqlite://");
            assert!(!std::path::Path::new(path).exists(), "{path} was created");
        }
        BackendKind::Postgres => assert_eq!(raw_tables(fx, &url).await, Vec::<String>::new()),
    }
}

async fn a_reader_reads_and_cannot_write(fx: &Fixture) {
    fx.store.add_node(&n("n1"), &[]).await.unwrap();
    let reader = Store::open_existing_with(&fx.url, options()).await.unwrap();
    assert!(reader.node(&n("n1")).await.unwrap().is_some());
    assert_eq!(reader.id().await.unwrap(), fx.store.id().await.unwrap());
    let write = reader.add_node(&n("n2"), &[]).await;
    assert!(write.is_err(), "a read-only store wrote: {write:?}");
    assert!(fx.store.node(&n("n2")).await.unwrap().is_none());
    reader.close().await;
}

async fn a_reader_refuses_an_older_store_naming_the_upgrade(fx: &Fixture) {
    let url = empty_url(fx, "old.db").await;
    let old = Store::open_at(&url, options(), 3).await.unwrap();
    old.close().await;
    let err = Store::open_existing_with(&url, options())
        .await
        .expect_err("older schema");
    match &err {
        StoreError::SchemaTooOld { found, current } => {
            assert_eq!((*found, *current), (3, SCHEMA_VERSION))
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("mesh fleet load"), "{err}");
    // Not brought forward by the reader.
    let again = Store::open_at(&url, options(), 3).await.unwrap();
    assert_eq!(again.schema_version().await.unwrap(), 3);
    again.close().await;
}

async fn another_applications_database_is_refused_untouched(fx: &Fixture) {
    let url = empty_url(fx, "app.db").await;
    if fx.store.kind() == BackendKind::Sqlite {
        // The other application's file exists already.
        let path = url.trim_start_matches("sqlite://");
        std::fs::write(path, b"").unwrap();
    }
    for t in ["invoices", "customers", "audit", "users"] {
        fx.raw_execute_at(&url, &format!("CREATE TABLE {t} (id BIGINT)"))
            .await;
    }
    let before = raw_tables(fx, &url).await;
    for err in [
        Store::open_with(&url, options())
            .await
            .expect_err("foreign"),
        Store::open_existing_with(&url, options())
            .await
            .expect_err("foreign"),
    ] {
        match &err {
            StoreError::Foreign { count, some } => {
                assert_eq!(*count, 4);
                assert_eq!(some, &["audit", "customers", "invoices"]);
            }
            other => panic!("{other:?}"),
        }
        assert!(
            err.to_string().contains("audit, customers, invoices"),
            "{err}"
        );
    }
    assert_eq!(raw_tables(fx, &url).await, before, "nothing created");
}

async fn a_store_keeps_its_identity(fx: &Fixture) {
    let id = fx.store.id().await.unwrap();
    assert_eq!(id.len(), 32, "{id}");
    let again = fx.reopen().await.unwrap();
    assert_eq!(again.id().await.unwrap(), id);
    again.close().await;
    // Another store gets another identity.
    let other_url = empty_url(fx, "other.db").await;
    let other = Store::open_with(&other_url, options()).await.unwrap();
    let other_id = other.id().await.unwrap();
    other.close().await;
    if fx.store.kind() == BackendKind::Sqlite {
        assert_ne!(other_id, id);
    }
}

/// SQLite only (PostgreSQL keeps its own files): the directory is 0700, the
/// file and its `-wal`/`-shm` are 0600 whatever the umask gives.
async fn the_sqlite_files_are_their_owners_only(fx: &Fixture) {
    use std::os::unix::fs::PermissionsExt;
    if fx.store.kind() != BackendKind::Sqlite {
        return;
    }
    fx.store.add_node(&n("n1"), &[]).await.unwrap();
    let path = std::path::PathBuf::from(fx.url.trim_start_matches("sqlite://"));
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    for suffix in ["", "-wal", "-shm"] {
        let p = std::path::PathBuf::from(format!("{}{suffix}", path.display()));
        assert!(p.exists(), "{} exists while the store is open", p.display());
        assert_eq!(mode(&p), 0o600, "{}", p.display());
    }
}

conformance!(
    a_reader_never_creates_a_store,
    a_reader_reads_and_cannot_write,
    a_reader_refuses_an_older_store_naming_the_upgrade,
    another_applications_database_is_refused_untouched,
    a_store_keeps_its_identity,
    the_sqlite_files_are_their_owners_only,
);

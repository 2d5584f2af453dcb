//! Outages: the store being away is `Unavailable`, and only then; PostgreSQL
//! and SQLite only, outside the conformance pairs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fixture::*;
use mesh_store::*;

/// The store window rests on this: with the database stopped a call fails as
/// `Unavailable` (promptly), and once it is back the same call succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_outage_is_unavailable_then_recovers() {
    use mesh_testkit::postgres::PgCluster;
    let cluster = tokio::task::spawn_blocking(PgCluster::start)
        .await
        .expect("join")
        .expect("an owned PostgreSQL cluster");
    let cluster = Arc::new(cluster);
    let c = cluster.clone();
    let db = tokio::task::spawn_blocking(move || c.create_database())
        .await
        .expect("join")
        .expect("database");
    let store = Store::open_with(db.url(), options()).await.unwrap();
    store.add_node(&n("n1"), &[]).await.unwrap();
    let report = git_running_on_n1(7);
    store.record_report(&report).await.unwrap();

    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.stop())
        .await
        .expect("join")
        .expect("stop postgres");

    for attempt in 0..2 {
        let started = Instant::now();
        match store.record_report(&report).await {
            Err(e @ StoreError::Unavailable { .. }) => {
                assert!(e.is_unavailable());
                assert_eq!(e.to_string(), "the postgresql store is unavailable");
            }
            other => panic!("attempt {attempt} with the database stopped: {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "an outage must fail promptly, took {:?}",
            started.elapsed()
        );
    }
    match store.node(&n("n1")).await {
        Err(StoreError::Unavailable { .. }) => {}
        other => panic!("a read with the database stopped: {other:?}"),
    }

    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.start_again())
        .await
        .expect("join")
        .expect("restart postgres");
    let id = store
        .record_report(&report)
        .await
        .expect("the same call succeeds once the database is back");
    assert_eq!(
        Recorded::New(store.latest_report(&n("n1")).await.unwrap().unwrap().id),
        id
    );
    store.close().await;
    drop(db);
}

/// A refusal is not an outage: the controller must not retry it forever.
#[tokio::test]
async fn a_refusal_is_not_unavailable() {
    let fx = Fixture::sqlite().await;
    fx.store.add_node(&n("n1"), &[]).await.unwrap();
    let e = fx.store.add_node(&n("n1"), &[]).await.unwrap_err();
    assert!(!e.is_unavailable(), "{e:?}");
}

/// A SQLite file that cannot be opened is an outage, typed as such.
#[tokio::test]
async fn sqlite_that_cannot_be_opened_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let url = format!("sqlite://{}/mesh.db", file.display());
    match Store::open_with(&url, options()).await {
        Err(StoreError::Unavailable {
            backend: BackendKind::Sqlite,
            ..
        }) => {}
        other => panic!("opening under a file: {other:?}"),
    }
}

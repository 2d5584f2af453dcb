//! Two writers moving the records' revision in opposite orders wait in
//! turn on PostgreSQL instead of one being aborted as a deadlock (SQLite
//! takes one writer at a time: nothing to interleave).

use std::time::Duration;

use crate::fixture::*;
use mesh_store::BackendKind;

const UPSERT: &str = "INSERT INTO amqp_hashes (nkey, hash, recorded_at) VALUES ($1, 'h', 1) \
     ON CONFLICT (nkey) DO UPDATE SET hash = excluded.hash";

async fn writers_in_opposite_orders_wait_in_turn(fx: &Fixture) {
    if fx.store.kind() == BackendKind::Sqlite {
        return;
    }
    let pool = sqlx::PgPool::connect(&fx.url).await.unwrap();
    let mut a = pool.begin().await.unwrap();
    sqlx::query(UPSERT)
        .bind("UA")
        .execute(&mut *a)
        .await
        .unwrap();
    let other = pool.clone();
    let b = tokio::spawn(async move {
        let mut b = other.begin().await?;
        sqlx::query(UPSERT).bind("UB").execute(&mut *b).await?;
        sqlx::query(UPSERT).bind("UA").execute(&mut *b).await?;
        b.commit().await
    });
    // B is waiting: on the revision (before its first row), or — were the
    // revision taken after the rows — holding UB, which A now wants.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = sqlx::query(UPSERT).bind("UB").execute(&mut *a).await;
    assert!(second.is_ok(), "A: {second:?}");
    a.commit().await.unwrap();
    let b = b.await.unwrap();
    assert!(b.is_ok(), "B: {b:?}");
    let (revision,): (i64,) = sqlx::query_as("SELECT revision FROM records_revision")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(
        revision >= 4,
        "each statement moved the revision: {revision}"
    );
    pool.close().await;
}

conformance!(writers_in_opposite_orders_wait_in_turn);

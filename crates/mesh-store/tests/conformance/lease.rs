//! The controller lease: one holder at a time, and a deposed holder's
//! writes refused. PostgreSQL's lease is a lock whose session the server
//! ends; SQLite's is a lock beside the file that refuses a second controller.

use std::time::{Duration, Instant};

use crate::fixture::*;
use mesh_store::*;

fn me(who: &str) -> Candidate {
    Candidate {
        holder: format!("mesh controller on test (pid 1, /{who})"),
        http: Some(format!("127.0.0.1:74{}", who.len())),
    }
}

/// The epoch a report row was recorded under.
async fn report_epochs(fx: &Fixture) -> Vec<Option<i64>> {
    const SQL: &str = "SELECT epoch FROM reports ORDER BY id";
    match fx.store.kind() {
        BackendKind::Sqlite => {
            let pool = sqlx::SqlitePool::connect(&fx.url).await.unwrap();
            let rows: Vec<(Option<i64>,)> = sqlx::query_as(SQL).fetch_all(&pool).await.unwrap();
            pool.close().await;
            rows.into_iter().map(|(e,)| e).collect()
        }
        BackendKind::Postgres => {
            let pool = sqlx::PgPool::connect(&fx.url).await.unwrap();
            let rows: Vec<(Option<i64>,)> = sqlx::query_as(SQL).fetch_all(&pool).await.unwrap();
            pool.close().await;
            rows.into_iter().map(|(e,)| e).collect()
        }
    }
}

/// A holder that stops speaking loses the lease by the server's clock (its
/// session ended after the lease's length); the next holder's epoch is
/// higher, and the deposed holder's store refuses every write from then on
/// — nothing it writes lands — while an unfenced store (an operator's
/// command) writes as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_silent_holder_is_deposed_and_writes_nothing_more() {
    let fx = Fixture::postgres().await;
    let ttl = Duration::from_millis(1500);
    let a = fx.reopen().await.unwrap();
    let b = fx.reopen().await.unwrap();
    assert_eq!(fx.store.lease_record().await.unwrap(), None);

    let mut la = a.lease(me("a"), ttl);
    let mut lb = b.lease(me("bb"), ttl);
    assert_eq!(la.try_take().await.unwrap(), Some(1));
    assert_eq!(lb.try_take().await.unwrap(), None, "one holder at a time");
    let rec = fx.store.lease_record().await.unwrap().unwrap();
    assert_eq!((rec.epoch, rec.holder), (1, Some(me("a").holder)));
    assert_eq!(rec.http.as_deref(), Some("127.0.0.1:741"));

    let fa = a.fenced_by(&la);
    fa.add_node(&n("n1"), &[]).await.unwrap();
    fa.record_report(&git_running_on_n1(5)).await.unwrap();
    la.keep().await.unwrap();

    // `a` says nothing more: its session ends after the lease's length.
    let started = Instant::now();
    let epoch = loop {
        if let Some(e) = lb.try_take().await.unwrap() {
            break e;
        }
        assert!(
            started.elapsed() < ttl * 10,
            "the silent holder's lock was never released"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(epoch, 2);
    assert!(
        started.elapsed() >= ttl / 2,
        "taken before the lease ran out"
    );

    let e = fa.add_node(&n("n2"), &[]).await.unwrap_err();
    assert!(matches!(e, StoreError::Deposed { epoch: 1 }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "this controller's lease (epoch 1) has passed to another controller; it writes nothing more"
    );
    let e = fa.record_report(&git_running_on_n1(6)).await.unwrap_err();
    assert!(matches!(e, StoreError::Deposed { .. }), "{e:?}");
    let e = fa.share_users_file("deposed").await.unwrap_err();
    assert!(matches!(e, StoreError::Deposed { .. }), "{e:?}");
    assert_eq!(fx.store.shared_users_file_revision().await.unwrap(), None);
    assert!(fx.store.node(&n("n2")).await.unwrap().is_none());
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(1), fa.deposed())
            .await
            .expect("the refusal is told"),
        1
    );
    match la.keep().await {
        Err(LeaseLost::Session(_)) => {}
        other => panic!("the ended session is not noticed: {other:?}"),
    }
    assert_eq!(la.try_take().await.unwrap(), None, "`b` holds it now");

    let fb = b.fenced_by(&lb);
    fb.record_report(&git_running_on_n1(7)).await.unwrap();
    assert_eq!(report_epochs(&fx).await, [Some(1), Some(2)]);
    // An operator's command is no controller: never fenced.
    fx.store.add_node(&n("n3"), &[]).await.unwrap();
    fx.store.record_report(&git_running_on_n1(8)).await.unwrap();
    assert_eq!(report_epochs(&fx).await, [Some(1), Some(2), None]);

    // A deposed holder giving up what it no longer holds leaves the
    // record of the one that does.
    la.release().await.unwrap();
    let rec = fx.store.lease_record().await.unwrap().unwrap();
    assert_eq!((rec.epoch, rec.holder), (2, Some(me("bb").holder)));
    // Given up, the record names no holder, and the lease is taken at once.
    lb.release().await.unwrap();
    let rec = fx.store.lease_record().await.unwrap().unwrap();
    assert_eq!((rec.epoch, rec.holder, rec.http), (2, None, None));
    assert_eq!(la.try_take().await.unwrap(), Some(3));
    let rec = fx.store.lease_record().await.unwrap().unwrap();
    assert_eq!(rec.holder, Some(me("a").holder));
    let e = fb.add_node(&n("n4"), &[]).await.unwrap_err();
    assert!(matches!(e, StoreError::Deposed { epoch: 2 }), "{e:?}");
}

/// A holder that keeps its lease keeps it past its length, and a lease
/// moved under it is noticed by the next keep.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_kept_lease_holds_and_a_moved_one_is_told() {
    let fx = Fixture::postgres().await;
    let ttl = Duration::from_millis(800);
    let mut la = fx.store.lease(me("a"), ttl);
    let mut lb = fx.store.lease(me("b"), ttl);
    assert_eq!(la.try_take().await.unwrap(), Some(1));
    for _ in 0..8 {
        tokio::time::sleep(ttl / 4).await;
        la.keep().await.unwrap();
        assert_eq!(lb.try_take().await.unwrap(), None);
    }
    // The row moved without the lock (a store restored, an operator's
    // hand): the holder is told on its next keep.
    fx.raw_execute("UPDATE controller_lease SET epoch = 9, holder = 'someone else'")
        .await;
    match la.keep().await {
        Err(LeaseLost::Moved {
            held: 1,
            now: 9,
            holder,
        }) => assert_eq!(holder, "someone else"),
        other => panic!("{other:?}"),
    }
}

/// SQLite holds one controller: the second is refused at once, naming the
/// first; once the first lets go, the second takes the lease, and the
/// first's writes are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_a_second_controller_is_refused_naming_the_first() {
    let fx = Fixture::sqlite().await;
    let other = fx.reopen().await.unwrap();
    let mut la = fx.store.lease(me("a"), Duration::from_secs(5));
    let mut lb = other.lease(me("b"), Duration::from_secs(5));
    assert_eq!(la.try_take().await.unwrap(), Some(1));
    let e = lb.try_take().await.unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, StoreError::ControllerRunning { .. }), "{e:?}");
    assert!(
        text.contains(&me("a").holder) && text.contains("PostgreSQL") && text.contains(&fx.url),
        "{text}"
    );
    let fa = fx.store.fenced_by(&la);
    fa.add_node(&n("n1"), &[]).await.unwrap();
    la.keep().await.unwrap();
    // The users file of a clustered bus: each share a new revision.
    assert_eq!(other.shared_users_file().await.unwrap(), None);
    assert_eq!(fa.share_users_file("first").await.unwrap(), 1);
    assert_eq!(fa.share_users_file("second").await.unwrap(), 2);
    assert_eq!(other.shared_users_file_revision().await.unwrap(), Some(2));

    // Given up (a clean stop), the record names no holder.
    la.release().await.unwrap();
    let rec = fx.store.lease_record().await.unwrap().unwrap();
    assert_eq!((rec.epoch, rec.holder, rec.http), (1, None, None));
    assert_eq!(lb.try_take().await.unwrap(), Some(2));
    let e = fa.add_node(&n("n2"), &[]).await.unwrap_err();
    assert!(matches!(e, StoreError::Deposed { epoch: 1 }), "{e:?}");
    // A deposed controller's composition reaches no server.
    let e = fa.share_users_file("deposed").await.unwrap_err();
    assert!(matches!(e, StoreError::Deposed { epoch: 1 }), "{e:?}");
    // Nor does a waiting command take its pass for the answer to a change.
    let e = fa.record_declared_through(99, 1).await.unwrap_err();
    assert!(matches!(e, StoreError::Deposed { epoch: 1 }), "{e:?}");
    assert_eq!(other.declared_through().await.unwrap(), None);
    assert_eq!(
        other.shared_users_file().await.unwrap(),
        Some(SharedUsersFile {
            revision: 2,
            text: "second".into()
        })
    );
    assert!(other.node(&n("n2")).await.unwrap().is_none());
    match la.keep().await {
        Err(LeaseLost::Moved { .. }) => {}
        other => panic!("{other:?}"),
    }
}

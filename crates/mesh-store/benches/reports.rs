//! Reports recorded per second, on SQLite and on PostgreSQL (via mesh-testkit).
//!
//! `cargo bench -p mesh-store --bench reports` — prints one line per backend
//! and concurrency. Each run is bounded by time (MESH_BENCH_SECONDS, default 3)
//! and talks only to a local file and a loopback PostgreSQL.
//!
//! A report here is what a host sends for a node running three modules: one
//! `reports` row and three `report_outcomes` rows, committed together.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mesh_core::names::Name;
use mesh_store::{ModuleOutcome, ModuleState, Report, Store, StoreOptions};

fn name(s: &str) -> Name {
    Name::new(s).expect("valid name")
}

fn report(i: u64) -> Report {
    Report {
        node: name("n1"),
        declaration_version: i64::try_from(i).unwrap_or(i64::MAX),
        outcomes: vec![
            ModuleOutcome {
                module: name("audit-log"),
                state: ModuleState::Running,
                restarts: 0,
                pinned: None,
                health: None,
            },
            ModuleOutcome {
                module: name("git"),
                state: ModuleState::Running,
                restarts: 0,
                pinned: None,
                health: None,
            },
            ModuleOutcome {
                module: name("packet-filter"),
                state: ModuleState::Failed {
                    reason: "exit status 1".into(),
                },
                restarts: 0,
                pinned: None,
                health: None,
            },
        ],
        received_at: 1_700_000_000_000,
        refused: None,
        report_id: None,
    }
}

/// Records reports from `writers` concurrent tasks for `window`; returns
/// (reports recorded, elapsed).
async fn measure(store: &Store, writers: usize, window: Duration) -> (u64, Duration) {
    let count = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + window;
    let mut tasks = Vec::new();
    for _ in 0..writers {
        let (store, count) = (store.clone(), count.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let i = count.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = store.record_report(&report(i)).await {
                    eprintln!("record_report failed: {e}");
                    count.fetch_sub(1, Ordering::Relaxed);
                    return;
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    (count.load(Ordering::Relaxed), started.elapsed())
}

async fn run(label: &str, store: Store, window: Duration) {
    store.add_node(&name("n1"), &[]).await.expect("add node");
    // Warm the pool and the statement caches.
    let _ = measure(&store, 1, Duration::from_millis(200)).await;
    for writers in [1, 8] {
        let (n, elapsed) = measure(&store, writers, window).await;
        let per_second = n as f64 / elapsed.as_secs_f64();
        println!(
            "{label:<10} writers={writers}  {n:>7} reports in {:>5.2}s  = {per_second:>8.0} reports/s",
            elapsed.as_secs_f64()
        );
    }
    store.close().await;
}

fn main() {
    let seconds: u64 = std::env::var("MESH_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let window = Duration::from_secs(seconds);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let options = StoreOptions::default();

        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}/mesh.db", dir.path().display());
        let sqlite = Store::open_with(&url, options.clone())
            .await
            .expect("open sqlite");
        run("sqlite", sqlite, window).await;

        match tokio::task::spawn_blocking(mesh_testkit::postgres::fresh_database)
            .await
            .expect("join")
        {
            Ok(db) => {
                let pg = Store::open_with(db.url(), options)
                    .await
                    .expect("open postgres");
                run("postgresql", pg, window).await;
                drop(db);
            }
            Err(e) => println!("postgresql skipped: no test database ({e})"),
        }
    });
}

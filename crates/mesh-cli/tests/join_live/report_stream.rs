//! A stream of reports as a host sends them, and what the store recorded
//! of it: for the tests that fault the mesh under reports and count what
//! was lost or recorded twice.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use mesh_core::names::Name;
use mesh_core::report::Report;

use crate::harness::Mesh;

/// How long a count may take to reach what was sent.
const LONG: Duration = Duration::from_secs(90);

/// A client with host n's own key (from its state dir).
pub async fn as_host(mesh: &Mesh, node: &str) -> async_nats::Client {
    let seed = std::fs::read_to_string(mesh.host_dir(node).join("nkey.seed")).unwrap();
    let principal = format!("host_{node}");
    mesh_bus::connect(&mesh.bus(&principal, seed.trim(), Some(format!("_INBOX.{principal}"))))
        .await
        .unwrap()
}

/// Report `<tag>-<i>` of `node`, answering declaration `sequence` and
/// saying nothing else, with the subject it is published on.
pub fn report(node: &str, tag: &str, i: usize, sequence: u64) -> (String, Report) {
    let node = Name::new(node).unwrap();
    let subject = mesh_core::subjects::report(&node);
    let r = Report {
        id: format!("{tag}-{i}"),
        node,
        sequence,
        modules: vec![],
        refused: None,
        address: None,
        spare_keys: Vec::new(),
        amqp_hashes: Default::default(),
    };
    (subject, r)
}

/// Publishes `n` reports from `node` with ids `<tag>-<i>`, each confirmed
/// stored in CONTROL, answering declaration 0 (a node given nothing yet).
pub async fn send_reports(
    client: &async_nats::Client,
    node: &str,
    tag: &str,
    range: std::ops::Range<usize>,
) {
    send_reports_at(client, node, tag, 0, range).await
}

/// As [`send_reports`], answering declaration `sequence`: a report about
/// an older one than the newest is settled, never recorded.
pub async fn send_reports_at(
    client: &async_nats::Client,
    node: &str,
    tag: &str,
    sequence: u64,
    range: std::ops::Range<usize>,
) {
    let js = jetstream::new(client.clone());
    let mut acks = Vec::new();
    for i in range {
        let (subject, r) = report(node, tag, i, sequence);
        acks.push(js.publish(subject, r.to_json().into()).await.unwrap());
    }
    for a in acks {
        a.await.expect("CONTROL stores the report");
    }
}

/// Publishes reports `tag-<i>` as [`send_reports_at`] does, each retried
/// until CONTROL stores it (a server lost mid-stream leaves a publish
/// unanswered until a new leader is elected), counting in `sent`.
pub async fn send_reports_retrying(
    client: async_nats::Client,
    node: &'static str,
    tag: &'static str,
    sequence: u64,
    n: usize,
    sent: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> usize {
    let js = jetstream::new(client);
    let mut retries = 0;
    for i in 0..n {
        let (subject, r) = report(node, tag, i, sequence);
        let started = Instant::now();
        loop {
            let stored = async {
                js.publish(subject.clone(), r.to_json().into())
                    .await
                    .ok()?
                    .await
                    .ok()
            };
            if tokio::time::timeout(Duration::from_secs(5), stored)
                .await
                .ok()
                .flatten()
                .is_some()
            {
                break;
            }
            retries += 1;
            assert!(started.elapsed() < LONG, "report {tag}-{i} never stored");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
    retries
}

/// How many of `node`'s recorded reports carry an id starting `tag-`, and
/// how many of those ids were recorded more than once.
pub async fn count(url: &str, node: &str, tag: &str) -> (usize, usize) {
    let s = mesh_store::Store::open(url).await.unwrap();
    let all = s.reports(&Name::new(node).unwrap(), 100_000).await.unwrap();
    s.close().await;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for r in all {
        if let Some(id) = r
            .report
            .report_id
            .filter(|i| i.starts_with(&format!("{tag}-")))
        {
            *seen.entry(id).or_default() += 1;
        }
    }
    (seen.len(), seen.values().filter(|n| **n > 1).count())
}

pub async fn wait_count(url: &str, node: &str, tag: &str, want: usize) -> (usize, usize) {
    let mut got = (0, 0);
    for _ in 0..(LONG.as_millis() / 100) {
        got = count(url, node, tag).await;
        if got.0 >= want {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    got
}

/// (report id, epoch) of every report `node` sent with ids `tag-…`.
pub async fn epochs(url: &str, node: &str, tag: &str) -> BTreeMap<String, Option<i64>> {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    let rows: Vec<(String, Option<i64>)> = sqlx::query_as(
        "SELECT report_id, epoch FROM reports WHERE node = $1 AND report_id LIKE $2",
    )
    .bind(node)
    .bind(format!("{tag}-%"))
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    rows.into_iter().collect()
}

/// The epoch of the lease as the store records it.
pub async fn lease_epoch(url: &str) -> i64 {
    let s = mesh_store::Store::open(url).await.unwrap();
    let r = s.lease_record().await.unwrap().expect("a lease was taken");
    s.close().await;
    r.epoch
}

/// The server (1-based) that leads `stream`'s group, and that group's
/// other members as (name, current).
pub async fn leader_of(
    js: &jetstream::Context,
    stream: &str,
) -> Option<(usize, Vec<(String, bool)>)> {
    let mut s = js.get_stream(stream).await.ok()?;
    let info = s.info().await.ok()?;
    let cluster = info.cluster.clone()?;
    let leader = cluster.leader?;
    let i = leader.strip_prefix("mesh-")?.parse().ok()?;
    Some((
        i,
        cluster
            .replicas
            .iter()
            .map(|p| (p.name.clone(), p.current && !p.offline))
            .collect(),
    ))
}

/// Polls `f` every 200 ms until it holds or [`LONG`] passes.
pub async fn eventually<F: Future<Output = bool>>(mut f: impl FnMut() -> F) -> bool {
    let started = Instant::now();
    while started.elapsed() < LONG {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

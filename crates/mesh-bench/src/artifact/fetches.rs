//! The artifact phase's fetches: the hosts connected as themselves, many
//! fetches started at once and summarised, the reader's, the object
//! store's own, and the reads a host must be refused.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_nats::Client;
use async_nats::jetstream::{self, object_store::ObjectStore};
use mesh_bus::Refusals;
use mesh_bus::artifacts::{self, CHUNK_SIZE, FetchError, Stored, Wanted};
use mesh_core::declaration::ArtifactDecl;
use mesh_core::names::Name;
use mesh_core::subjects::artifact::BUCKET;
use mesh_host::HostState;
use mesh_host::artifacts::Cache;
use tokio::io::AsyncReadExt as _;
use tokio::task::JoinSet;

use super::Transfer;
use crate::ms;
use crate::stats::Spread;

/// Connections opened at once (each a TLS handshake on a shared machine).
const CONNECT_AT_ONCE: usize = 16;
/// How long a refused read may take to be refused.
const REFUSED_WITHIN: Duration = Duration::from_secs(30);

/// One fetching host: its recorded state, its connection, the refusals its
/// connection hears.
pub(super) struct Host {
    pub(super) state: HostState,
    pub(super) client: Client,
    refusals: Refusals,
}

/// Each host connected as itself (its key, its inbox), its refusals heard.
pub(super) async fn connect_hosts(states: Vec<HostState>) -> anyhow::Result<Vec<Host>> {
    use futures::StreamExt as _;
    futures::stream::iter(states)
        .map(|state| async move {
            let bus = state.bus_config()?;
            let refusals = Refusals::new();
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let heard = refusals.clone();
                let connected = mesh_bus::connect_with(&bus, move |o| {
                    o.event_callback(move |e| {
                        let heard = heard.clone();
                        async move { heard.note(&e) }
                    })
                })
                .await;
                match connected {
                    Ok(client) => {
                        return anyhow::Ok(Host {
                            state,
                            client,
                            refusals,
                        });
                    }
                    // The users file admitting its key may be a reload away.
                    Err(_) if Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => return Err(e).context(format!("connecting as {}", bus.principal)),
                }
            }
        })
        .buffered(CONNECT_AT_ONCE)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// One fetch's end: when, what its connection received, why it failed.
struct Outcome {
    at_ms: f64,
    received: u64,
    failure: Option<String>,
}

/// Runs `jobs` from one start, each returning its failure and what its
/// connection received.
async fn at_once<F>(jobs: Vec<F>) -> Vec<Outcome>
where
    F: Future<Output = (Option<String>, u64)> + Send + 'static,
{
    let start = Instant::now();
    let mut set = JoinSet::new();
    for job in jobs {
        set.spawn(async move {
            let (failure, received) = job.await;
            Outcome {
                at_ms: ms(start.elapsed()),
                received,
                failure,
            }
        });
    }
    let mut out = Vec::new();
    while let Some(joined) = set.join_next().await {
        out.push(joined.unwrap_or_else(|e| Outcome {
            at_ms: ms(start.elapsed()),
            received: 0,
            failure: Some(format!("the fetch's task ended: {e}")),
        }));
    }
    out
}

fn summarise(outcomes: &[Outcome], size: u64) -> Transfer {
    let ok: Vec<f64> = outcomes
        .iter()
        .filter(|o| o.failure.is_none())
        .map(|o| o.at_ms)
        .collect();
    let checked = ok.len();
    // Over the time to the last end, failed ones included: a failure that
    // took long is time the checked bytes took too.
    let span_ms = outcomes.iter().map(|o| o.at_ms).fold(0.0, f64::max);
    let received = outcomes.iter().map(|o| o.received);
    Transfer {
        fetches: outcomes.len(),
        checked,
        failed: outcomes.len() - checked,
        done: Spread::of(ok),
        mb_per_s: if span_ms > 0.0 {
            (checked as f64 * size as f64) / (span_ms / 1000.0) / 1e6
        } else {
            0.0
        },
        received_min: received.clone().min().unwrap_or(0),
        received_max: received.max().unwrap_or(0),
        first_failure: outcomes.iter().find_map(|o| o.failure.clone()),
    }
}

fn received(client: &Client) -> u64 {
    client.statistics().in_bytes.load(Ordering::Relaxed)
}

/// Every host fetches what its declaration names, at once, through its
/// cache (`Cache::ensure_all`, which calls `fetch` with the host's
/// connection and refusals), each checked against what was put.
pub(super) async fn fetch_declared(
    hosts: &[Host],
    decls: &[Option<ArtifactDecl>],
    put: &Stored,
) -> Transfer {
    let jobs: Vec<_> = hosts
        .iter()
        .zip(decls)
        .map(|(h, decl)| {
            let (client, refusals) = (h.client.clone(), h.refusals.clone());
            let cache = Cache::new(&h.state.dir);
            let node = h.state.node.clone();
            let (decl, put) = (decl.clone(), put.clone());
            async move {
                let Some(decl) = decl else {
                    return (Some("never declared".to_string()), 0);
                };
                let before = received(&client);
                let bus = mesh_bus::seam::Bus::Nats(mesh_bus::seam::NatsSide::new(client.clone()));
                let fetched = cache
                    .ensure_all(&bus, &node, &refusals, std::slice::from_ref(&decl))
                    .await;
                let got = received(&client).saturating_sub(before);
                (check_cached(fetched, &decl, &put).err(), got)
            }
        })
        .collect();
    summarise(&at_once(jobs).await, put.size)
}

/// The cached file is the bytes put: the declaration named them (size and
/// SHA-256, which the fetch checked the bytes against), and the file on
/// disk has their size.
fn check_cached(
    fetched: Result<BTreeMap<Name, PathBuf>, String>,
    decl: &ArtifactDecl,
    put: &Stored,
) -> Result<(), String> {
    let paths = fetched?;
    if decl.sha256 != put.sha256 || decl.size != put.size {
        return Err(format!(
            "declared {} bytes, sha256 {}; put {} bytes, sha256 {}",
            decl.size, decl.sha256, put.size, put.sha256
        ));
    }
    let path = paths
        .get(&decl.name)
        .ok_or_else(|| "the cache named no file".to_string())?;
    let len = std::fs::metadata(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    if len != put.size {
        return Err(format!("{} holds {len} bytes", path.display()));
    }
    Ok(())
}

/// async-nats's own get of the object, read to the end (it checks the
/// digest at the end), on each connection at once.
pub(super) async fn raw_gets(clients: &[Client], put: &Stored) -> anyhow::Result<Transfer> {
    let mut buckets: Vec<(Client, ObjectStore)> = Vec::with_capacity(clients.len());
    for c in clients {
        let bucket = jetstream::new(c.clone())
            .get_object_store(BUCKET)
            .await
            .context("opening the artifact bucket as the controller")?;
        buckets.push((c.clone(), bucket));
    }
    let jobs: Vec<_> = buckets
        .into_iter()
        .map(|(client, bucket)| {
            let (name, size) = (put.name.clone(), put.size);
            async move {
                let before = received(&client);
                let read = async {
                    let mut object = bucket.get(&name).await.map_err(|e| e.to_string())?;
                    let mut buf = vec![0u8; CHUNK_SIZE];
                    let mut got = 0u64;
                    loop {
                        let n = object.read(&mut buf).await.map_err(|e| e.to_string())?;
                        if n == 0 {
                            break;
                        }
                        got += n as u64;
                    }
                    if got == size {
                        Ok(())
                    } else {
                        Err(format!("read {got} of its {size} bytes"))
                    }
                };
                let failure = read.await.err();
                (failure, received(&client).saturating_sub(before))
            }
        })
        .collect();
    Ok(summarise(&at_once(jobs).await, put.size))
}

/// Every host tries to read `put`, which its declaration does not name:
/// how many were refused, and the first outcome that was not a refusal.
pub(super) async fn refused(hosts: &[Host], put: &Stored) -> (usize, Option<String>) {
    let mut set = JoinSet::new();
    for h in hosts {
        let (client, refusals) = (h.client.clone(), h.refusals.clone());
        let dest = h.state.dir.join("refused-read");
        let (put, node) = (put.clone(), h.state.node.clone());
        set.spawn(async move {
            let want = Wanted {
                name: &put.name,
                nuid: &put.nuid,
                size: put.size,
                sha256: &put.sha256,
            };
            match artifacts::fetch(&client, &refusals, &want, &dest, REFUSED_WITHIN).await {
                Err(FetchError::Refused { .. }) => Ok(()),
                Ok(_) => {
                    let _ = tokio::fs::remove_file(&dest).await;
                    Err(format!("node {node} read {} ungranted", put.name))
                }
                Err(e) => Err(format!("node {node} reading {}: {e}", put.name)),
            }
        });
    }
    let (mut count, mut first) = (0, None);
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(Ok(())) => count += 1,
            Ok(Err(e)) => {
                first.get_or_insert(e);
            }
            Err(e) => {
                first.get_or_insert(format!("a read's task ended: {e}"));
            }
        }
    }
    (count, first)
}

//! The artifact phase (DESIGN §6 "Artifacts"): one artifact fetched by many
//! hosts at once through the per-object reader
//! ([`mesh_bus::artifacts::fetch`], by way of the host's cache), beside the
//! object store's own unrestricted gets of the same object in the same run;
//! then a second version differing from it in one chunk, fetched again.
//!
//! The bench grants nothing itself. The fetching hosts are nodes of the mesh,
//! each with a state directory and keys made as an enrolment makes them and
//! its host key recorded; the artifact is put and recorded under a version
//! as `mesh artifact put` does it; and a module that runs
//! `${artifact:payload}` is assigned to every node, pinned at that version.
//! From those records the controller composes the users file that grants
//! each host the reads of that one object, makes it live, and only then
//! declares the artifact to the node. Each host connects with its own key,
//! reads its newest declaration, verifies it with the controller's key as a
//! host verifies one delivered, and fetches what it names into its cache.
//! These hosts run no `mesh_host::run` of their own. The bench is their
//! fetching side, so that it times the fetch alone and counts what each
//! connection received.

mod fetches;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_nats::jetstream;
use mesh_bus::BusConfig;
use mesh_bus::artifacts::{self, CHUNK_SIZE, Stored};
use mesh_controller::Genesis;
use mesh_core::declaration::{self, ArtifactDecl};
use mesh_core::names::Name;
use mesh_core::subjects::artifact::{STREAM, object_name};
use mesh_host::HostState;
use mesh_host::artifacts::Cache;
use mesh_store::{Store, Upload};
use serde::Serialize;

use crate::mesh::{connect_retrying, record_named_hosts};
use crate::stats::Spread;
use crate::{ms, note};
use fetches::{Host, connect_hosts, fetch_declared, raw_gets, refused};

/// The module the fetching hosts are assigned: it runs its artifact.
const MODULE: &str = "bench-artifact";
const ARTIFACT: &str = "payload";
const MANIFEST: &str = r#"[module]
name = "bench-artifact"
description = "mesh-bench's artifact phase: runs the artifact its version carries"

[run]
command = ["${artifact:payload}"]
"#;

fn node_name(i: usize) -> Name {
    Name::new(format!("art-{i:05}")).expect("a valid node name")
}

/// What the phase needs of the bench's mesh.
pub struct Inputs<'a> {
    pub store: &'a Store,
    pub genesis: &'a Genesis,
    /// The controller's connection: it puts the artifact.
    pub js: &'a jetstream::Context,
    /// The controller's bus configuration: the unrestricted gets use it.
    pub controller: &'a BusConfig,
    /// Where the hosts' state directories (and so their caches) go.
    pub hosts_dir: &'a Path,
    /// Where the artifact's source files go.
    pub work: &'a Path,
    pub hosts: usize,
    pub mib: u64,
}

/// Many fetches started at once.
#[derive(Debug, Clone, Serialize)]
pub struct Transfer {
    pub fetches: usize,
    /// Complete, of the size put, with the SHA-256 put.
    pub checked: usize,
    pub failed: usize,
    /// Per checked fetch: ms from the common start to its end.
    pub done: Spread,
    /// The checked fetches' bytes over the time to the last end (10^6 B/s).
    pub mb_per_s: f64,
    /// What each connection received meanwhile (NATS protocol after TLS:
    /// payloads and their headers): the fewest and the most bytes.
    pub received_min: u64,
    pub received_max: u64,
    pub first_failure: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SecondVersion {
    /// The chunk that differs from the first version (counting from 0).
    pub changed_chunk: u64,
    pub put_ms: f64,
    /// What the artifact stream holds more once it is put.
    pub stored_bytes: u64,
    /// Hosts refused its read while their declaration named the first version.
    pub refused_before: usize,
    /// Hosts whose cache held a file of its content before they fetched it.
    pub cached_before: usize,
    /// The first version stayed in every host's cache (false: removed, the
    /// hosts' filesystem having no room for both).
    pub first_kept: bool,
    /// From its pins recorded to every host's declaration naming it.
    pub declared_ms: f64,
    pub not_declared: usize,
    pub fetch: Transfer,
    /// From its pins recorded to the last fetch's end.
    pub moved_to_fetched_ms: f64,
    /// Hosts refused the first version once their declaration named this one.
    pub first_refused_after: usize,
    /// The first read that was not refused when it should have been.
    pub first_not_refused: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ArtifactResult {
    pub hosts: usize,
    pub bytes: u64,
    pub chunks: u64,
    pub put_ms: f64,
    /// From the pins recorded to every host's declaration naming it (the
    /// composition granting its reads is live by then).
    pub declared_ms: f64,
    pub not_declared: usize,
    /// Through the per-object reader, each host with its own key and
    /// grants, into its cache.
    pub reader: Transfer,
    /// async-nats's `ObjectStore::get` read to the end, as the controller,
    /// a connection each.
    pub object_store: Transfer,
    /// The reader's MB/s over the object store's.
    pub ratio: Option<f64>,
    pub second: SecondVersion,
}

impl ArtifactResult {
    /// What is wrong, as the bench's problems: a fetch that failed, a host
    /// never declared the artifact, a read that should have been refused.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let n = self.hosts;
        for (what, t) in [
            ("through the reader", &self.reader),
            ("by the object store's own gets", &self.object_store),
            ("of the second version", &self.second.fetch),
        ] {
            if t.failed > 0 {
                out.push(format!(
                    "artifact: {} of {} fetches {what} failed (first: {})",
                    t.failed,
                    t.fetches,
                    t.first_failure.as_deref().unwrap_or("?")
                ));
            }
        }
        for (version, missing) in [
            ("first", self.not_declared),
            ("second", self.second.not_declared),
        ] {
            if missing > 0 {
                out.push(format!(
                    "artifact: {missing} of {n} hosts were never declared its {version} version"
                ));
            }
        }
        let s = &self.second;
        if s.refused_before < n || s.first_refused_after < n {
            out.push(format!(
                "artifact: a read outside the declaration was not refused ({} of {n} before the move, {} of {n} after; first: {})",
                s.refused_before,
                s.first_refused_after,
                s.first_not_refused.as_deref().unwrap_or("?")
            ));
        }
        out
    }
}

/// One version put and recorded.
struct Version {
    stored: Stored,
    put_ms: f64,
}

pub async fn run(i: &Inputs<'_>) -> anyhow::Result<ArtifactResult> {
    let n = i.hosts.max(1);
    let size = i.mib * 1024 * 1024;
    let chunks = size.div_ceil(CHUNK_SIZE as u64);
    let module = Name::new(MODULE).expect("a valid name");
    let need = size * n as u64;
    let room = crate::facts::room(i.hosts_dir);
    if let Some(room) = room.filter(|r| *r < need) {
        anyhow::bail!(
            "{n} hosts' caches of {} MiB need {} MB under {}, which has room for {} MB; give fewer --artifact-hosts or --artifact-mib, or another --hosts-dir",
            i.mib,
            need / 1_000_000,
            i.hosts_dir.display(),
            room / 1_000_000
        );
    }
    artifacts::ensure_bucket(i.js)
        .await
        .context("the artifact store")?;
    i.store.register_module(&module, MANIFEST).await?;

    // The second version differs from the first in one chunk, the middle one.
    let changed_chunk = chunks / 2;
    let first = content(size, 0x6d65_7368);
    let second = with_chunk_changed(&first, changed_chunk);
    let v1 = put_version(i, &module, "v1", first).await?;
    let stream_bytes = stream_bytes(i.js).await?;

    note(format_args!(
        "artifact: {n} hosts recorded, pinned at its first version"
    ));
    let nodes: Vec<Name> = (0..n).map(node_name).collect();
    let states = record_named_hosts(i.store, i.genesis, i.hosts_dir, nodes).await?;
    let started = Instant::now();
    for s in &states {
        i.store.assign_version(&s.node, &module, Some("v1")).await?;
    }
    let (declared_ms, decls) = until_declared(i.store, &states, &v1.stored.sha256, started).await?;
    let not_declared = decls.iter().filter(|d| d.is_none()).count();

    let hosts = connect_hosts(states).await?;
    let mut raw_clients = Vec::with_capacity(n);
    for _ in 0..n {
        raw_clients.push(connect_retrying(i.controller, Duration::from_secs(30)).await?);
    }

    // The object store's own gets first, then the reader: both read what
    // the put left in the server's caches.
    note(format_args!(
        "artifact: {n} unrestricted object-store gets at once"
    ));
    let object_store = raw_gets(&raw_clients, &v1.stored).await?;
    note(format_args!("artifact: {n} hosts fetching at once"));
    let reader = fetch_declared(&hosts, &decls, &v1.stored).await;
    let ratio = (object_store.mb_per_s > 0.0).then(|| reader.mb_per_s / object_store.mb_per_s);

    note(format_args!(
        "artifact: a second version, chunk {changed_chunk} of {chunks} changed"
    ));
    let v2 = put_version(i, &module, "v2", second).await?;
    let stored_bytes = stream_bytes_after(i.js, stream_bytes).await?;
    let (refused_before, mut first_not_refused) = refused(&hosts, &v2.stored).await;
    let cache = |h: &Host, sha: &str| Cache::new(&h.state.dir).path(sha);
    let cached_before = hosts
        .iter()
        .filter(|h| cache(h, &v2.stored.sha256).exists())
        .count();
    // Both versions in every cache when there is room (a host keeps the
    // version it ran); else the first goes, which changes nothing fetched:
    // the cache is looked up by the second's digest alone.
    let first_kept = crate::facts::room(i.hosts_dir).is_none_or(|r| r >= need + need / 10);
    if !first_kept {
        note(format_args!(
            "artifact: no room for both versions in the hosts' caches; the first is removed"
        ));
        for h in &hosts {
            let _ = std::fs::remove_file(cache(h, &v1.stored.sha256));
        }
    }

    let moved = Instant::now();
    for h in &hosts {
        i.store
            .assign_version(&h.state.node, &module, Some("v2"))
            .await?;
    }
    let states: Vec<HostState> = hosts.iter().map(|h| h.state.clone()).collect();
    let (declared2_ms, decls2) = until_declared(i.store, &states, &v2.stored.sha256, moved).await?;
    note(format_args!(
        "artifact: {n} hosts fetching its second version at once"
    ));
    let fetch2 = fetch_declared(&hosts, &decls2, &v2.stored).await;
    let moved_to_fetched_ms = ms(moved.elapsed());
    let (first_refused_after, not_refused) = refused(&hosts, &v1.stored).await;
    first_not_refused = first_not_refused.or(not_refused);

    for h in hosts {
        let _ = h.client.drain().await;
        let _ = std::fs::remove_dir_all(&h.state.dir);
    }
    for c in raw_clients {
        let _ = c.drain().await;
    }
    Ok(ArtifactResult {
        hosts: n,
        bytes: size,
        chunks,
        put_ms: v1.put_ms,
        declared_ms,
        not_declared,
        reader,
        object_store,
        ratio,
        second: SecondVersion {
            changed_chunk,
            put_ms: v2.put_ms,
            stored_bytes,
            refused_before,
            cached_before,
            first_kept,
            declared_ms: declared2_ms,
            not_declared: decls2.iter().filter(|d| d.is_none()).count(),
            fetch: fetch2,
            moved_to_fetched_ms,
            first_refused_after,
            first_not_refused,
        },
    })
}

/// `size` bytes of letters, digits, `-` and `_` from a fixed seed (no two
/// chunks alike). Text, so that the mesh's digest of a text
/// (`mesh_store::sha256_digest`) names it.
fn content(size: u64, seed: u64) -> Vec<u8> {
    let size = usize::try_from(size).unwrap_or(usize::MAX);
    let mut out = Vec::with_capacity(size);
    let mut x = seed | 1;
    while out.len() < size {
        // xorshift64*: eight bytes a step, each six bits of it.
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
        let take = (size - out.len()).min(8);
        out.extend((0..take).map(|b| ALPHABET[((r >> (b * 8)) & 63) as usize]));
    }
    out
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// `bytes` with every byte of chunk `chunk` moved to the next letter of the
/// alphabet: that chunk differs in every byte, every other is the same.
fn with_chunk_changed(bytes: &[u8], chunk: u64) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let start = usize::try_from(chunk)
        .unwrap_or(usize::MAX)
        .saturating_mul(CHUNK_SIZE)
        .min(out.len());
    let end = start.saturating_add(CHUNK_SIZE).min(out.len());
    for b in &mut out[start..end] {
        let at = ALPHABET.iter().position(|a| a == b).unwrap_or(0);
        *b = ALPHABET[(at + 1) % ALPHABET.len()];
    }
    out
}

fn sha256_hex(bytes: &[u8]) -> anyhow::Result<String> {
    let text = std::str::from_utf8(bytes).context("the bench's artifact is not text")?;
    let digest = mesh_store::sha256_digest(text);
    Ok(digest
        .strip_prefix("sha256:")
        .unwrap_or(&digest)
        .to_string())
}

/// Writes `bytes` to a file, puts it as the controller (timed) and records
/// it as `version` of the module, as `mesh artifact put` does.
async fn put_version(
    i: &Inputs<'_>,
    module: &Name,
    version: &str,
    bytes: Vec<u8>,
) -> anyhow::Result<Version> {
    let artifact = Name::new(ARTIFACT).expect("a valid name");
    let sha256 = sha256_hex(&bytes)?;
    let path = i.work.join(format!("artifact-{version}"));
    tokio::fs::write(&path, &bytes)
        .await
        .with_context(|| format!("writing {}", path.display()))?;
    drop(bytes);
    let name = object_name(module, &artifact, &sha256);
    let t = Instant::now();
    let stored = artifacts::put(i.js, &name, &path)
        .await
        .with_context(|| format!("putting {name}"))?;
    let put_ms = ms(t.elapsed());
    let _ = tokio::fs::remove_file(&path).await;
    i.store
        .record_upload(&Upload {
            module: module.clone(),
            version: version.to_string(),
            name: artifact,
            sha256: stored.sha256.clone(),
            size: stored.size,
            nuid: stored.nuid.clone(),
        })
        .await?;
    Ok(Version { stored, put_ms })
}

async fn stream_bytes(js: &jetstream::Context) -> anyhow::Result<u64> {
    let stream = js
        .get_stream(STREAM)
        .await
        .with_context(|| format!("reading stream {STREAM}"))?;
    Ok(stream.cached_info().state.bytes)
}

async fn stream_bytes_after(js: &jetstream::Context, before: u64) -> anyhow::Result<u64> {
    Ok(stream_bytes(js).await?.saturating_sub(before))
}

/// The artifact `node`'s declaration names for the module, read as a host
/// reads one: the controller's signature checked first.
fn declared_artifact(body: &str, controller_key: &str, node: &Name) -> Option<ArtifactDecl> {
    let key = declaration::verifying_key(controller_key)?;
    let d = declaration::verify(body.as_bytes(), &key, node, None).ok()?;
    d.modules
        .into_iter()
        .find(|m| m.name.as_str() == MODULE)?
        .artifacts
        .into_iter()
        .find(|a| a.name.as_str() == ARTIFACT)
}

/// Waits until every host's newest declaration names the content `sha256`
/// (the controller declares once the composition granting its reads is
/// live); per host, the artifact as declared, and when the last was seen.
async fn until_declared(
    store: &Store,
    states: &[HostState],
    sha256: &str,
    since: Instant,
) -> anyhow::Result<(f64, Vec<Option<ArtifactDecl>>)> {
    let within = Duration::from_secs(120) + Duration::from_millis(20 * states.len() as u64);
    let mut got: Vec<Option<ArtifactDecl>> = vec![None; states.len()];
    let mut last = 0.0;
    loop {
        for (s, slot) in states.iter().zip(got.iter_mut()) {
            if slot.is_some() {
                continue;
            }
            let Some(d) = store.latest_declaration(&s.node).await? else {
                continue;
            };
            if let Some(a) = declared_artifact(&d.body, &s.controller_key, &s.node)
                .filter(|a| a.sha256 == sha256)
            {
                *slot = Some(a);
                last = ms(since.elapsed());
            }
        }
        if got.iter().all(Option::is_some) || since.elapsed() > within {
            return Ok((last, got));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_second_version_differs_in_one_chunk_in_every_byte() {
        let size = 3 * CHUNK_SIZE as u64 + 5;
        let first = content(size, 1);
        assert_eq!(first.len() as u64, size);
        assert!(std::str::from_utf8(&first).is_ok());
        assert_eq!(first, content(size, 1), "the same seed, the same bytes");
        let second = with_chunk_changed(&first, 1);
        for (i, (a, b)) in first
            .chunks(CHUNK_SIZE)
            .zip(second.chunks(CHUNK_SIZE))
            .enumerate()
        {
            if i == 1 {
                assert!(a.iter().zip(b).all(|(x, y)| x != y), "chunk 1 differs");
            } else {
                assert_eq!(a, b, "chunk {i} is the same");
            }
        }
        // The last, short chunk changes as a whole too.
        let last = with_chunk_changed(&first, 3);
        assert_ne!(last[size as usize - 5..], first[size as usize - 5..]);
        assert_eq!(last[..3 * CHUNK_SIZE], first[..3 * CHUNK_SIZE]);
        assert_ne!(sha256_hex(&first).unwrap(), sha256_hex(&second).unwrap());
    }
}

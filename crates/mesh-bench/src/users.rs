//! The users file at scale: composed for N nodes × 5 modules (the mix of
//! `crates/mesh-core/benches/compose.rs`: a mesh-scoped seat, events
//! consumed across modules, tools, a node-scoped seat), twice, timed and
//! compared byte for byte; then made live on the bench's running broker —
//! written, signalled, and confirmed by a canary that only this file
//! admits — timed against the broker's own reload, and once more through
//! the controller's composer, as the daemon makes a composition live.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use mesh_bus::{BusConfig, ClientCredential, Secret};
use mesh_controller::composer::Snapshot;
use mesh_controller::{Composer, ComposerConfig, Genesis, Reloader, genesis};
use mesh_core::authority::{self, Principal, PrincipalKind};
use mesh_core::catalogue::{Aliases, Catalogue};
use mesh_core::manifest;
use mesh_core::names::Name;
use mesh_core::records::{Assignment, ControllerSpec, PersonRecord, Records, ToolAccess};
use mesh_core::users_file::{self, CANARY_INBOX, PublishStep, UserCredential};
use serde::Serialize;

use crate::mesh::Broker;

pub const MODULES: [(&str, &str); 5] = [
    (
        "git-server",
        "[module]\nname = \"git-server\"\n[[seat]]\nname = \"git\"\nscope = \"mesh\"\nprotocol = \"git\"\nemits = [\"pushed\"]\ntools = [\"clone\"]\n[holds]\nseats = [\"git\"]\n[events]\nemits = [\"repo-created\"]\n",
    ),
    (
        "audit-log",
        "[module]\nname = \"audit-log\"\n[events]\nemits = [\"entry-written\"]\nconsumes = [\"seat:git.pushed\", \"seat:mesh-build-machine.built\", \"git-server.**\"]\n[tools]\nserves = [\"search\", \"tail\"]\n",
    ),
    (
        "nftables",
        "[module]\nname = \"nftables\"\n[[seat]]\nname = \"packet-filter\"\nscope = \"node\"\nprotocol = \"\"\naccepts = [\"rule-change\"]\nemits = [\"applied\"]\n[holds]\nseats = [\"packet-filter\"]\n",
    ),
    (
        "notifier",
        "[module]\nname = \"notifier\"\n[events]\nconsumes = [\"seat:mesh-build-machine.built\", \"audit-log.entry-written\"]\n[tools]\nuses = [\"audit-log.search\"]\n",
    ),
    (
        "metrics",
        "[module]\nname = \"metrics\"\n[events]\nemits = [\"sample\"]\n[uses]\nseats = [\"packet-filter\"]\n",
    ),
];

#[derive(Debug, Clone, Serialize)]
pub struct UsersResult {
    pub nodes: usize,
    pub modules: usize,
    pub users: usize,
    pub bytes: usize,
    /// Derive and compose, best and median of three.
    pub compose_best_ms: f64,
    pub compose_median_ms: f64,
    pub identical: bool,
    pub write_ms: f64,
    /// From the signal to the broker logging the reload done.
    pub reload_ms: Option<f64>,
    /// From the signal to the canary of this file admitted.
    pub usable_ms: Option<f64>,
    /// The controller's composer from a trigger to live (compose, write,
    /// signal, canary with its backoff).
    pub composer_live_ms: Option<f64>,
}

fn name(s: &str) -> Name {
    Name::new(s).expect("a valid name")
}

/// The fleet: `nodes` nodes, each running all five modules.
fn fleet(nodes: usize) -> anyhow::Result<(Catalogue, Records)> {
    let manifests = MODULES
        .iter()
        .map(|(m, text)| {
            manifest::parse(&format!("{m}/mesh.toml"), text)
                .map_err(|d| anyhow::anyhow!("the bench's manifest {m} does not parse: {d:?}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let cat = Catalogue::build(manifests, Aliases::new());
    let names: Vec<Name> = (0..nodes).map(|i| name(&format!("node-{i:05}"))).collect();
    let assignments = names
        .iter()
        .flat_map(|n| {
            MODULES
                .iter()
                .map(move |(m, _)| Assignment::new(n.clone(), name(m)))
        })
        .collect();
    let records = Records {
        nodes: names,
        assignments,
        live_tokens: vec![],
        persons: vec![PersonRecord {
            name: name("admin"),
            tools: ToolAccess::All,
            role: None,
        }],
        ..Records::default()
    };
    Ok((cat, records))
}

/// A key per machine principal (made once: keys are made where they are
/// used, not by the composer), the controller's being the genesis's own.
fn credentials(principals: &[Principal], controller_key: &str) -> BTreeMap<String, UserCredential> {
    principals
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let c = match &p.kind {
                PrincipalKind::Controller => UserCredential::NKey(controller_key.to_string()),
                PrincipalKind::Person { .. } => UserCredential::Password(
                    "$2b$11$abcdefghijklmnopqrstuu5Jc1vYIk4vR7f2c5xH0m8fS6uQyJ3gK".into(),
                ),
                _ => {
                    let mut raw = [0u8; 32];
                    raw[..8].copy_from_slice(&(i as u64).to_le_bytes());
                    let kp = nkeys::KeyPair::new_from_raw(nkeys::KeyPairType::User, raw)
                        .expect("a user key from 32 bytes");
                    UserCredential::NKey(kp.public_key())
                }
            };
            (p.name.clone(), c)
        })
        .collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub async fn run(
    genesis: &Genesis,
    broker: &Broker,
    nodes: usize,
    canary_bus: &BusConfig,
) -> anyhow::Result<UsersResult> {
    let (cat, records) = fleet(nodes)?;
    let spec = ControllerSpec::default();
    let principals0 = authority::derive(&cat, &records, &spec)?;
    let creds = credentials(&principals0, &genesis.controller_nkey);
    drop(principals0);

    let (times, files) = tokio::task::spawn_blocking({
        let (cat, records, creds) = (cat.clone(), records.clone(), creds.clone());
        move || {
            let mut times = Vec::new();
            let mut files = Vec::new();
            for _ in 0..3 {
                let t = Instant::now();
                let principals = authority::derive(&cat, &records, &ControllerSpec::default())?;
                let file = users_file::compose(&principals, &creds)?;
                times.push(ms(t.elapsed()));
                files.push(file);
            }
            anyhow::Ok((times, files))
        }
    })
    .await??;
    let identical = files.windows(2).all(|w| w[0].text == w[1].text);
    let file = &files[0];
    let mut sorted = times.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));

    // Made live by hand, each step timed.
    let canary = nkeys::KeyPair::new_user();
    let steps = users_file::plan_publication(file.text.clone(), None, &canary.public_key());
    let Some(PublishStep::Write { text }) = steps.first() else {
        bail!("a new composition's plan does not begin with its write");
    };
    let path = genesis.path(genesis::USERS_FILE);
    let t = Instant::now();
    {
        let (path, text) = (path.clone(), text.clone());
        tokio::task::spawn_blocking(move || {
            mesh_controller::safe_write::write_private(&path, text.as_bytes())
        })
        .await??;
    }
    let write_ms = ms(t.elapsed());
    let before = broker.reloads_logged();
    let canary_cfg = BusConfig {
        principal: "canary".into(),
        credential: ClientCredential::NKey(Secret::new(canary.seed()?)),
        inbox_prefix: Some(CANARY_INBOX.trim_end_matches(".>").to_string()),
        ..canary_bus.clone()
    };
    let signalled = Instant::now();
    broker.reload()?;
    let within = Duration::from_secs(60);
    let reload = async {
        while signalled.elapsed() < within {
            if broker.reloads_logged() > before {
                return Some(ms(signalled.elapsed()));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        None
    };
    let usable = async {
        while signalled.elapsed() < within {
            if let Ok(c) = mesh_bus::connect(&canary_cfg).await {
                let at = ms(signalled.elapsed());
                let _ = c.drain().await;
                return Some(at);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    };
    let (reload_ms, usable_ms) = tokio::join!(reload, usable);

    // Once more as the daemon does it: the composer, from its first
    // composition to live. The records differ only by the canary, so it
    // writes, signals and confirms like any change.
    let principals = authority::derive(&cat, &records, &spec)?;
    let snapshot: Snapshot = (principals, creds);
    let source = move || {
        let s = snapshot.clone();
        async move { Ok::<Snapshot, mesh_controller::composer::SourceError>(s) }
    };
    let pid = broker.pid().context("the broker is not running")?;
    let mut config = ComposerConfig::new(path, Reloader::Pid(pid), canary_bus.clone());
    config.confirm_within = within;
    let started = Instant::now();
    let (composer, task) = Composer::spawn(config, source);
    let live = tokio::time::timeout(
        within,
        composer.wait_for(|s| s.live >= 1 || s.not_live >= 1),
    )
    .await
    .ok()
    .and_then(Result::ok);
    let composer_live_ms = live.filter(|s| s.live >= 1).map(|_| ms(started.elapsed()));
    task.abort();

    Ok(UsersResult {
        nodes,
        modules: MODULES.len(),
        users: file.users,
        bytes: file.text.len(),
        compose_best_ms: sorted[0],
        compose_median_ms: sorted[sorted.len() / 2],
        identical,
        write_ms,
        reload_ms,
        usable_ms,
        composer_live_ms,
    })
}

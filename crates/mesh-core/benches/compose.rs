//! Composing the users file for a large fleet: 10,000 nodes × 5 modules.
//! Prints the time per composition (criterion) and the file's size, and checks
//! that composing twice gives identical bytes.
//!
//! Run: `cargo bench -p mesh-core --bench compose`

use std::collections::BTreeMap;

use criterion::{Criterion, criterion_group, criterion_main};
use mesh_core::authority::{self, PrincipalKind};
use mesh_core::catalogue::{Aliases, Catalogue};
use mesh_core::manifest;
use mesh_core::names::Name;
use mesh_core::records::{Assignment, ControllerSpec, PersonRecord, Records, ToolAccess};
use mesh_core::users_file::{self, UserCredential};

const NODES: usize = 10_000;

const MODULES: [(&str, &str); 5] = [
    (
        "git-server",
        r#"
[module]
name = "git-server"
[[seat]]
name = "git"
scope = "mesh"
protocol = "git"
emits = ["pushed"]
tools = ["clone"]
[holds]
seats = ["git"]
[events]
emits = ["repo-created"]
"#,
    ),
    (
        "audit-log",
        r#"
[module]
name = "audit-log"
[events]
emits = ["entry-written"]
consumes = ["seat:git.pushed", "seat:mesh-build-machine.built", "git-server.**"]
[tools]
serves = ["search", "tail"]
"#,
    ),
    (
        "nftables",
        r#"
[module]
name = "nftables"
[[seat]]
name = "packet-filter"
scope = "node"
protocol = ""
accepts = ["rule-change"]
emits = ["applied"]
[holds]
seats = ["packet-filter"]
"#,
    ),
    (
        "notifier",
        r#"
[module]
name = "notifier"
[events]
consumes = ["seat:mesh-build-machine.built", "audit-log.entry-written"]
[tools]
uses = ["audit-log.search"]
"#,
    ),
    (
        "metrics",
        r#"
[module]
name = "metrics"
[events]
emits = ["sample"]
[uses]
seats = ["packet-filter"]
"#,
    ),
];

fn name(s: &str) -> Name {
    Name::new(s).expect("a valid name")
}

fn fleet() -> (Catalogue, Records) {
    let manifests = MODULES
        .iter()
        .map(|(m, text)| manifest::parse(&format!("{m}/mesh.toml"), text).expect("parses"))
        .collect();
    let cat = Catalogue::build(manifests, Aliases::new());
    let nodes: Vec<Name> = (0..NODES).map(|i| name(&format!("node-{i:05}"))).collect();
    let assignments = nodes
        .iter()
        .flat_map(|n| {
            MODULES
                .iter()
                .map(move |(m, _)| Assignment::new(n.clone(), name(m)))
        })
        .collect();
    let records = Records {
        nodes,
        assignments,
        live_tokens: vec![name("node-new")],
        persons: vec![PersonRecord {
            name: name("admin"),
            tools: ToolAccess::All,
            role: None,
        }],
        ..Records::default()
    };
    (cat, records)
}

/// An NKey per principal (a person's bcrypt hash for the one person), made
/// once: keys are generated where they are used, not by the composer.
fn credentials(cat: &Catalogue, records: &Records) -> BTreeMap<String, UserCredential> {
    let principals = authority::derive(cat, records, &ControllerSpec::default()).expect("derives");
    principals
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let c = if matches!(p.kind, PrincipalKind::Person { .. }) {
                UserCredential::Password(
                    "$2b$11$abcdefghijklmnopqrstuu5Jc1vYIk4vR7f2c5xH0m8fS6uQyJ3gK".into(),
                )
            } else {
                let mut raw = [0u8; 32];
                raw[..8].copy_from_slice(&(i as u64).to_le_bytes());
                let kp = nkeys::KeyPair::new_from_raw(nkeys::KeyPairType::User, raw)
                    .expect("a user key");
                UserCredential::NKey(kp.public_key())
            };
            (p.name.clone(), c)
        })
        .collect()
}

fn compose(
    cat: &Catalogue,
    records: &Records,
    credentials: &BTreeMap<String, UserCredential>,
) -> users_file::UsersFile {
    let principals = authority::derive(cat, records, &ControllerSpec::default()).expect("derives");
    users_file::compose(&principals, credentials).expect("composes")
}

fn bench(c: &mut Criterion) {
    let (cat, records) = fleet();
    let hash = &credentials(&cat, &records);
    let a = compose(&cat, &records, hash);
    let b = compose(&cat, &records, hash);
    assert_eq!(a.text, b.text, "composing twice gives identical bytes");
    println!(
        "users file: {NODES} nodes x {} modules = {} principals, {} bytes ({:.1} MiB), identical on recomposition",
        MODULES.len(),
        a.text.matches("user: ").count(),
        a.text.len(),
        a.text.len() as f64 / (1024.0 * 1024.0)
    );
    let mut g = c.benchmark_group("users-file");
    g.sample_size(10);
    g.bench_function("derive+compose 10k nodes x 5 modules", |bch| {
        bch.iter(|| compose(&cat, &records, hash))
    });
    // Each half alone: where a composition's time goes.
    g.bench_function("derive 10k nodes x 5 modules", |bch| {
        bch.iter(|| authority::derive(&cat, &records, &ControllerSpec::default()).expect("derives"))
    });
    let principals =
        authority::derive(&cat, &records, &ControllerSpec::default()).expect("derives");
    g.bench_function("compose 10k nodes x 5 modules", |bch| {
        bch.iter(|| users_file::compose(&principals, hash).expect("composes"))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

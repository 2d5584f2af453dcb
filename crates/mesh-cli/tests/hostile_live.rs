//! Hostile input, live: every subject the controller and a host read is
//! sent what a broken or malicious peer could send — by the one principal
//! allowed to publish there, so the broker lets it through and the reader
//! is what is tested. Each case is a file under `fixtures/hostile/<target>/`
//! and must end terminated or refused with its reason logged: never a
//! panic, never redelivered forever.
//!
//! A case is `<case>.json` (placeholders filled, then sent as is unless it
//! is a directive below) or `<case>.bin` (bytes sent as they are), beside
//! `<case>.expect`: its first line is what the reader logs for the case
//! (`enrolment request terminated`, `report terminated`, `heartbeat
//! ignored`, `declaration refused`), each further line a substring that
//! same log line must hold (the reason). `publish refused` instead says the
//! broker itself must refuse the publish.
//!
//! Directives (a JSON object whose keys start with `$`):
//! - `{"$pad_to": N, "$body": V}`: V's JSON padded with spaces to N bytes.
//! - `{"$sign": D}`: declaration D signed with the genesis signing key; with
//!   `"$signature": S` the signature replaced by S, `"$key": "other"` signed
//!   by another key, `"$extra": V` an unknown envelope field added.
//! - `{"$sign_bytes": S}`: the bytes of S signed as if a declaration.
//!
//! Placeholders: `{{node}}` (the subject's node), `{{other_node}}`,
//! `{{inbox}}` / `{{reply}}` (the enrolment inbox prefix / an address
//! under it), `{{enrolment_key}}`, `{{user_key}}`, `{{user_seed}}`,
//! `{{account_key}}`, `{{xkey}}`, `{{id}}` (a fresh report id).

#[path = "join_live/harness.rs"]
mod harness;

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signer as _, SigningKey};
use harness::{Backend, Daemon, Mesh, wait_until};
use mesh_core::declaration::{Declaration, Envelope};
use mesh_core::names::Name;
use mesh_core::token::Token;

const LONG: Duration = Duration::from_secs(60);
/// How long one case may take to be logged.
const PER_CASE: Duration = Duration::from_secs(30);
/// The sequence of the declaration n1 applies before the cases.
const APPLIED: u64 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Enrol,
    Report,
    Heartbeat,
    Declaration,
}

impl Target {
    fn of(dir: &str) -> Target {
        match dir {
            "enrol" => Target::Enrol,
            "report" => Target::Report,
            "heartbeat" => Target::Heartbeat,
            "declaration" => Target::Declaration,
            other => panic!("fixtures/hostile/{other}: no such target"),
        }
    }

    /// The node whose subject the case is published on.
    fn node(self) -> &'static str {
        match self {
            Target::Enrol => "n3",
            _ => "n1",
        }
    }

    fn subject(self) -> String {
        let n = Name::new(self.node()).unwrap();
        match self {
            Target::Enrol => mesh_core::subjects::enrol(&n),
            Target::Report => mesh_core::subjects::report(&n),
            Target::Heartbeat => mesh_core::subjects::heartbeat(&n),
            Target::Declaration => mesh_core::subjects::node_declaration(&n),
        }
    }

    fn controller_side(self) -> bool {
        self != Target::Declaration
    }
}

struct Case {
    target: Target,
    name: String,
    path: PathBuf,
    expect: Vec<String>,
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile")
}

/// Every case file, in a stable order.
fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    let mut targets: Vec<_> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    targets.sort();
    for dir in targets {
        let target = Target::of(dir.file_name().unwrap().to_str().unwrap());
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("json" | "bin")))
            .collect();
        files.sort();
        for path in files {
            let name = path.file_stem().unwrap().to_str().unwrap().to_string();
            let expect_file = path.with_extension("expect");
            let expect: Vec<String> = std::fs::read_to_string(&expect_file)
                .unwrap_or_else(|e| panic!("{}: {e}", expect_file.display()))
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_string)
                .collect();
            assert!(!expect.is_empty(), "{}: empty", expect_file.display());
            out.push(Case {
                target,
                name,
                path,
                expect,
            });
        }
    }
    out
}

/// What fills the placeholders.
struct Fill {
    enrolment_key: String,
    signing: SigningKey,
}

fn unique() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("h{nanos:x}{}", N.fetch_add(1, Ordering::Relaxed))
}

impl Fill {
    fn text(&self, target: Target, s: &str) -> String {
        let node = target.node();
        let inbox = mesh_core::subjects::enrol_inbox_prefix(&Name::new(node).unwrap());
        let user = nkeys::KeyPair::new_user();
        s.replace("{{node}}", node)
            .replace("{{other_node}}", "n2")
            .replace("{{reply}}", &format!("{inbox}.{}", unique()))
            .replace("{{inbox}}", &inbox)
            .replace("{{enrolment_key}}", &self.enrolment_key)
            .replace("{{user_key}}", &user.public_key())
            .replace("{{user_seed}}", &user.seed().unwrap())
            .replace(
                "{{account_key}}",
                &nkeys::KeyPair::new_account().public_key(),
            )
            .replace("{{xkey}}", &nkeys::XKey::new().public_key())
            .replace("{{id}}", &unique())
    }

    /// The bytes a case publishes.
    fn payload(&self, case: &Case) -> Vec<u8> {
        let raw = std::fs::read(&case.path).unwrap();
        if case.path.extension().is_some_and(|e| e == "bin") {
            return raw;
        }
        let text = self.text(case.target, &String::from_utf8(raw).unwrap());
        match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(serde_json::Value::Object(o)) if o.keys().any(|k| k.starts_with('$')) => {
                self.directive(&o)
            }
            _ => text.into_bytes(),
        }
    }

    fn directive(&self, o: &serde_json::Map<String, serde_json::Value>) -> Vec<u8> {
        if let Some(n) = o.get("$pad_to") {
            let mut v = serde_json::to_vec(&o["$body"]).unwrap();
            let n = n.as_u64().unwrap() as usize;
            assert!(v.len() <= n, "the body is larger than $pad_to");
            v.resize(n, b' ');
            return v;
        }
        if let Some(s) = o.get("$sign_bytes") {
            let bytes = s.as_str().unwrap().as_bytes();
            return serde_json::to_vec(&Envelope {
                declaration: STANDARD.encode(bytes),
                signature: STANDARD.encode(self.signing.sign(bytes).to_bytes()),
            })
            .unwrap();
        }
        let d: Declaration = serde_json::from_value(o["$sign"].clone()).unwrap();
        let key = match o.get("$key").and_then(|k| k.as_str()) {
            Some("other") => SigningKey::from_bytes(&[7; 32]),
            None => self.signing.clone(),
            Some(k) => panic!("$key {k}"),
        };
        let mut env: serde_json::Value = serde_json::from_slice(&d.sign(&key)).unwrap();
        if let Some(s) = o.get("$signature") {
            env["signature"] = s.clone();
        }
        if let Some(v) = o.get("$extra") {
            env["extra"] = v.clone();
        }
        serde_json::to_vec(&env).unwrap()
    }
}

fn signing_key(mesh: &Mesh) -> SigningKey {
    let hex_seed = std::fs::read_to_string(mesh.dir.join("controller/signing.seed")).unwrap();
    let seed: [u8; 32] = hex::decode(hex_seed.trim()).unwrap().try_into().unwrap();
    SigningKey::from_bytes(&seed)
}

/// The lines of `log` holding `needle`.
fn lines_with(log: &str, needle: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

/// JetStream publish, its PubAck awaited: `Err` when the broker refuses.
async fn js_publish(
    js: &jetstream::Context,
    subject: String,
    payload: Vec<u8>,
) -> Result<(), String> {
    let ack = js
        .publish(subject, payload.into())
        .await
        .map_err(|e| e.to_string())?;
    ack.await.map(|_| ()).map_err(|e| e.to_string())
}

struct Publishers {
    enrol: async_nats::Client,
    host: async_nats::Client,
    controller: async_nats::Client,
}

impl Publishers {
    async fn send(&self, target: Target, payload: Vec<u8>) -> Result<(), String> {
        let subject = target.subject();
        match target {
            Target::Enrol => {
                js_publish(&jetstream::new(self.enrol.clone()), subject, payload).await
            }
            Target::Report => {
                js_publish(&jetstream::new(self.host.clone()), subject, payload).await
            }
            Target::Declaration => {
                js_publish(&jetstream::new(self.controller.clone()), subject, payload).await
            }
            Target::Heartbeat => {
                self.host
                    .publish(subject, payload.into())
                    .await
                    .map_err(|e| e.to_string())?;
                self.host.flush().await.map_err(|e| e.to_string())
            }
        }
    }
}

fn host_seed(mesh: &Mesh, node: &str) -> String {
    std::fs::read_to_string(mesh.host_dir(node).join("nkey.seed"))
        .unwrap()
        .trim()
        .to_string()
}

/// Publishes a declaration for n1 signed with the genesis key and waits for
/// n1's host to apply it.
async fn declare_n1(pubs: &Publishers, signing: &SigningKey, host: &Daemon, sequence: u64) {
    let before = lines_with(&host.log(), "declaration applied").len();
    let d = Declaration {
        node: Name::new("n1").unwrap(),
        sequence,
        composed_at: 1_700_000_000_000,
        modules: Vec::new(),
        bus: None,
        sealed_by: None,
    };
    pubs.send(Target::Declaration, d.sign(signing))
        .await
        .expect("NODES stores a declaration");
    assert!(
        wait_until(LONG, || {
            lines_with(&host.log(), "declaration applied")
                .get(before)
                .is_some_and(|l| l.contains(&format!("sequence={sequence}")))
        }),
        "n1 never applied declaration {sequence}; log:\n{}",
        host.log()
    );
}

fn panicked(d: &Daemon) -> bool {
    d.log().contains("panicked")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hostile_input_is_terminated_and_logged_never_a_crash() {
    let cases = cases();
    assert!(!cases.is_empty());

    let mut mesh = Mesh::new(Backend::Sqlite);
    // A heartbeat refused is logged at debug only (a flood must not fill
    // the log): this controller logs debug.
    mesh.start_controller_logging("info,async_nats=off,mesh_controller=debug");
    let mut hosts: Vec<Daemon> = ["n1", "n2"]
        .iter()
        .map(|n| {
            let t = mesh.node_add(n, "1h");
            mesh.host(n, Some(&t))
        })
        .collect();
    let observer = mesh.observer().await;
    harness::wait_bound(&jetstream::new(observer.clone()), &["n1", "n2"], LONG).await;

    // A live token for n3: its enrolment key may publish n3's requests.
    let t3 = Token::decode(&mesh.node_add("n3", "1h")).unwrap();
    let enrolment_key = nkeys::KeyPair::from_seed(t3.enrolment_seed.expose())
        .unwrap()
        .public_key();
    assert!(
        wait_until(LONG, || mesh.users_file().contains(&enrolment_key)),
        "enrol_n3 composed"
    );
    let n3 = Name::new("n3").unwrap();
    let enrol = mesh_bus::connect(&mesh.bus(
        "enrol",
        t3.enrolment_seed.expose(),
        Some(mesh_core::subjects::enrol_inbox_prefix(&n3)),
    ))
    .await
    .expect("a live token's key connects");
    let host = mesh_bus::connect(&mesh.bus(
        "host_n1",
        &host_seed(&mesh, "n1"),
        Some("_INBOX.host_n1".into()),
    ))
    .await
    .expect("n1's host key connects");
    let pubs = Publishers {
        enrol,
        host,
        controller: observer.clone(),
    };
    let fill = Fill {
        enrolment_key,
        signing: signing_key(&mesh),
    };

    // n1 applies a declaration first, so one not newer can be refused.
    declare_n1(&pubs, &fill.signing, &hosts[0], APPLIED).await;

    let mut terminated = 0;
    let mut failures = Vec::new();
    for case in &cases {
        let label = format!("{:?}/{}", case.target, case.name);
        let payload = fill.payload(case);
        let expect: Vec<String> = case
            .expect
            .iter()
            .map(|l| fill.text(case.target, l))
            .collect();
        if expect[0] == "publish refused" {
            match pubs.send(case.target, payload).await {
                Err(e) => {
                    println!("{label}: publish refused ({e})");
                    terminated += 1;
                }
                Ok(()) => failures.push(format!("{label}: the broker took it")),
            }
            continue;
        }
        let reader: &Daemon = if case.target.controller_side() {
            mesh.controller()
        } else {
            &hosts[0]
        };
        let before = lines_with(&reader.log(), &expect[0]).len();
        if let Err(e) = pubs.send(case.target, payload).await {
            failures.push(format!("{label}: not published: {e}"));
            continue;
        }
        let mut line = None;
        wait_until(PER_CASE, || {
            line = lines_with(&reader.log(), &expect[0])
                .into_iter()
                .nth(before);
            line.is_some()
        });
        match line {
            Some(l) if expect[1..].iter().all(|e| l.contains(e.as_str())) => {
                println!("{label}: {}", l.trim());
                terminated += 1;
            }
            Some(l) => failures.push(format!("{label}: logged {l:?}, expected {expect:?}")),
            None => failures.push(format!(
                "{label}: {} never logged {:?} within {PER_CASE:?}",
                reader.name, expect[0]
            )),
        }
    }

    // Nothing left in CONTROL to come round again.
    let js = jetstream::new(observer.clone());
    let mut left = u64::MAX;
    for _ in 0..250 {
        let mut control = js.get_stream("CONTROL").await.unwrap();
        left = control.info().await.unwrap().state.messages;
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if left != 0 {
        failures.push(format!("CONTROL still holds {left} messages"));
    }

    // Still serving: a valid report is recorded, a valid declaration is
    // applied, and the nodes are enrolled.
    let id = unique();
    let report = mesh_core::report::Report {
        id: id.clone(),
        node: Name::new("n1").unwrap(),
        sequence: APPLIED,
        modules: Vec::new(),
        refused: None,
        address: None,
        spare_keys: Vec::new(),
        amqp_hashes: Default::default(),
    };
    pubs.send(Target::Report, report.to_json())
        .await
        .expect("CONTROL stores a valid report");
    let store = mesh_store::Store::open(&mesh.store_url).await.unwrap();
    let n1 = Name::new("n1").unwrap();
    let mut recorded = false;
    for _ in 0..1500 {
        recorded = store
            .reports(&n1, 50)
            .await
            .unwrap()
            .iter()
            .any(|r| r.report.report_id.as_deref() == Some(id.as_str()));
        if recorded {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    store.close().await;
    if !recorded {
        failures.push("a valid report after the cases was not recorded".into());
    }
    declare_n1(&pubs, &fill.signing, &hosts[0], APPLIED + 1).await;
    let rows = mesh.nodes();
    for n in ["n1", "n2"] {
        if !rows
            .iter()
            .any(|r| r["node"] == n && r["state"] == "enrolled")
        {
            failures.push(format!("{n} is not enrolled: {rows:?}"));
        }
    }

    // A crash: a process that exited, or a panic in any log.
    let mut crashes = 0;
    for h in &mut hosts {
        if !h.running() || panicked(h) {
            crashes += 1;
            failures.push(format!("{} crashed; log:\n{}", h.name, h.log()));
        }
    }
    let controller = mesh.controller.as_mut().unwrap();
    if !controller.running() || panicked(controller) {
        crashes += 1;
        failures.push(format!(
            "the controller crashed; log:\n{}",
            controller.log()
        ));
    }

    // The controller counted every one it read.
    let status = controller.stop();
    let log = controller.log();
    let stopped = lines_with(&log, "controller stopped");
    let counted: Option<u64> = stopped.last().and_then(|l| {
        l.split_whitespace()
            .find_map(|w| w.strip_prefix("terminated="))
            .and_then(|n| n.parse().ok())
    });
    let controller_cases = cases
        .iter()
        .filter(|c| c.target.controller_side() && c.expect[0] != "publish refused")
        .count() as u64;
    if !status.success() || counted.is_none_or(|n| n < controller_cases) {
        failures.push(format!(
            "the controller stopped with {status}, terminated={counted:?}, expected ≥ {controller_cases}: {stopped:?}"
        ));
    }

    let summary = format!(
        "hostile input: {} cases, {terminated} terminated, {crashes} crashes",
        cases.len()
    );
    println!("{summary}");
    assert!(failures.is_empty(), "{summary}\n{}", failures.join("\n"));
    assert_eq!(terminated, cases.len(), "{summary}");
    assert_eq!(crashes, 0, "{summary}");
}

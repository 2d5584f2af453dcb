//! `mesh plan` and `mesh assign --dry-run|--wait`, live: a real controller
//! and real hosts. What the plan predicts for adding a consumer module is
//! compared with what assigning it then does — the declaration the
//! controller records, the users file it composes, the consumer it creates
//! — and a plan writes nothing.

#[path = "join_live/harness.rs"]
mod harness;

use std::collections::BTreeSet;
use std::time::Duration;

use harness::{Backend, Mesh, wait_until};
use mesh_core::names::Name;
use serde_json::Value;

const LONG: Duration = Duration::from_secs(60);

fn ok(out: &std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

async fn store(mesh: &Mesh) -> mesh_store::Store {
    mesh_store::Store::open(&mesh.store_url).await.unwrap()
}

/// The modules of `node`'s newest recorded declaration, read through the
/// host's own signature check.
async fn recorded(mesh: &Mesh, node: &str) -> Option<(i64, Value)> {
    let s = store(mesh).await;
    let d = s
        .latest_declaration(&Name::new(node).unwrap())
        .await
        .unwrap();
    s.close().await;
    let d = d?;
    let genesis = mesh_controller::Genesis::open(&mesh.dir).unwrap();
    let key = mesh_core::declaration::verifying_key(&genesis.signing_key).unwrap();
    let decl =
        mesh_core::declaration::verify(d.body.as_bytes(), &key, &Name::new(node).unwrap(), None)
            .unwrap();
    Some((d.version, serde_json::to_value(decl.modules).unwrap()))
}

/// The subjects the users file grants `principal`: (publish, subscribe).
fn users_file_grants(text: &str, principal: &str) -> Option<(BTreeSet<String>, BTreeSet<String>)> {
    let mut lines = text
        .lines()
        .skip_while(|l| l.trim() != format!("# {principal}"));
    lines.next()?;
    let (mut publish, mut subscribe) = (BTreeSet::new(), BTreeSet::new());
    let mut into: Option<&mut BTreeSet<String>> = None;
    for line in lines {
        let t = line.trim();
        if t.starts_with('#') {
            break;
        }
        if t.starts_with("publish: { allow: [") {
            into = Some(&mut publish);
        } else if t.starts_with("subscribe: { allow: [") {
            into = Some(&mut subscribe);
        } else if t.starts_with("] }") {
            into = None;
        } else if let (Some(set), Some(s)) = (into.as_mut(), t.strip_prefix('"')) {
            set.insert(s.trim_end_matches('"').to_string());
        }
    }
    Some((publish, subscribe))
}

/// The subjects the plan says `principal` gains in `direction`, each with
/// at least one cause.
fn planned_grants(plan: &Value, principal: &str, direction: &str) -> BTreeSet<String> {
    plan["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["change"] == "grant-added"
                && e["principal"] == principal
                && e["direction"] == direction
        })
        .map(|e| {
            assert!(
                !e["causes"].as_array().unwrap().is_empty(),
                "a grant without a cause: {e}"
            );
            e["subject"].as_str().unwrap().to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_for_a_consumer_module_is_what_assigning_it_then_does() {
    let (mesh, _hosts) = Mesh::with_hosts(Backend::Sqlite, &["n1", "n2"]).await;
    let s = store(&mesh).await;
    let revision = s.records_revision().await.unwrap();
    let before_n2 = recorded(&mesh, "n2").await;

    let plan: Value = serde_json::from_str(&ok(
        &mesh.mesh(&["plan", "assign", "notifier", "n1", "--output", "json"]),
        "plan",
    ))
    .unwrap();
    let text = ok(
        &mesh.mesh(&["assign", "notifier", "n1", "--dry-run"]),
        "assign --dry-run",
    );
    // Nothing was written by either.
    assert_eq!(s.records_revision().await.unwrap(), revision);
    assert!(s.assignments().await.unwrap().is_empty());
    s.close().await;

    // Declarations: notifier starts on n1, and nothing else changes anywhere.
    let declared: Vec<&Value> = plan["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e.get("node").is_some())
        .collect();
    assert_eq!(declared.len(), 1, "{plan:#}");
    assert_eq!(declared[0]["change"], "start");
    assert_eq!(
        (declared[0]["node"].as_str(), declared[0]["module"].as_str()),
        (Some("n1"), Some("notifier"))
    );
    let predicted = plan["declarations"]["n1"].clone();
    assert_eq!(plan["declarations"].as_object().unwrap().len(), 1);
    // Authority: the new principal with its grants and their causes.
    let principal = "module_n1_notifier";
    assert!(
        plan["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["change"] == "principal-added" && e["principal"] == principal)
    );
    let publish = planned_grants(&plan, principal, "publish");
    let subscribe = planned_grants(&plan, principal, "subscribe");
    assert!(
        subscribe.contains("mesh.deliver.mod_notifier"),
        "{subscribe:?}"
    );
    assert!(
        publish.contains("$JS.ACK.EVENTS.mod_notifier.>"),
        "{publish:?}"
    );
    // The new EVENTS consumer.
    let consumer = plan["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| {
            e["change"] == "object-added"
                && e["object"] == "consumer"
                && e["name"] == "mod_notifier"
        })
        .unwrap_or_else(|| panic!("no new consumer planned: {plan:#}"))
        .clone();
    // The text says the same, with causes.
    for needle in [
        "plan: assign notifier to n1",
        "  node n1:\n    start  notifier",
        "  principal module_n1_notifier:\n    + new principal",
        "    + subscribe mesh.deliver.mod_notifier",
        "because registered:notifier:",
        "  + consumer mod_notifier on EVENTS filtering ",
    ] {
        assert!(text.contains(needle), "{needle:?} not in:\n{text}");
    }

    mesh.assign("notifier", "n1", true);

    // The declaration the controller records for n1 is the predicted one.
    let mut got = None;
    for _ in 0..600 {
        got = recorded(&mesh, "n1").await;
        if got.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, mut modules) = got.expect("no declaration for n1");
    // The one thing a plan cannot predict: which of n1's spare keys the
    // module is given when the declaration is made.
    let key = modules[0]
        .as_object_mut()
        .and_then(|m| m.remove("key"))
        .expect("the new module is given a key");
    assert!(
        key.as_str()
            .is_some_and(|k| k.starts_with('U') && k.len() == 56),
        "{key}"
    );
    assert_eq!(modules, predicted);
    // n2 was not touched.
    assert_eq!(recorded(&mesh, "n2").await, before_n2);

    // The users file grants the principal exactly what the plan said, once
    // the host has reported the module's key.
    let mut grants = None;
    assert!(
        wait_until(LONG, || {
            grants = users_file_grants(&mesh.users_file(), principal);
            grants.is_some()
        }),
        "{principal} never appeared in the users file:\n{}",
        mesh.users_file()
    );
    let (file_publish, file_subscribe) = grants.unwrap();
    assert_eq!(file_publish, publish);
    assert_eq!(file_subscribe, subscribe);

    // And the consumer exists as planned.
    let js = async_nats::jetstream::new(mesh.observer().await);
    let stream = js.get_stream_no_info("EVENTS").await.unwrap();
    let mut info = None;
    for _ in 0..200 {
        if let Ok(i) = stream.consumer_info("mod_notifier").await {
            info = Some(i);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let info = info.expect("the controller created mod_notifier");
    let filters: BTreeSet<String> = info.config.filter_subjects.iter().cloned().collect();
    let planned: BTreeSet<String> = consumer["filter_subjects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(filters, planned);

    // Planning it again: already assigned, refused, still nothing written.
    let again = mesh.mesh(&["plan", "assign", "notifier", "n1"]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already assigned"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assign_wait_returns_once_the_report_says_how_the_module_came_out() {
    let (mesh, _hosts) = Mesh::with_hosts(Backend::Sqlite, &["n1"]).await;
    let out = mesh.mesh(&["assign", "echo", "n1", "--wait", "--timeout", "2m"]);
    let stdout = ok(&out, "assign --wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.ends_with("echo on n1: running (declaration 1)\n"),
        "{stdout}"
    );
    // Not a terminal: plain lines, no spinner redraws.
    assert!(
        stderr.contains("waiting for the controller to declare the change to n1\n"),
        "{stderr}"
    );
    assert!(!stderr.contains('\r'), "{stderr:?}");
    // It returned only once a report answered: the store has it.
    let s = store(&mesh).await;
    let r = s
        .latest_report(&Name::new("n1").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.report.declaration_version, 1);
    s.close().await;
    // Assigned again: nothing new to declare, and the wait says so at once.
    let again = ok(
        &mesh.mesh(&["assign", "echo", "n1", "--wait", "--timeout", "30s"]),
        "assign --wait again",
    );
    assert!(
        again.ends_with("echo on n1: running (declaration 1)\n"),
        "{again}"
    );

    let out = mesh.mesh(&["unassign", "echo", "n1", "--wait"]);
    let stdout = ok(&out, "unassign --wait");
    assert!(
        stdout.ends_with("echo on n1: stopped (declaration 2)\n"),
        "{stdout}"
    );

    // A module whose program is missing comes out failed: exit 1, saying so.
    let out = mesh.mesh(&["assign", "notifier", "n1", "--wait", "--timeout", "3m"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("notifier on n1: failed (declaration 3): "),
        "{stdout}"
    );
}

/// `mesh up` without a terminal: its progress as plain lines, ending with
/// what the local node reported.
#[test]
fn mesh_up_says_in_plain_lines_how_its_modules_came_out() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("up.log");
    let out = std::fs::File::create(&log).unwrap();
    let port = mesh_testkit::broker::free_port().unwrap().to_string();
    let dir = tmp.path().join(".mesh");
    let mut child = std::process::Command::new(harness::mesh_bin())
        .args(["up", "--dir", dir.to_str().unwrap(), "--port", &port])
        .args(["--catalogue", Mesh::examples().to_str().unwrap()])
        .env("PATH", harness::path_with_bins())
        .env(
            "MESH_NATS_SERVER",
            mesh_testkit::nats_server_binary().unwrap(),
        )
        .env("MESH_LOG", "warn,async_nats=off")
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    // Every runnable example module, each running: the line lists them all.
    let reported = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("up: node local reports "))
            .map(str::to_string)
    };
    let said = wait_until(LONG, || {
        reported(&read()).is_some_and(|l| {
            [
                "build-machine",
                "echo",
                "greeter",
                "node-worker",
                "recorder",
                "ticker",
                "ticker-box",
                "worker",
            ]
            .iter()
            .all(|m| l.contains(&format!("{m} running")))
        })
    });
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    let text = read();
    assert!(said, "{text}");
    assert!(status.success(), "{status}: {text}");
    // Each step said once, in order, with no spinner redraws.
    let steps = [
        "up: starting the broker\n",
        "up: broker on ",
        "up: enrolling node local\n",
        "up: node local enrolled\n",
        "up: waiting for node local to report",
        "up: node local reports build-machine running, echo running, greeter running, ",
    ];
    let mut at = 0;
    for s in steps {
        let i = text[at..]
            .find(s)
            .unwrap_or_else(|| panic!("{s:?} not after byte {at}:\n{text}"));
        at += i + s.len();
    }
    assert!(!text.contains('\r'), "{text:?}");
}

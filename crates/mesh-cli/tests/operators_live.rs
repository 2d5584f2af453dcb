//! Operators, live: persons with roles ask the active controller for
//! operations over the bus, as themselves. What a role allows is carried
//! out and audited naming the person; what it does not is refused by the
//! server itself (the violation's subject heard at once), and by the
//! controller against the records; a retried request is answered from its
//! audit row, not carried out twice; with no active controller a request
//! meets no responder at once. And the whole table: every operation asked
//! by every role from machines that cannot read the mesh's directory.

#[path = "join_live/harness.rs"]
mod harness;
#[path = "operators_live/table.rs"]
mod table;

use std::time::Duration;

use harness::{Backend, Mesh, module_pid, wait_until};
use mesh_core::operation::wire::Reply;

const WAIT: Duration = Duration::from_secs(10);

/// A person's key made and the person recorded with `role`; their seed.
fn person(mesh: &Mesh, name: &str, role: &str) -> String {
    let seed = mesh.tmp.path().join(format!("{name}.seed"));
    let out = std::process::Command::new(harness::mesh_bin())
        .args(["person", "key", "--out", seed.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", harness::out_text(&out));
    let key = String::from_utf8(out.stdout).unwrap();
    let said = harness::ok(
        mesh,
        &["person", "add", name, "--role", role, "--nkey", key.trim()],
    );
    assert!(said.contains("the broker admits them now"), "{said}");
    std::fs::read_to_string(seed).unwrap()
}

/// Asks for `op` as `person` over `client`, expecting an answer.
async fn ask(
    client: &async_nats::Client,
    person: &str,
    op: &str,
    body: serde_json::Value,
) -> Reply {
    let m = tokio::time::timeout(
        WAIT,
        client.request(
            format!("mesh.controller.op.{person}.{op}"),
            body.to_string().into(),
        ),
    )
    .await
    .expect("answered in time")
    .expect("an answer");
    serde_json::from_slice(&m.payload).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_decide_what_a_person_may_ask_and_every_change_is_audited() {
    let (mut mesh, _hosts) = Mesh::with_hosts(Backend::Sqlite, &["n1"]).await;
    let ada_seed = person(&mesh, "ada", "operator");
    let dan_seed = person(&mesh, "dan", "viewer");
    let (ada, _) = mesh.connect_hearing("person_ada", &ada_seed).await;
    let (dan, dan_refusals) = mesh.connect_hearing("person_dan", &dan_seed).await;

    // A viewer reads.
    let Reply::Done { data, .. } = ask(&dan, "dan", "nodes", serde_json::json!({"id": "d1"})).await
    else {
        panic!("dan may read the nodes")
    };
    assert_eq!(data[0]["node"], "n1", "{data}");

    // An operator assigns: the controller writes it, the host runs it.
    let assign = serde_json::json!({"id": "a1", "args": {"module": "echo", "node": "n1"}});
    let Reply::Done { said, revision, .. } = ask(&ada, "ada", "assign", assign.clone()).await
    else {
        panic!("ada may assign")
    };
    assert!(said.starts_with("assigned echo to n1"), "{said}");
    assert!(revision.is_some());
    assert!(
        wait_until(Duration::from_secs(60), || module_pid(&mesh, "n1", "echo")
            .is_some()),
        "echo assigned over the bus never ran"
    );
    // The same request again (its answer lost): answered from the trail.
    let Reply::Done { said, .. } = ask(&ada, "ada", "assign", assign).await else {
        panic!("a retry is answered")
    };
    assert!(said.contains("not done again"), "{said}");
    // A failed precondition: refused, nothing changed, audited.
    let Reply::Refused { reason } = ask(
        &ada,
        "ada",
        "unassign",
        serde_json::json!({"id": "a2", "args": {"module": "greeter", "node": "n1"}}),
    )
    .await
    else {
        panic!("greeter is not assigned")
    };
    assert_eq!(reason, "greeter is not assigned to n1");
    // A value sent unsealed (or sealed to another key) is not recorded:
    // the controller opens what it keeps.
    let sender = nkeys::XKey::new();
    let Reply::Refused { reason } = ask(
        &ada,
        "ada",
        "secret-set",
        serde_json::json!({"id": "a3", "args": {
            "name": "db-password", "sealed": "cGxhaW50ZXh0", "sender": sender.public_key(),
        }}),
    )
    .await
    else {
        panic!("an unsealed value is refused")
    };
    let unsealed = reason.clone();
    assert!(
        reason
            .starts_with("the value of secret db-password is not sealed to this controller's XKey"),
        "{reason}"
    );
    // An upload that is not what the request says: refused, and purged.
    let upload = "0123456789abcdef0123456789abcdef";
    let js = async_nats::jetstream::new(ada.clone());
    js.publish(format!("mesh.upload.ada.{upload}"), "not the bytes".into())
        .await
        .unwrap()
        .await
        .expect("an operator's upload is stored");
    let Reply::Refused { reason } = ask(
        &ada,
        "ada",
        "artifact-put",
        serde_json::json!({"id": "a4", "args": {
            "module": "echo", "name": "x", "upload": upload, "size": 5, "sha256": "00",
        }}),
    )
    .await
    else {
        panic!("an upload that is not what it says is refused")
    };
    let mismatch = reason.clone();
    assert!(
        reason.starts_with(&format!("upload {upload} holds 13 bytes with sha256 ")),
        "{reason}"
    );
    assert_eq!(
        mesh.stored("UPLOADS").await,
        0,
        "a refused upload is purged"
    );

    // Beyond the role: the server refuses the publish, naming its subject,
    // before any controller sees it.
    let mut heard = dan_refusals.watch();
    for subject in [
        "mesh.controller.op.dan.assign",
        // Another person's operation, one the role would allow.
        "mesh.controller.op.ada.nodes",
    ] {
        dan.publish(subject, "{}".into()).await.unwrap();
        dan.flush().await.unwrap();
        let refusal = tokio::time::timeout(WAIT, heard.refused(|_| true))
            .await
            .expect("the server refuses at once");
        assert_eq!(refusal.subject, subject);
    }
    // The trail: exactly the changes asked for, each naming its person.
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&harness::ok(&mesh, &["audit", "--output", "json"])).unwrap();
    let asked: Vec<(String, String, String)> = rows
        .iter()
        .filter(|r| r["who"].as_str().unwrap().starts_with("person "))
        .map(|r| {
            (
                r["who"].as_str().unwrap().to_string(),
                r["operation"].as_str().unwrap().to_string(),
                r["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        asked,
        [
            ("person ada".into(), "assign".into(), "done".into()),
            (
                "person ada".into(),
                "unassign".into(),
                "refused: greeter is not assigned to n1".into()
            ),
            (
                "person ada".into(),
                "secret-set".into(),
                format!("refused: {unsealed}")
            ),
            (
                "person ada".into(),
                "artifact-put".into(),
                format!("refused: {mismatch}")
            ),
        ],
        "{rows:?}"
    );

    // No active controller: a request meets no responder at once.
    mesh.controller.take().unwrap().stop();
    let started = std::time::Instant::now();
    let r = dan
        .request("mesh.controller.op.dan.nodes", "{\"id\": \"d2\"}".into())
        .await;
    assert!(
        matches!(&r, Err(e) if e.kind() == async_nats::client::RequestErrorKind::NoResponders),
        "{r:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// `mesh` run as a person on their own machine: a directory of its own, a
/// config home of its own, no mesh directory.
fn as_person(home: &std::path::Path, args: &[&str]) -> std::process::Output {
    let mut mesh = std::process::Command::new(harness::mesh_bin());
    table::at_home(mesh.args(args), home).output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_logs_in_from_elsewhere_and_the_commands_ask_the_controller() {
    let (mesh, _hosts) = Mesh::with_hosts(Backend::Sqlite, &["n1"]).await;
    let home = tempfile::tempdir().unwrap();
    let seed = home.path().join("ada.seed");
    let out = as_person(
        home.path(),
        &["person", "key", "--out", seed.to_str().unwrap()],
    );
    let key = String::from_utf8(out.stdout).unwrap();
    let login = table::recorded(&mesh, "ada", "viewer", key.trim(), seed.to_str().unwrap());
    let login: Vec<&str> = login.iter().map(String::as_str).collect();
    let out = as_person(home.path(), &login);
    assert!(out.status.success(), "{}", harness::out_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("logged in as person ada (context ada"),
        "{}",
        harness::out_text(&out)
    );
    let list = as_person(home.path(), &["context", "list"]);
    assert!(String::from_utf8_lossy(&list.stdout).starts_with("* ada"));

    let nodes = as_person(home.path(), &["nodes", "--output", "json"]);
    assert!(nodes.status.success(), "{}", harness::out_text(&nodes));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&nodes.stdout).unwrap();
    assert_eq!(rows[0]["node"], "n1");
    // What the controller does not serve over the bus says so, not "no mesh".
    let list = as_person(home.path(), &["secret", "list"]);
    let err = String::from_utf8_lossy(&list.stderr);
    assert!(
        !list.status.success()
            && err.contains("it is not served over the bus (yet) to context ada (person ada)"),
        "{err}"
    );
    // A viewer's assign: the broker refuses, the CLI names the role.
    let assign = as_person(home.path(), &["assign", "echo", "n1"]);
    let err = String::from_utf8_lossy(&assign.stderr);
    assert!(!assign.status.success(), "{err}");
    assert!(
        err.contains(
            "the broker refused publishing to mesh.controller.op.ada.assign: person ada may not ask for `assign` (it takes the operator role"
        ),
        "{err}"
    );
    // Made an operator, the same command from the same place takes effect.
    harness::ok(
        &mesh,
        &[
            "person",
            "add",
            "ada",
            "--role",
            "operator",
            "--nkey",
            key.trim(),
        ],
    );
    let assign = as_person(home.path(), &["assign", "echo", "n1"]);
    assert!(assign.status.success(), "{}", harness::out_text(&assign));
    assert!(String::from_utf8_lossy(&assign.stdout).starts_with("assigned echo to n1"));
    assert!(
        wait_until(Duration::from_secs(60), || module_pid(&mesh, "n1", "echo")
            .is_some()),
        "echo assigned from ada's machine never ran"
    );
    let rows: Vec<serde_json::Value> = serde_json::from_str(&harness::ok(
        &mesh,
        &["audit", "--person", "ada", "--output", "json"],
    ))
    .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["operation"], "assign");
}

/// Every stored message of every stream (KV buckets and object stores are
/// streams too), read as the controller: whether any holds `needle`.
async fn stored_anywhere(mesh: &Mesh, needles: &[String]) -> Vec<String> {
    use futures::StreamExt as _;
    let js = async_nats::jetstream::new(mesh.observer().await);
    let mut names = js.stream_names();
    let mut found = Vec::new();
    let mut read = 0u64;
    while let Some(name) = names.next().await {
        let name = name.unwrap();
        let mut stream = js.get_stream(&name).await.unwrap();
        let state = stream.info().await.unwrap().state.clone();
        for seq in state.first_sequence..=state.last_sequence {
            // Deleted or purged sequences have nothing to read.
            let Ok(m) = stream.get_raw_message(seq).await else {
                continue;
            };
            read += 1;
            let text = format!(
                "{} {:?} {}",
                m.subject,
                m.headers,
                String::from_utf8_lossy(&m.payload)
            );
            for n in needles {
                if text.contains(n.as_str()) {
                    found.push(format!("{name} #{seq} ({}) holds {n}", m.subject));
                }
            }
        }
    }
    assert!(read > 0, "no stored message was read");
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_by_every_role_from_machines_that_cannot_read_the_mesh() {
    use mesh_core::operation::Role;
    let (mesh, _hosts) = Mesh::with_hosts(Backend::Sqlite, &["n1"]).await;
    mesh.assign("ticker", "n1", true);
    assert!(
        wait_until(Duration::from_secs(60), || {
            let out = mesh.mesh(&["logs", "ticker"]);
            String::from_utf8_lossy(&out.stdout).contains("mesh-ticker: tick 3")
        }),
        "the ticker never ticked"
    );
    let machines: Vec<table::Machine> = [
        ("vic", Role::Viewer),
        ("olga", Role::Operator),
        ("ada", Role::Admin),
    ]
    .into_iter()
    .map(|(p, r)| table::machine(&mesh, p, r))
    .collect();
    let seed = mesh.dir.join("controller/nkey.seed");
    assert!(
        std::fs::read(&seed).is_ok(),
        "the controller's machine reads it"
    );
    let mut values = Vec::new();
    for m in &machines {
        assert!(
            table::hidden_from(m, &seed),
            "{}'s machine reads the mesh's directory",
            m.person
        );
        let value = format!("plaintext-of-{}-{}", m.person, std::process::id());
        std::fs::write(m.path("value"), &value).unwrap();
        values.push(value);
    }

    let mut wrong = Vec::new();
    // Each login is the person's own change: their key recorded.
    let mut expected: Vec<(String, String)> = machines
        .iter()
        .map(|m| (format!("person {}", m.person), "login".to_string()))
        .collect();
    for m in &machines {
        for r in table::rows(m, &mesh) {
            wrong.extend(table::check(&mesh, m, &r));
            if m.role.allows(r.op) && r.op.changes() {
                expected.push((format!("person {}", m.person), r.op.to_string()));
            }
        }
    }
    let operations = table::covered(&machines[0], &mesh).len();
    println!(
        "operators: {operations} operations x 3 roles, {} wrong",
        wrong.len()
    );
    assert!(wrong.is_empty(), "{wrong:#?}");

    // Each build asked for waits in the build machines' queue (none is
    // assigned to take it).
    let builds = expected.iter().filter(|(_, op)| op == "build").count() as u64;
    let seat = mesh_core::names::Name::new("mesh-build-machine").unwrap();
    let queued = mesh.stored(&mesh_core::subjects::seat_stream(&seat)).await;
    assert_eq!((builds, queued), (2, 2));
    // Every upload, once put, is gone from UPLOADS.
    assert_eq!(mesh.stored("UPLOADS").await, 0);

    // The trail: exactly the changes the table made, each naming its
    // person, in order (a refused publish never reached the controller).
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&harness::ok(&mesh, &["audit", "--output", "json"])).unwrap();
    let people: Vec<String> = machines
        .iter()
        .map(|m| format!("person {}", m.person))
        .collect();
    let trail: Vec<(String, String)> = rows
        .iter()
        .filter(|r| people.iter().any(|p| r["who"] == p.as_str()))
        .map(|r| {
            assert_eq!(r["outcome"], "done", "{r}");
            (
                r["who"].as_str().unwrap().to_string(),
                r["operation"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(trail, expected);
    // A secret's value set from a person's machine: never in plaintext in
    // any stream, the trail, or the controller's log.
    let found = stored_anywhere(&mesh, &values).await;
    assert!(found.is_empty(), "{found:#?}");
    let trail = serde_json::to_string(&rows).unwrap();
    let log = mesh.controller().log();
    for v in &values {
        assert!(!trail.contains(v.as_str()) && !log.contains(v.as_str()));
    }
    assert!(
        !trail.contains("sealed"),
        "the trail keeps a secret's name only"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_active_controller_a_person_is_told_at_once_and_the_standby_answers_once_active() {
    use mesh_core::operation::Role;
    let (mut mesh, _hosts) = Mesh::with_hosts(Backend::Postgres, &["n1"]).await;
    let standby = mesh.spawn_controller("standby", &[], "info,async_nats=off");
    standby.wait_log("standing by", Duration::from_secs(30));
    let vic = table::machine(&mesh, "vic", Role::Viewer);
    let nodes = vic.mesh(&["nodes"]);
    assert!(nodes.status.success(), "{}", harness::out_text(&nodes));

    // The active one killed: its lease runs on, so no controller is
    // active, and a command says so at once rather than waiting.
    mesh.controller.take().unwrap().kill();
    let started = std::time::Instant::now();
    let nodes = vic.mesh(&["nodes"]);
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&nodes.stderr);
    assert!(
        !nodes.status.success(),
        "answered with no active controller"
    );
    assert!(
        err.contains("no active controller answers on the mesh of context vic"),
        "{err}"
    );
    assert!(took < Duration::from_secs(3), "took {took:?}");
    // Once the standby has taken the lease, the same command is answered.
    standby.wait_log("controller running", Duration::from_secs(30));
    assert!(
        wait_until(Duration::from_secs(20), || vic
            .mesh(&["nodes"])
            .status
            .success()),
        "the standby, active, never answered"
    );
}

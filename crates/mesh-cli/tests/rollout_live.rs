//! `mesh rollout check` against a live mesh on RabbitMQ (DESIGN
//! "rollout"): a real RabbitMQ, controller and host, and the NATS server
//! the mesh would move onto run as a module holding `mesh-broker` from the
//! user list the controller declares it. The check names each missing
//! thing with its next step; each is fixed in turn and the check asked
//! again, until it exits 0. It changes nothing itself. `--confirm` runs
//! the check and refuses while it fails, and prints the move's plan; the
//! host's half of the move is walked with the record the move flips.

#[path = "join_live/harness.rs"]
mod harness;
#[path = "bus_live/mesh.rs"]
mod mesh;

use std::process::Output;

use harness::{out_text, wait_until};
use mesh::{BusMesh, LONG};

/// A NATS server as a module: its configuration (the genesis certificate,
/// a port of its own) is the test's file; who may connect is the
/// `bus-users` file the controller declares into the module's directory.
fn nats_broker(conf: &std::path::Path) -> String {
    let server = mesh_testkit::nats_server_binary().unwrap();
    format!(
        r#"[module]
name = "nats-broker"
description = "the NATS server the mesh moves onto"

[run]
command = ["{}", "--config", "{}"]

[holds]
seats = ["mesh-broker"]

[[file]]
name = "bus-users"
path = "accounts.conf"
"#,
        server.display(),
        conf.display()
    )
}

fn check(mesh: &BusMesh) -> (i32, String) {
    let o: Output = mesh.mesh(&["rollout", "check"]);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
    )
}

/// The `what` of each missing thing, as `--output json` gives them.
fn missing(mesh: &BusMesh) -> Vec<String> {
    let o = mesh.mesh(&["rollout", "check", "--output", "json"]);
    let r: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", out_text(&o)));
    assert_eq!(r["from"], "amqp", "{r}");
    assert_eq!(
        r["ready"].as_bool(),
        Some(o.status.success()),
        "exit 0 exactly when ready: {r}"
    );
    r["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["what"].as_str().unwrap().to_string())
        .collect()
}

/// Waits until the check lists exactly `want`.
fn until_missing(mesh: &BusMesh, want: &[&str]) {
    let mut last = Vec::new();
    let ok = wait_until(LONG, || {
        last = missing(mesh);
        last == want
    });
    assert!(
        ok,
        "the check never listed exactly {want:#?}; last: {last:#?}\nmodules: {}\ncontroller log:\n{}\nhost log:\n{}",
        String::from_utf8_lossy(&mesh.mesh(&["modules"]).stdout),
        mesh.controller().log(),
        mesh.host_log()
    );
}

#[test]
fn the_check_names_each_missing_thing_until_the_new_bus_stands_ready() {
    let http = format!("127.0.0.1:{}", mesh_testkit::broker::free_port().unwrap());
    let mut mesh = BusMesh::with_store("amqp", None, &["--http", &http]);
    mesh.start_controller();
    mesh.join("n1");
    mesh.controller().wait_log("node enrolled node=n1", LONG);

    // Nothing prepared: no server to move onto, said once with its step.
    let (code, text) = check(&mesh);
    assert_eq!(code, 1, "{text}");
    assert_eq!(
        text,
        "- no module holds mesh-broker: there is no NATS server in the mesh to move onto\n  next: register a module holding mesh-broker (the example catalogue's nats-broker) and assign it to a node: `mesh assign nats-broker NODE`\nnot ready: 1 thing to fix before the mesh can move onto NATS\n"
    );

    // A node with a token but no host yet: no credential for the new bus,
    // the one thing that must stop a move.
    mesh.ok(&["node", "add", "n2", "--ttl", "10m"]);
    until_missing(
        &mesh,
        &[
            "no module holds mesh-broker: there is no NATS server in the mesh to move onto",
            "node n2 holds no credential for the new bus: it would keep running and could not come back",
        ],
    );
    mesh.ok(&["node", "forget", "n2"]);

    // The server as a module on n1, whose address is not recorded yet.
    let port = mesh_testkit::broker::free_port().unwrap();
    // A process module works in its directory's `work`, where its files are.
    let module_dir = mesh.tmp.path().join("host-n1/modules/nats-broker/work");
    let conf = mesh.tmp.path().join("nats-broker.conf");
    let broker = mesh.dir.join("broker");
    std::fs::write(
        &conf,
        format!(
            "listen: \"127.0.0.1:{port}\"\ntls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n}}\njetstream {{\n  store_dir: \"{}\"\n}}\ninclude \"{}\"\n",
            broker.join("cert.pem").display(),
            broker.join("key.pem").display(),
            mesh.tmp.path().join("nats-broker-js").display(),
            // An include is read relative to the including file.
            module_dir
                .strip_prefix(mesh.tmp.path())
                .unwrap()
                .join("accounts.conf")
                .display(),
        ),
    )
    .unwrap();
    mesh.register_as("nats-broker", &nats_broker(&conf));
    mesh.ok(&["assign", "nats-broker", "n1"]);
    until_missing(
        &mesh,
        &["the new bus was not dialled: node n1 (holding mesh-broker) has no address recorded"],
    );
    // It runs from the user list the controller declared it.
    let users = std::fs::read_to_string(module_dir.join("accounts.conf")).unwrap();
    assert!(users.contains("# controller"), "{users}");

    // Its address: dialled, pinned, and the objects asserted ahead.
    mesh.ok(&[
        "node",
        "set",
        "n1",
        "--address",
        "127.0.0.1",
        "--port",
        &format!("mesh-broker={port}"),
    ]);
    until_missing(&mesh, &[]);
    let (code, text) = check(&mesh);
    assert_eq!(code, 0, "{text}");
    assert_eq!(
        text,
        "ready: every node can move from RabbitMQ onto NATS (`mesh rollout --confirm`)\n"
    );
    assert!(
        mesh.controller().log().contains(&format!(
            "the new bus's objects asserted ahead of a move url=tls://127.0.0.1:{port}"
        )),
        "{}",
        mesh.controller().log()
    );

    // The queues were declared after the users they need, never before:
    // the controller was refused nothing on RabbitMQ.
    let log = mesh.controller().log();
    assert!(!log.contains("ACCESS_REFUSED"), "{log}");

    // A node whose host is stopped before the move is named, and the
    // mesh is not ready until it is back (or forgotten).
    mesh.join("n2");
    until_missing(&mesh, &[]);
    let stopped = mesh.hosts[1].stop();
    assert!(stopped.success(), "{stopped:?}");
    let stale = wait_until(std::time::Duration::from_secs(40), || {
        missing(&mesh)
            == [
                "node n2 is stale: a host not running when the mesh moves is never told the new bus",
            ]
    });
    assert!(stale, "{:#?}", missing(&mesh));
    let (code, text) = check(&mesh);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("  next: start `mesh host` on n2 (or `mesh node forget n2`) before moving\n"),
        "{text}"
    );

    // `--confirm` runs the check itself: refused while n2 is stale, naming
    // it, and nothing changed.
    let o = mesh.mesh(&["rollout", "--confirm"]);
    let said = out_text(&o);
    assert!(!o.status.success(), "{said}");
    assert!(
        said.contains("- node n2 is stale")
            && said.contains("refused: the mesh is not ready to move onto NATS (1 thing above); nothing was changed"),
        "{said}"
    );
    // n2 forgotten: ready; the plan printed, then the move carried out.
    mesh.ok(&["node", "forget", "n2"]);
    until_missing(&mesh, &[]);
    // Before: the listing sees the mesh's connections to RabbitMQ (asked
    // as the controller asks the management API).
    let management = {
        let genesis = mesh_controller::Genesis::open(&mesh.dir).unwrap();
        let seed =
            std::fs::read_to_string(mesh.dir.join(mesh_controller::genesis::NKEY_SEED)).unwrap();
        mesh_bus::amqp::Management::new(
            &genesis.management_url().unwrap(),
            "controller",
            &mesh_bus::Secret::new(mesh_core::authority::amqp::password_of(seed.trim())),
            &mesh.dir.join(mesh_controller::genesis::CA_CERT),
        )
        .unwrap()
    };
    let mut users = Vec::new();
    let seen = wait_until(LONG, || {
        users = management.connection_users().unwrap();
        users.iter().any(|u| u == "controller") && users.iter().any(|u| u == "host_n1")
    });
    assert!(seen, "the mesh's connections not listed: {users:?}");
    assert!(
        mesh.ok(&["rollout", "status"])
            .starts_with("no move recorded")
    );
    let o = mesh.mesh(&["rollout", "--confirm"]);
    let said = out_text(&o);
    let nats = format!("tls://127.0.0.1:{port}");
    assert!(
        said.starts_with(&format!(
            "the move, in order:\n  1. record the mesh's bus as NATS at {nats} (one record)\n  2. declare the new bus to 1 node over RabbitMQ: n1\n  3. 1 host reconnects to NATS with the key it holds, binds its consumer and reports there\n"
        )) && said.contains("  6. once every node reports on NATS: remove the mesh's RabbitMQ users"),
        "{said}"
    );
    assert!(
        o.status.success()
            && said.contains(&format!("confirmed: the mesh moves onto NATS at {nats}")),
        "{said}"
    );
    let moved_at = std::time::Instant::now();

    // n1's host: told over RabbitMQ, it reports there, leaves, and
    // connects to NATS with the key it already holds.
    mesh.hosts[0].wait_log("left RabbitMQ", LONG);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let host_file = mesh.tmp.path().join("host-n1/host.json");
    let recorded = std::fs::read_to_string(&host_file).unwrap();
    assert!(
        recorded.contains(&nats) && !recorded.contains("amqps://"),
        "{recorded}"
    );
    let report = rt.block_on(async {
        let genesis = mesh_controller::Genesis::open(&mesh.dir).unwrap();
        let seed =
            std::fs::read_to_string(mesh.dir.join(mesh_controller::genesis::NKEY_SEED)).unwrap();
        let config = mesh_bus::BusConfig {
            url: nats.clone(),
            principal: "controller".into(),
            inbox_prefix: Some(mesh_core::subjects::inbox_prefix("controller")),
            credential: mesh_bus::ClientCredential::NKey(mesh_bus::Secret::new(seed.trim())),
            ca_file: None,
            pin: Some(mesh_bus::CertPin::from_hex(&genesis.cert_sha256).unwrap()),
        };
        // The NATS module restarts with the move (its environment
        // changed): connected to once it is back.
        let mut bus = None;
        for _ in 0..600 {
            match mesh_bus::seam::Bus::connect(&config).await {
                Ok(b) => {
                    bus = Some(b);
                    break;
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        }
        let bus = bus.expect("the module's NATS server answers after the move");
        let js = async_nats::jetstream::new(bus.nats().unwrap().client().clone());
        let subject = mesh_core::subjects::report(&mesh_core::names::Name::new("n1").unwrap());
        for _ in 0..600 {
            if let Ok(stream) = js.get_stream(mesh_core::subjects::STREAM_CONTROL).await
                && let Ok(m) = stream.get_last_raw_message_by_subject(&subject).await
            {
                return Some(String::from_utf8_lossy(&m.payload).into_owned());
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        None
    });
    let report =
        report.unwrap_or_else(|| panic!("no report of n1 on NATS; host log:\n{}", mesh.host_log()));
    assert!(report.contains("\"node\":\"n1\""), "{report}");
    // On NATS after it left: connected, and its consumer bound (just
    // after its first report there).
    let on_nats = |log: &str| {
        log.find("left RabbitMQ").is_some_and(|left| {
            log[left..].contains("connected to the bus")
                && log[left..].contains("bound the node's consumer")
        })
    };
    assert!(
        wait_until(LONG, || on_nats(&mesh.host_log())),
        "{}",
        mesh.host_log()
    );

    // The controller: what RabbitMQ held recorded, then onto NATS itself.
    mesh.controller()
        .wait_log("the old bus drained: moving onto the new one", LONG);
    mesh.controller().wait_log(
        "left the old bus: this controller moves onto the new one",
        LONG,
    );
    let status = mesh.ok(&["rollout", "status"]);
    assert!(
        status.starts_with(&format!(
            "move onto {nats}: 1 of 1 nodes took it; the controller moved itself\n  n1"
        )) && status.contains("on the new bus"),
        "{status}"
    );
    // It serves on NATS: a module assigned now is declared there and its
    // report recorded from there.
    mesh.register_as(
        "sleeper",
        "[module]\nname = \"sleeper\"\ndescription = \"runs after the move\"\n\n[run]\ncommand = [\"sleep\", \"3600\"]\n",
    );
    mesh.ok(&["assign", "sleeper", "n1"]);
    assert!(
        wait_until(LONG, || mesh.state("n1", "sleeper").as_deref()
            == Some("running")),
        "sleeper never running after the move; controller log:\n{}\nhost log:\n{}",
        mesh.controller().log(),
        mesh.host_log()
    );
    println!(
        "rollout: 1 node moved in {:.1} s",
        moved_at.elapsed().as_secs_f64()
    );
    // A node added after the move enrols on NATS (its token names the new
    // bus) and runs what it is assigned.
    mesh.join("n3");
    mesh.ok(&["assign", "sleeper", "n3"]);
    assert!(
        wait_until(LONG, || mesh.state("n3", "sleeper").as_deref()
            == Some("running")),
        "sleeper never running on n3; controller log:\n{}",
        mesh.controller().log()
    );
    // The check says there is nothing left to move.
    let (code, text) = check(&mesh);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("the mesh already runs on NATS"), "{text}");
    // No process of the mesh is connected to RabbitMQ any more.
    let gone = wait_until(LONG, || {
        users = management.connection_users().unwrap();
        !users
            .iter()
            .any(|u| u == "controller" || u.starts_with("host_") || u.starts_with("module_"))
    });
    assert!(gone, "still connected to RabbitMQ: {users:?}");
}

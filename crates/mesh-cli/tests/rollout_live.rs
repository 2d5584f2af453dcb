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
#[path = "join_live/report_stream.rs"]
mod report_stream;
#[path = "rollout_live/setup.rs"]
mod setup;

use harness::{Daemon, out_text, wait_until};
use mesh::{BusMesh, LONG};
use mesh_core::names::Name;
use setup::{
    WATCHER, address, broker_module, check, lines, missing, on_the_new_bus, speaking_modules,
    until_missing, watcher,
};

/// Reports sent during the move.
const REPORTS: usize = 2_000;

/// Where the speaking modules run: n2 runs none (its reports are the
/// stream's).
const PLACED: [(&str, &str); 4] = [
    ("ticker", "n1"),
    ("greeter", "n1"),
    ("worker", "n3"),
    ("recorder", "n3"),
];

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
    let new_bus = broker_module(&mesh);
    let (port, module_dir) = (new_bus.port, new_bus.module_dir.clone());
    until_missing(
        &mesh,
        &["the new bus was not dialled: node n1 (holding mesh-broker) has no address recorded"],
    );
    // It runs from the user list the controller declared it.
    let users = std::fs::read_to_string(module_dir.join("accounts.conf")).unwrap();
    assert!(users.contains("# controller"), "{users}");

    // Its address: dialled, pinned, and the objects asserted ahead.
    address(&mesh, &new_bus);
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
    // n2's host started again from its state directory, and a third node
    // enrolled: ready, three nodes to move.
    let n2_state = mesh.tmp.path().join("host-n2");
    mesh.hosts[1] = Daemon::spawn(
        "host n2",
        &["host", "--state", n2_state.to_str().unwrap()],
        mesh.tmp.path().join("host-n2-again.log"),
        mesh.tmp.path(),
    );
    mesh.join("n3");
    until_missing(&mesh, &[]);

    // Modules that speak, on RabbitMQ: the ticker and the greeter on n1,
    // the worker holding `jobs` and the recorder on n3; and a person.
    mesh.register_all(&speaking_modules());
    for (module, node) in PLACED {
        mesh.ok(&["assign", module, node]);
    }
    let ada = mesh.tmp.path().join("ada.seed");
    let key = std::process::Command::new(harness::mesh_bin())
        .args(["person", "key", "--out", ada.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(key.status.success(), "{}", out_text(&key));
    let key = String::from_utf8(key.stdout).unwrap();
    mesh.ok(&["person", "add", "ada", "--tools", "*", "--nkey", key.trim()]);
    for (module, node) in PLACED {
        assert!(
            wait_until(LONG, || mesh.state(node, module).as_deref()
                == Some("running")),
            "{module} never running on {node} on RabbitMQ"
        );
    }
    assert!(
        wait_until(LONG, || !lines(&mesh, "n3", "recorder", "heard.jsonl")
            .is_empty()),
        "the recorder heard no tick on RabbitMQ"
    );
    // A person's call speaks NATS: refused on RabbitMQ, saying so.
    let o = mesh.mesh(&["call", "greeter.greet", "{}", "--as", ada.to_str().unwrap()]);
    assert!(
        !o.status.success()
            && out_text(&o).contains("`mesh call` speaks NATS, and this mesh runs on RabbitMQ"),
        "{}",
        out_text(&o)
    );
    // Each speaking module's key for NATS is held ahead: ready again.
    until_missing(&mesh, &[]);

    // Who is on RabbitMQ, asked as an administrator of the test's own (not
    // a mesh user: the move leaves it).
    let management = watcher(&mesh);
    let mut users = Vec::new();
    let seen = wait_until(LONG, || {
        users = management.connection_users().unwrap();
        ["controller", "host_n1", "host_n2", "host_n3"]
            .iter()
            .all(|want| users.iter().any(|u| u == want))
    });
    assert!(seen, "the mesh's connections not listed: {users:?}");
    assert!(
        mesh.ok(&["rollout", "status"])
            .starts_with("no move recorded")
    );

    // The report stream: n2's own key on RabbitMQ, as its host speaks.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let newest = || {
        rt.block_on(async {
            let store = mesh_store::Store::open(&mesh.store_url).await.unwrap();
            let d = store
                .latest_declaration(&Name::new("n2").unwrap())
                .await
                .unwrap();
            store.close().await;
            d.map_or(0, |d| d.version)
        })
    };
    let before = newest();
    let streamer = rt.block_on(mesh.as_host("n2"));

    let o = mesh.mesh(&["rollout", "--confirm"]);
    let moved_at = std::time::Instant::now();
    let said = out_text(&o);
    let nats = format!("tls://127.0.0.1:{port}");
    assert!(
        said.starts_with(&format!(
            "the move, in order:\n  1. record the mesh's bus as NATS at {nats} (one record)\n  2. declare the new bus to 3 nodes over RabbitMQ: n1, n2, n3\n  3. 3 hosts reconnect to NATS with the key each holds, bind their consumers and report there\n"
        )) && said.contains("  6. once every node reports on NATS: remove the mesh's RabbitMQ users"),
        "{said}"
    );
    assert!(
        o.status.success()
            && said.contains(&format!("confirmed: the mesh moves onto NATS at {nats}")),
        "{said}"
    );
    let restarts = said
        .lines()
        .find(|l| l.starts_with("  4. restart 4 modules onto NATS: "))
        .unwrap_or_else(|| panic!("{said}"));
    for (module, node) in PLACED {
        assert!(restarts.contains(&format!("{module} on {node}")), "{said}");
    }

    // During the move: 2,000 reports of n2 answering the declaration that
    // moves it, each confirmed kept by RabbitMQ while the hosts leave it.
    assert!(
        wait_until(LONG, || newest() > before),
        "n2 was never declared the move (newest {} before {before}); controller log:\n{}",
        newest(),
        mesh.controller().log()
    );
    let sequence = u64::try_from(newest()).unwrap();
    rt.block_on(mesh::send_reports_at(
        &streamer,
        "n2",
        "move",
        sequence,
        0..REPORTS,
    ));

    // Each host: told over RabbitMQ, it reports there, leaves, and
    // connects to NATS with the key it already holds.
    for (i, host) in mesh.hosts.iter().enumerate() {
        host.wait_log("left RabbitMQ", LONG);
        let node = format!("n{}", i + 1);
        let recorded =
            std::fs::read_to_string(mesh.tmp.path().join(format!("host-{node}/host.json")))
                .unwrap();
        assert!(
            recorded.contains(&nats) && !recorded.contains("amqps://"),
            "{node}: {recorded}"
        );
    }
    // The controller: what RabbitMQ held recorded, then onto NATS itself.
    mesh.controller()
        .wait_log("the old bus drained: moving onto the new one", LONG);
    mesh.controller().wait_log(
        "left the old bus: this controller moves onto the new one",
        LONG,
    );
    let took = moved_at.elapsed();
    let (recorded, twice) = rt.block_on(report_stream::wait_count(
        &mesh.store_url,
        "n2",
        "move",
        REPORTS,
    ));
    let lost = REPORTS - recorded;
    println!(
        "rollout: 3 nodes moved in {:.1} s, {REPORTS} reports, {lost} lost, {twice} twice",
        took.as_secs_f64()
    );
    assert_eq!((recorded, twice), (REPORTS, 0));

    // Every host on NATS: connected, its consumer bound, and its report
    // read back from CONTROL on the module's server.
    let on_nats = |log: &str| {
        log.find("left RabbitMQ").is_some_and(|left| {
            log[left..].contains("connected to the bus")
                && log[left..].contains("bound the node's consumer")
        })
    };
    for host in &mesh.hosts {
        assert!(wait_until(LONG, || on_nats(&host.log())), "{}", host.log());
    }
    let reported = rt.block_on(async {
        let bus = on_the_new_bus(&mesh, &nats).await;
        let js = async_nats::jetstream::new(bus.nats().unwrap().client().clone());
        let mut seen = Vec::new();
        for node in ["n1", "n2", "n3"] {
            let subject = mesh_core::subjects::report(&Name::new(node).unwrap());
            for _ in 0..600 {
                if let Ok(stream) = js.get_stream(mesh_core::subjects::STREAM_CONTROL).await
                    && let Ok(m) = stream.get_last_raw_message_by_subject(&subject).await
                {
                    seen.push(String::from_utf8_lossy(&m.payload).into_owned());
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
        seen
    });
    assert_eq!(reported.len(), 3, "reports on NATS: {reported:?}");
    for (r, node) in reported.iter().zip(["n1", "n2", "n3"]) {
        assert!(r.contains(&format!("\"node\":\"{node}\"")), "{r}");
    }

    // The modules restarted onto NATS: running, events heard again, a
    // person's tool call answered and work through the seat done there.
    for (module, node) in PLACED {
        assert!(
            wait_until(LONG, || mesh.state(node, module).as_deref()
                == Some("running")),
            "{module} never running on {node} on NATS"
        );
    }
    let heard = lines(&mesh, "n3", "recorder", "heard.jsonl").len();
    assert!(
        wait_until(LONG, || lines(&mesh, "n3", "recorder", "heard.jsonl").len()
            >= heard + 3),
        "no tick heard on NATS after the move"
    );
    let call = |tool: &str, payload: &str| {
        let mut out = None;
        // Until the greeter, restarted onto NATS, serves again.
        wait_until(LONG, || {
            let o = mesh.mesh(&["call", tool, payload, "--as", ada.to_str().unwrap()]);
            let ok = o.status.success();
            out = Some(o);
            ok
        });
        let o = out.unwrap();
        assert!(o.status.success(), "mesh call {tool}: {}", out_text(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let greeted = call("greeter.greet", r#"{"name": "ada"}"#);
    assert!(greeted.to_string().contains("ada"), "{greeted}");
    let submitted = call(
        "greeter.submit",
        r#"{"seat": "jobs", "payload": {"job": 1}}"#,
    );
    let id = submitted["id"].as_str().unwrap().to_string();
    assert!(
        wait_until(LONG, || lines(&mesh, "n3", "worker", "done.jsonl")
            .iter()
            .any(|d| d["id"] == id.as_str())),
        "job {id} never done on NATS"
    );
    assert!(
        wait_until(LONG, || lines(&mesh, "n3", "recorder", "heard.jsonl")
            .iter()
            .any(|h| h["subject"] == "mesh.seat.jobs.event.done")),
        "the recorder never heard the job done"
    );

    // Every node reports on NATS: the mesh's users on RabbitMQ removed,
    // the controller's last, and no process of the mesh connected there.
    mesh.controller().wait_log(
        "the old bus retired: the mesh's RabbitMQ users removed",
        LONG,
    );
    let status = mesh.ok(&["rollout", "status"]);
    assert!(
        status.starts_with(&format!(
            "move onto {nats}: 3 of 3 nodes took it; the controller moved itself; RabbitMQ's users removed (it may be stopped)\n  n1"
        )) && status.matches("on the new bus").count() == 3,
        "{status}"
    );
    let left: Vec<String> = mesh_bus::amqp::users::observe(&management)
        .unwrap()
        .into_iter()
        .map(|u| u.name)
        .filter(|n| mesh_core::authority::amqp_users::is_mesh_user(n))
        .collect();
    assert!(left.is_empty(), "mesh users left on RabbitMQ: {left:?}");
    let gone = wait_until(LONG, || {
        users = management.connection_users().unwrap();
        !users.iter().any(|u| u != WATCHER)
    });
    assert!(gone, "still connected to RabbitMQ: {users:?}");
    // n2's key no longer opens RabbitMQ: the streamer's connection was
    // closed with its user.
    let refused = rt.block_on(async {
        let genesis = mesh_controller::Genesis::open(&mesh.dir).unwrap();
        let seed = std::fs::read_to_string(n2_state.join("nkey.seed")).unwrap();
        let config = mesh_bus::BusConfig {
            url: genesis.local_url(),
            inbox_prefix: Some("_INBOX.host_n2".into()),
            principal: "host_n2".into(),
            credential: mesh_bus::ClientCredential::NKey(mesh_bus::Secret::new(seed.trim())),
            ca_file: None,
            pin: Some(mesh_bus::CertPin::from_hex(&genesis.cert_sha256).unwrap()),
        };
        mesh_bus::seam::Bus::connect(&config).await.err()
    });
    let refused = refused.expect("host_n2 still admitted by RabbitMQ after the move");
    assert!(
        format!("{refused:#}").contains("ACCESS_REFUSED")
            || format!("{refused:?}").to_lowercase().contains("refused"),
        "{refused:?}"
    );
    drop(streamer);

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
    // The user list the NATS module runs from is the live one: it names
    // the module the controller just gave a key.
    let list = std::fs::read_to_string(module_dir.join("accounts.conf")).unwrap();
    assert!(
        list.contains("# controller") && list.contains("# host_n3") && list.contains("sleeper"),
        "{list}"
    );
    // A node added after the move enrols on NATS (its token names the new
    // bus) and runs what it is assigned.
    mesh.join("n4");
    mesh.ok(&["assign", "sleeper", "n4"]);
    assert!(
        wait_until(LONG, || mesh.state("n4", "sleeper").as_deref()
            == Some("running")),
        "sleeper never running on n4; controller log:\n{}",
        mesh.controller().log()
    );
    // The check says there is nothing left to move.
    let (code, text) = check(&mesh);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("the mesh already runs on NATS"), "{text}");
}

/// `mesh status`'s needs-action lines, as `what: next`.
fn needs_action(mesh: &BusMesh) -> Vec<String> {
    let o = mesh.mesh(&["status", "--output", "json"]);
    let s: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", out_text(&o)));
    s["needs_action"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| format!("{}: {}", a["what"], a["next"]))
        .collect()
}

/// The active controller killed just after `--confirm`: the standby takes
/// the lease and carries the move on from the records. n2's host, frozen
/// before the move, is waited for within `--move-within` and named by
/// `mesh status` (not taken the move, then left behind); the controller
/// moves without it, and RabbitMQ's users stay until n2's host, pointed at
/// NATS with `mesh host --broker`, reports there.
#[test]
fn a_standby_carries_a_move_on_and_a_node_left_behind_comes_over() {
    let cluster = mesh_testkit::PgCluster::start().unwrap();
    let free = || format!("127.0.0.1:{}", mesh_testkit::broker::free_port().unwrap());
    let (a_http, b_http) = (free(), free());
    let common = ["--move-within", "15s", "--lease", "2s"];
    let mut mesh = BusMesh::with_store(
        "amqp",
        Some(cluster.create_database().unwrap()),
        &[&["--http", a_http.as_str()][..], &common].concat(),
    );
    mesh.start_controller();
    let dir = mesh.dir.to_str().unwrap().to_string();
    let standby = Daemon::spawn(
        "controller b",
        &[
            &[
                "controller",
                "--dir",
                &dir,
                "--store",
                &mesh.store_url,
                "--http",
                &b_http,
            ][..],
            &common,
        ]
        .concat(),
        mesh.tmp.path().join("controller-b.log"),
        mesh.tmp.path(),
    );
    standby.wait_log("standing by", LONG);
    mesh.join("n1");
    mesh.join("n2");
    let new_bus = broker_module(&mesh);
    address(&mesh, &new_bus);
    until_missing(&mesh, &[]);
    let url = new_bus.url();

    // n2's host frozen: it hears nothing of the move.
    let frozen = mesh.hosts[1].pid();
    // SAFETY: kill(2) on a process this test started.
    unsafe { libc::kill(frozen as libc::pid_t, libc::SIGSTOP) };
    let o = mesh.mesh(&["rollout", "--confirm"]);
    assert!(o.status.success(), "{}", out_text(&o));
    // The active controller dies mid-move; the standby carries it on.
    mesh.controller.as_mut().unwrap().kill();
    standby.wait_log("controller running", LONG);
    let waiting = format!(
        "\"node n2 has not taken the move onto NATS at {url}: its host has not applied declaration"
    );
    let mut said = Vec::new();
    assert!(
        wait_until(LONG, || {
            said = needs_action(&mesh);
            said.iter().any(|l| l.starts_with(&waiting))
        }),
        "{said:#?}"
    );
    assert!(
        said.iter()
            .any(|l| l
                .contains("\"start its host on n2 now: the controller waits for it on RabbitMQ")),
        "{said:#?}"
    );
    standby.wait_log(
        "nodes did not take the new bus in time: moving without them nodes=n2",
        LONG,
    );
    standby.wait_log(
        "left the old bus: this controller moves onto the new one",
        LONG,
    );
    standby.wait_log(
        "the old bus is kept until these nodes report on the new one nodes=n2",
        LONG,
    );
    let left = format!(
        "\"node n2 was left behind on RabbitMQ by the move onto NATS at {url}: its host has not applied declaration"
    );
    assert!(
        wait_until(LONG, || {
            said = needs_action(&mesh);
            said.iter().any(|l| l.starts_with(&left))
        }),
        "{said:#?}"
    );
    assert!(
        said.iter().any(|l| l.contains(&format!(
            "\"on n2: `mesh host --state DIR --broker {url}` (its key is in the new bus's user list)"
        ))),
        "{said:#?}"
    );
    let status = mesh.ok(&["rollout", "status"]);
    assert!(
        status.starts_with(&format!(
            "move onto {url}: 1 of 2 nodes took it; the controller moved itself; RabbitMQ's users stay until every node reports on NATS\n"
        )),
        "{status}"
    );
    let management = watcher(&mesh);
    let mesh_users = || -> Vec<String> {
        mesh_bus::amqp::users::observe(&management)
            .unwrap()
            .into_iter()
            .map(|u| u.name)
            .filter(|n| mesh_core::authority::amqp_users::is_mesh_user(n))
            .collect()
    };
    assert!(
        mesh_users().iter().any(|u| u == "host_n2"),
        "n2's way back kept: {:?}",
        mesh_users()
    );

    // n2's host, as its operator runs it: pointed at NATS, it comes over.
    mesh.hosts[1].kill();
    let state = mesh.tmp.path().join("host-n2");
    mesh.hosts[1] = Daemon::spawn(
        "host n2",
        &["host", "--state", state.to_str().unwrap(), "--broker", &url],
        mesh.tmp.path().join("host-n2-over.log"),
        mesh.tmp.path(),
    );
    mesh.hosts[1].wait_log("bound the node's consumer", LONG);
    standby.wait_log(
        "the old bus retired: the mesh's RabbitMQ users removed",
        LONG,
    );
    let status = mesh.ok(&["rollout", "status"]);
    assert!(
        status.starts_with(&format!(
            "move onto {url}: 2 of 2 nodes took it; the controller moved itself; RabbitMQ's users removed"
        )),
        "{status}"
    );
    assert!(
        wait_until(LONG, || !needs_action(&mesh)
            .iter()
            .any(|l| l.contains("node n2"))),
        "{:#?}",
        needs_action(&mesh)
    );
    assert_eq!(mesh_users(), Vec::<String>::new());
}

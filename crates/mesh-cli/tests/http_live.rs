//! The controller's HTTP side, live: a real controller and a real host;
//! `/metrics` scraped and parsed as Prometheus text, its counters moving
//! when reports arrive; `/readyz` 503 until the broker answers; the JSON
//! API the same structures `mesh ... --output json` prints; with the
//! default port taken, the controller serving elsewhere and `mesh status`
//! finding it, and never showing another mesh's controller as its own.

#[path = "join_live/harness.rs"]
mod harness;
#[path = "http_live/serving.rs"]
mod serving;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use harness::{Backend, Mesh, wait_until};
use mesh_cli::status::http_get;
use mesh_state::views::{CatalogueView, ModuleView, NodeView, ReportView, SeatView, StatusView};

const LONG: Duration = Duration::from_secs(60);

fn get(addr: &str, path: &str) -> (u16, String) {
    http_get(addr, path).unwrap_or_else(|e| panic!("GET {path} on {addr}: {e}"))
}

fn get_json<T: serde::de::DeserializeOwned>(addr: &str, path: &str) -> T {
    let (code, body) = get(addr, path);
    assert_eq!(code, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

/// One scrape, parsed by a Prometheus text-format parser.
fn scrape(addr: &str) -> prometheus_parse::Scrape {
    let (code, body) = get(addr, "/metrics");
    assert_eq!(code, 200, "{body}");
    let lines = body.lines().map(|l| Ok(l.to_string()));
    prometheus_parse::Scrape::parse(lines).expect("the metrics parse as Prometheus text")
}

/// The value of a sample by name (and labels), as a number.
fn value(s: &prometheus_parse::Scrape, name: &str, label: Option<(&str, &str)>) -> f64 {
    let sample = s
        .samples
        .iter()
        .find(|x| x.metric == name && label.is_none_or(|(k, v)| x.labels.get(k) == Some(v)))
        .unwrap_or_else(|| {
            let names: Vec<_> = s.samples.iter().map(|x| x.metric.as_str()).collect();
            panic!("no sample {name} {label:?}; samples: {names:?}")
        });
    match &sample.value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => *v,
        prometheus_parse::Value::Histogram(buckets) => {
            buckets.iter().map(|b| b.count).fold(0.0, f64::max)
        }
        other => panic!("{name}: {other:?}"),
    }
}

fn json<T: serde::de::DeserializeOwned>(mesh: &Mesh, args: &[&str]) -> T {
    let out = mesh.mesh(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_move_when_reports_arrive_and_the_api_says_what_the_listings_say() {
    let (mesh, _host, addr) = serving::with_host("n1").await;
    assert!(
        wait_until(LONG, || get(&addr, "/readyz").0 == 200),
        "never ready: {:?}",
        get(&addr, "/readyz")
    );
    assert_eq!(get(&addr, "/healthz"), (200, "ok\n".into()));

    let before = scrape(&addr);
    let recorded = value(&before, "mesh_reports_recorded_total", None);
    let published = value(&before, "mesh_declarations_published_total", None);
    assert!(value(&before, "mesh_compositions_total", None) >= 1.0);
    assert_eq!(value(&before, "mesh_composition_live", None), 1.0);
    // The start's composition signalled the broker and waited for its canary.
    assert!(value(&before, "mesh_composition_reload_seconds", None) > 0.0);
    assert_eq!(value(&before, "mesh_store_window_open", None), 0.0);
    assert_eq!(value(&before, "mesh_hostile_terminated_total", None), 0.0);

    mesh.assign("echo", "n1", true);
    let running = |m: &Vec<ModuleView>| {
        m.iter()
            .any(|m| m.module == "echo" && m.node == "n1" && m.state == "running")
    };
    assert!(
        wait_until(LONG, || running(&get_json(&addr, "/api/modules"))),
        "echo never running on n1: {}",
        get(&addr, "/api/modules").1
    );

    let after = scrape(&addr);
    assert!(
        value(&after, "mesh_reports_recorded_total", None) > recorded,
        "reports recorded did not move from {recorded}"
    );
    assert!(
        value(&after, "mesh_declarations_published_total", None) > published,
        "declarations published did not move from {published}"
    );
    // The first report answering the new declaration observed the lag.
    let lag_count = after
        .samples
        .iter()
        .find(|s| s.metric == "mesh_declaration_apply_lag_seconds_count")
        .map(|s| match s.value {
            prometheus_parse::Value::Untyped(v) | prometheus_parse::Value::Counter(v) => v,
            _ => value(&after, "mesh_declaration_apply_lag_seconds", None),
        })
        .unwrap_or_else(|| value(&after, "mesh_declaration_apply_lag_seconds", None));
    assert!(lag_count >= 1.0, "no apply lag observed: {lag_count}");
    // Last seen reaches the store in batches (every 5 s).
    assert!(
        wait_until(LONG, || value(
            &scrape(&addr),
            "mesh_nodes",
            Some(("state", "ready"))
        ) == 1.0),
        "n1 never counted ready"
    );
    // echo has no [health]: healthy once running its default window,
    // counted from n1's newest report; nothing unhealthy, said as 0.
    assert!(
        wait_until(LONG, || value(
            &scrape(&addr),
            "mesh_modules",
            Some(("health", "healthy"))
        ) >= 1.0),
        "echo never counted healthy"
    );
    let now = scrape(&addr);
    assert_eq!(
        value(&now, "mesh_modules", Some(("health", "unhealthy"))),
        0.0
    );
    assert_eq!(value(&now, "mesh_deployments_running", None), 0.0);

    // The JSON API prints the listings' very structures.
    let nodes: Vec<NodeView> = get_json(&addr, "/api/nodes");
    let listed: Vec<NodeView> = json(&mesh, &["nodes", "--output", "json"]);
    let names = |v: &[NodeView]| {
        v.iter()
            .map(|n| (n.node.clone(), n.state.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(&nodes),
        vec![("n1".to_string(), "enrolled".to_string())]
    );
    assert_eq!(names(&nodes), names(&listed));
    let modules: Vec<ModuleView> = get_json(&addr, "/api/modules");
    let listed: Vec<ModuleView> = json(&mesh, &["modules", "--output", "json"]);
    assert_eq!(modules, listed);
    let reports: Vec<ReportView> = get_json(&addr, "/api/reports/n1?limit=3");
    let listed: Vec<ReportView> = json(
        &mesh,
        &["reports", "n1", "--limit", "3", "--output", "json"],
    );
    assert_eq!(reports, listed);
    assert!(
        reports[0].modules.iter().any(|m| m.module == "echo"),
        "{reports:?}"
    );
    let seats: Vec<SeatView> = get_json(&addr, "/api/seats");
    let listed: Vec<SeatView> = json(&mesh, &["seats", "--output", "json"]);
    assert_eq!(seats, listed);
    assert!(
        seats
            .iter()
            .any(|s| s.seat == "mesh-broker" && s.kind == "role"),
        "{seats:?}"
    );
    let catalogue: CatalogueView = get_json(&addr, "/api/catalogue");
    assert!(
        catalogue
            .modules
            .iter()
            .any(|m| m.module == "echo" && m.emits == ["started", "heard"])
    );
    // Hostile input: a heartbeat that is not one, sent with n1's own key.
    let seed = std::fs::read_to_string(mesh.host_dir("n1").join("nkey.seed")).unwrap();
    let host = mesh_bus::connect(&mesh.bus("host_n1", seed.trim(), Some("_INBOX.host_n1".into())))
        .await
        .expect("n1's host key connects");
    host.publish("mesh.control.heartbeat.n1", "not json".into())
        .await
        .unwrap();
    host.flush().await.unwrap();
    assert!(
        wait_until(LONG, || value(
            &scrape(&addr),
            "mesh_hostile_terminated_total",
            None
        ) == 1.0),
        "the malformed heartbeat was not counted"
    );
    let (code, body) = get(&addr, "/api/reports/N.1");
    assert_eq!(code, 400, "{body}");

    let status: StatusView = get_json(&addr, "/api/status");
    assert!(status.controller.ready, "{status:?}");
    assert_eq!(status.nodes.get("ready"), Some(&1), "{status:?}");
    assert_eq!(status.modules.get("running"), Some(&1), "{status:?}");
    assert!(status.needs_action.is_empty(), "{status:?}");
    let cli: StatusView = json(&mesh, &["status", "--http", &addr, "--output", "json"]);
    assert!(cli.controller.reachable && cli.controller.ready, "{cli:?}");
    assert_eq!(cli.controller.url, Some(format!("http://{addr}")));
    assert_eq!(cli.controller.composition_live, Some(true));
    assert_eq!((cli.nodes, cli.modules), (status.nodes, status.modules));
    let text = mesh.mesh(&["status", "--http", &addr]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("controller   ready"), "{text}");
    assert!(text.contains("nothing needs action"), "{text}");
}

/// A controller process the test started, killed when dropped.
struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn readyz_is_503_with_its_reason_until_the_broker_answers() {
    let addr = serving::free_addr();
    let mut mesh = Mesh::new(Backend::Sqlite);
    // No controller at all: mesh status says so, with the next step.
    let none: StatusView = json(&mesh, &["status", "--http", &addr, "--output", "json"]);
    assert!(!none.controller.reachable, "{none:?}");
    assert!(
        none.needs_action[0]
            .what
            .starts_with("the controller does not answer at http://"),
        "{none:?}"
    );
    let mut controller = None;
    let (dir, store) = (mesh.dir.clone(), mesh.store_url.clone());
    let log = mesh.tmp.path().join("controller.log");
    mesh.broker.stop_for(|| {
        let child = Command::new(harness::mesh_bin())
            .args([
                "controller",
                "--dir",
                dir.to_str().unwrap(),
                "--store",
                &store,
            ])
            .args(["--http", &addr])
            .env("MESH_LOG", "info,async_nats=off")
            .env_remove("MESH_STORE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        controller = Some(Controller(child));
        assert!(
            wait_until(LONG, || http_get(&addr, "/healthz")
                .is_ok_and(|(c, _)| c == 200)),
            "/healthz never answered; log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        // Once the lease is taken and the records read, the start waits
        // for the broker, and says so.
        assert!(
            wait_until(LONG, || get(&addr, "/readyz")
                == (503, "starting: connecting to the broker\n".into())),
            "{:?}",
            get(&addr, "/readyz")
        );
        let s = scrape(&addr);
        assert_eq!(value(&s, "mesh_ready", None), 0.0);
    });
    assert!(
        wait_until(LONG, || get(&addr, "/readyz") == (200, "ready\n".into())),
        "never ready once the broker answered: {:?}; log:\n{}",
        get(&addr, "/readyz"),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(value(&scrape(&addr), "mesh_ready", None), 1.0);
    drop(controller);
}

/// The address a controller wrote into its mesh's directory.
fn served_at(mesh: &Mesh) -> String {
    let file = mesh.dir.join(mesh_controller::http::ADDR_FILE);
    std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .trim()
        .to_string()
}

/// `mesh status` run elsewhere, its mesh named by MESH_DIR alone.
fn status_by_env(mesh: &Mesh, cwd: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let out = Command::new(harness::mesh_bin())
        .arg("status")
        .args(extra)
        .current_dir(cwd)
        .env("MESH_DIR", &mesh.dir)
        .env_remove("MESH_STORE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn key_of(mesh: &Mesh) -> String {
    mesh_controller::Genesis::open(&mesh.dir)
        .unwrap()
        .controller_nkey
}

#[test]
fn with_the_default_port_taken_status_finds_its_own_controller_and_no_other() {
    // Taken by this test, or by something else on this machine (another
    // controller, which may let it go meanwhile: then only this test's
    // hold proves the fallback).
    let default = mesh_controller::http::DEFAULT_ADDR;
    let mut held = None;
    wait_until(Duration::from_secs(5), || {
        held = std::net::TcpListener::bind(default).ok();
        held.is_some()
    });
    let mut ours = Mesh::new(Backend::Sqlite);
    ours.start_controller();
    let addr = served_at(&ours);
    if held.is_some() {
        assert_ne!(addr, default);
        ours.controller()
            .wait_log("the default HTTP address is taken", LONG);
    }
    let mut theirs = Mesh::new(Backend::Sqlite);
    let their_addr = serving::free_addr();
    theirs.start_controller_with(&["--http", &their_addr]);
    assert_eq!(served_at(&theirs), their_addr);
    // Records that tell the two apart: a node here, none there.
    ours.node_add("n1", "1h");
    let said: StatusView = get_json(&addr, "/api/status");
    assert_eq!(said.controller.controller_key, Some(key_of(&ours)));

    // From a directory of neither mesh, by MESH_DIR alone.
    let elsewhere = tempfile::tempdir().unwrap();
    let mine: StatusView = serde_json::from_slice(
        &status_by_env(&ours, elsewhere.path(), &["--output", "json"]).stdout,
    )
    .unwrap();
    assert!(mine.controller.reachable, "{mine:?}");
    assert_eq!(mine.controller.url, Some(format!("http://{addr}")));
    assert_eq!(mine.controller.other_mesh, None);
    assert!(mine.controller.compositions.is_some(), "{mine:?}");
    assert_eq!(mine.nodes.get("not enrolled"), Some(&1), "{mine:?}");

    // Pointed at the other mesh's controller: said so, nothing of it shown.
    let foreign: StatusView = serde_json::from_slice(
        &status_by_env(
            &ours,
            elsewhere.path(),
            &["--http", &their_addr, "--output", "json"],
        )
        .stdout,
    )
    .unwrap();
    assert!(!foreign.controller.reachable, "{foreign:?}");
    assert_eq!(foreign.controller.other_mesh, Some(key_of(&theirs)));
    assert_eq!(foreign.controller.compositions, None, "{foreign:?}");
    assert_eq!(foreign.controller.broker_connected, None, "{foreign:?}");
    assert_eq!(foreign.nodes.get("not enrolled"), Some(&1), "{foreign:?}");
    assert!(
        foreign.needs_action[0].what.starts_with(&format!(
            "the controller at http://{their_addr} belongs to another mesh (controller key {}",
            key_of(&theirs)
        )),
        "{foreign:?}"
    );
    let text = status_by_env(&ours, elsewhere.path(), &["--http", &their_addr]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.starts_with(&format!(
            "controller   not reachable: http://{their_addr} is another mesh's controller"
        )),
        "{text}"
    );
    assert!(text.contains("composition  unknown"), "{text}");
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);

    // A clean stop takes the address back.
    ours.controller.as_mut().unwrap().stop();
    assert!(!ours.dir.join(mesh_controller::http::ADDR_FILE).exists());
    drop(held);
}

/// A controller that stops cleanly gives its lease up: `mesh status` then
/// says no controller holds it, never naming the stopped one's pid.
#[test]
fn a_cleanly_stopped_controller_holds_no_lease_in_status() {
    let mut mesh = Mesh::new(Backend::Sqlite);
    let addr = serving::free_addr();
    let pid = mesh.start_controller_with(&["--http", &addr]).pid();
    let status = |mesh: &Mesh, args: &[&str]| {
        let out = mesh.mesh(&[&["status"], args].concat());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // `mesh status`'s text, and its lease line.
    let lease_line = |mesh: &Mesh| {
        let text = status(mesh, &[]);
        let line = text
            .lines()
            .find(|l| l.starts_with("lease "))
            .unwrap_or_default()
            .to_string();
        (text, line)
    };
    let held = format!("(pid {pid}, ");
    let (text, lease) = lease_line(&mesh);
    assert!(
        lease.starts_with("lease        epoch 1: mesh controller on ") && lease.contains(&held),
        "{text}"
    );

    assert!(mesh.controller.as_mut().unwrap().stop().success());
    let (text, lease) = lease_line(&mesh);
    assert!(
        lease.starts_with("lease        epoch 1: held by no controller (released by the last "),
        "{text}"
    );
    assert!(!text.contains(&held), "{text}");
    let json: StatusView = serde_json::from_str(&status(&mesh, &["--output", "json"])).unwrap();
    let lease = json.lease.expect("the lease's record");
    assert_eq!((lease.epoch, lease.holder, lease.http), (1, None, None));
}

/// What the test above shows the controller doing with a taken default
/// address is what `--help` says, for `mesh controller` and `mesh up`.
#[test]
fn the_help_says_a_taken_default_address_gives_way_to_a_free_port() {
    for command in ["controller", "up"] {
        let out = Command::new(harness::mesh_bin())
            .args([command, "--help"])
            .output()
            .unwrap();
        assert!(out.status.success(), "mesh {command} --help: {out:?}");
        let help = String::from_utf8_lossy(&out.stdout);
        let http = help
            .lines()
            .find(|l| l.trim_start().starts_with("--http <ADDR>"))
            .unwrap_or_else(|| panic!("mesh {command} --help names no --http:\n{help}"));
        assert!(
            http.contains(
                "[default: 127.0.0.1:7420; when another process holds it, a free port on 127.0.0.1, with a warning"
            ),
            "mesh {command} --help: {http}"
        );
        assert!(!http.contains("skipped"), "mesh {command} --help: {http}");
    }
}

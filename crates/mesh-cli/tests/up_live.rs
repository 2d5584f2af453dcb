//! `mesh up` the way a person runs it: the real binary in a process group
//! of its own, stopped as a terminal stops it (SIGINT, or SIGTERM, to the
//! whole group) while starting, while running and right after its broker
//! died, each time gone within a bound with nothing it started left, not
//! even a zombie; a second signal forcing the stop; its output into a pipe
//! whose reader went away; one mesh per directory; and a relative state
//! directory that every module still runs from. `mesh up --ha` is in
//! up_ha_live.rs.

#[path = "join_live/harness.rs"]
mod harness;
#[path = "up_live/up.rs"]
mod up;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use harness::{Mesh, mesh_bin, path_with_bins, wait_until};
use mesh_store::ModuleState;
use up::{
    MODULES, START, Up, assert_nothing_left, module_pids, outcomes, processes_under, run_bounded,
    serial, stored_versions, stubborn_catalogue,
};

#[derive(Debug, Clone, Copy)]
enum Moment {
    /// The broker up, the local node not yet enrolled: before the summary.
    Starting,
    /// The local node reported its modules running.
    Running,
    /// Running, and the broker just killed (SIGKILL), as a terminal's
    /// Ctrl-C kills a broker sharing the group.
    BrokerDied,
}

fn stop_at(moment: Moment, signal: i32) {
    let what = format!("{moment:?}, signal {signal}");
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let mut up = Up::start(root, root, Some(&root.join(".mesh")), &Mesh::examples());
    match moment {
        Moment::Starting => {
            up.wait_log("up: broker on");
            assert!(
                !up.log().contains("mesh up: "),
                "{what}: the summary came before the signal could:\n{}",
                up.log()
            );
        }
        Moment::Running | Moment::BrokerDied => up.wait_reported(),
    }
    let recorded = up.recorded();
    assert!(
        recorded.iter().any(|r| r.what == "broker"),
        "{what}: no broker recorded: {recorded:?}"
    );
    if let Moment::Running = moment {
        // Each example module runs the program `mesh up` put into the
        // artifact store, from the host's cache: none from PATH; the
        // container module runs the image `mesh up` built and put, in its
        // container (its client is the engine's).
        let cache = up.dir.join("host/artifacts");
        let modules = module_pids(&up.dir.join("host"));
        let names: Vec<&str> = modules.keys().map(String::as_str).collect();
        assert_eq!(names, MODULES, "{what}\n{}", up.log());
        assert_eq!(up.containers(), [up.container_of("ticker-box")], "{what}");
        for (module, pid) in modules.iter().filter(|(m, _)| *m != "ticker-box") {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
            assert!(
                exe.starts_with(&cache),
                "{what}: {module} runs {}, not a file of {}",
                exe.display(),
                cache.display()
            );
        }
    }
    if let Moment::BrokerDied = moment {
        let broker = recorded.iter().find(|r| r.what == "broker").unwrap();
        // SAFETY: kill(2) on the broker this case started.
        unsafe { libc::kill(broker.pid as i32, libc::SIGKILL) };
    }
    up.signal_group(signal);
    let status = up.wait_exit();
    assert!(status.success(), "{what}: {status}\n{}", up.log());
    assert!(up.log().contains("up: stopped"), "{what}:\n{}", up.log());
    if let Moment::Running = moment {
        // The group's signal did not reach the broker: it stayed up until
        // the host and the controller were done with it.
        let log = up.log();
        // Its readiness was read from its log, never probed by a connection
        // that speaks no TLS (which the server logs as an error).
        let broker_log = std::fs::read_to_string(up.dir.join("broker/nats.log")).unwrap();
        assert!(
            broker_log.contains("Server is ready") && !broker_log.contains("TLS handshake error"),
            "{what}: the broker's log:\n{broker_log}"
        );
        assert!(
            !log.contains("bus connection lost"),
            "{what}: the broker went first:\n{log}"
        );
        // Each connection closed before the broker stops: the host's before
        // the host says it stopped (its drain only asks for it), and the
        // controller's.
        let at = |needle: &str| {
            log.find(needle)
                .unwrap_or_else(|| panic!("{what}: never said {needle:?}:\n{log}"))
        };
        assert!(
            at("bus connection node=local event=closed") < at("host stopped"),
            "{what}: the host stopped with its connection open:\n{log}"
        );
        assert!(
            at("host stopped") < at("broker stopped")
                && at("bus connection closed") < at("broker stopped"),
            "{what}: the broker stopped before the host's and the controller's connections closed:\n{log}"
        );
    }
    assert_nothing_left(&up, &recorded, &what);
}

/// A port P for `mesh up --bus amqp` whose RabbitMQ ports (P + 10000,
/// + 20000, + 30000) are all free too.
fn free_amqp_port() -> u16 {
    (20_000..35_000u16)
        .step_by(7)
        .find(|p| {
            (0..4).all(|i| std::net::TcpListener::bind(("127.0.0.1", p + i * 10_000)).is_ok())
        })
        .expect("a free run of ports")
}

#[test]
fn mesh_up_on_rabbitmq_runs_every_example_module_and_a_group_signal_leaves_nothing() {
    let _one = serial();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let port = free_amqp_port().to_string();
    let launch = up::Launch {
        port: Some(port),
        extra: &["--bus", "amqp"],
        ..up::Launch::default()
    };
    let mut up = Up::spawn(
        root,
        root,
        Some(&root.join(".mesh")),
        &Mesh::examples(),
        launch,
    );
    up.wait_reported();
    let log = up.log();
    assert!(log.contains("up: broker on amqps://127.0.0.1:"), "{log}");
    // Every example module, each running the program `mesh up` put (the
    // controller keeps it and handed it to the host piece by piece).
    let modules = module_pids(&up.dir.join("host"));
    let names: Vec<&str> = modules.keys().map(String::as_str).collect();
    assert_eq!(names, MODULES, "{log}");
    let reported = up
        .log()
        .lines()
        .find(|l| l.starts_with("up: node local reports"))
        .unwrap()
        .to_string();
    for m in MODULES {
        assert!(reported.contains(&format!("{m} running")), "{reported}");
    }
    // The modules speak to each other through RabbitMQ: the recorder hears
    // the ticker's events.
    let recorder = up.dir.join("host/modules/recorder/log");
    assert!(
        wait_until(Duration::from_secs(60), || std::fs::read_to_string(
            &recorder
        )
        .unwrap_or_default()
        .contains("heard mesh.mod.ticker.event.tick")),
        "the recorder heard no tick on RabbitMQ"
    );
    let recorded = up.recorded();
    assert!(
        recorded.iter().any(|r| r.what == "broker"),
        "RabbitMQ's pid recorded: {recorded:?}"
    );
    up.signal_group(libc::SIGINT);
    let status = up.wait_exit();
    assert!(status.success(), "{status}\n{}", up.log());
    assert!(up.log().contains("up: stopped"), "{}", up.log());
    // No beam.smp, no epmd, no module: nothing under the case's directory
    // nor any recorded process.
    assert_nothing_left(&up, &recorded, "mesh up --bus amqp, SIGINT to the group");
}

#[test]
fn a_signal_to_the_whole_group_stops_mesh_up_at_any_moment_leaving_nothing() {
    let _one = serial();
    for signal in [libc::SIGINT, libc::SIGTERM] {
        for moment in [Moment::Starting, Moment::Running, Moment::BrokerDied] {
            stop_at(moment, signal);
        }
    }
}

/// A first `mesh up` whose broker port is taken fails naming the port,
/// and leaves nothing: run again with `--port P`, as the refusal advises,
/// it starts on P (a genesis left behind would still say the taken port).
/// In a directory that held files before, only what the start made goes.
#[test]
fn a_failed_first_start_leaves_nothing_and_a_new_port_takes_effect() {
    let _one = serial();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let catalogue = steady_catalogue(root);
    let dir = root.join(".mesh");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let args = [
        "up",
        "--dir",
        dir.to_str().unwrap(),
        "--port",
        &port,
        "--no-http",
        "--catalogue",
        catalogue.to_str().unwrap(),
    ];
    let out = run_bounded(root, &args, None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!("the broker's port 127.0.0.1:{port} is taken")),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "up: this first start failed; what it made in {} is removed",
            dir.display()
        )),
        "{err}"
    );
    assert!(
        !dir.exists(),
        "{:?}",
        std::fs::read_dir(&dir).map(|d| d.count())
    );

    // The operator's own file in the directory stays; only it.
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "mine").unwrap();
    let out = run_bounded(root, &args, None);
    assert!(!out.status.success(), "{out:?}");
    let entries: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(entries, ["notes.txt"]);
    assert!(
        processes_under(root).is_empty(),
        "{:?}",
        processes_under(root)
    );

    // Again, on a port that is free: the mesh comes up there.
    let mut up = Up::start(root, root, Some(&dir), &catalogue);
    up.wait_log("up: node local reports steady running");
    assert!(
        up.log()
            .contains(&format!("up: broker on tls://127.0.0.1:{}", up.port)),
        "{}",
        up.log()
    );
    let recorded = up.recorded();
    up.stop_leaving_nothing(libc::SIGINT, &recorded, "started again");
    drop(taken);
}

/// A catalogue of one module that sleeps, and stops at once on SIGTERM.
fn steady_catalogue(root: &Path) -> PathBuf {
    let catalogue = root.join("catalogue");
    std::fs::create_dir_all(catalogue.join("steady")).unwrap();
    std::fs::write(
        catalogue.join("steady/mesh.toml"),
        "[module]\nname = \"steady\"\ndescription = \"sleeps\"\n\n[run]\ncommand = [\"sleep\", \"3600\"]\n",
    )
    .unwrap();
    catalogue
}

#[test]
fn a_container_module_without_an_engine_is_left_unassigned_naming_what_to_install() {
    let _one = serial();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let catalogue = steady_catalogue(root);
    std::fs::create_dir_all(catalogue.join("boxed")).unwrap();
    std::fs::write(
        catalogue.join("boxed/mesh.toml"),
        "[module]\nname = \"boxed\"\ndescription = \"a container\"\n\n[run]\ndriver = \"container\"\nimage = \"${artifact:image}\"\n",
    )
    .unwrap();
    let no_engine = root.join("no-podman");
    let mut up = Up::start_with(
        root,
        root,
        Some(&root.join(".mesh")),
        &catalogue,
        &[("MESH_CONTAINER_ENGINE", no_engine.to_str().unwrap())],
    );
    up.wait_log("up: node local reports steady running");
    let said = format!(
        "up: boxed left unassigned: a container module, and no container engine: install podman (MESH_CONTAINER_ENGINE={} is not an executable file)",
        no_engine.display()
    );
    assert!(up.log().contains(&said), "{}", up.log());
    assert!(
        !up.log().contains("reports boxed"),
        "boxed was assigned:\n{}",
        up.log()
    );
    let recorded = up.recorded();
    up.stop_leaving_nothing(libc::SIGTERM, &recorded, "no engine");
}

#[test]
fn a_second_ctrl_c_kills_what_mesh_up_started_and_exits_at_once() {
    let _one = serial();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let catalogue = stubborn_catalogue(root);
    let mut up = Up::start(root, root, Some(&root.join(".mesh")), &catalogue);
    up.wait_log("up: node local reports stubborn running");
    let recorded = up.recorded();
    assert!(
        recorded.iter().any(|r| r.what == "stubborn"),
        "{recorded:?}"
    );
    // The orderly stop waits out the module's 10 s grace; the second
    // Ctrl-C does not.
    up.force_stop_leaving_nothing(&recorded, "forced");
}

/// `mesh up 2>&1 | tee up.log`, stopped by Ctrl-C: the terminal's SIGINT
/// reaches `tee` too, which dies first, and every write `mesh up` then
/// makes on its way down fails (EPIPE). None may end the stop early, nor
/// end the start: with its reader gone before the summary, the mesh still
/// comes up, and stops on the signal leaving nothing.
#[test]
fn a_closed_output_pipe_ends_neither_the_start_nor_the_stop() {
    let _one = serial();
    for gone_while_starting in [false, true] {
        let what = match gone_while_starting {
            true => "the reader gone before the summary",
            false => "the reader gone while running",
        };
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let dir = root.join(".mesh");
        let mut up = Up::start_piped(root, &dir, &Mesh::examples());
        if gone_while_starting {
            up.wait_log("up: broker on");
            assert!(
                !up.log().contains("mesh up: "),
                "{what}: the summary came first:\n{}",
                up.log()
            );
            up.kill_reader();
            let running = |o: &[(ModuleState, u32)]| {
                o.len() == MODULES.len() && o.iter().all(|(s, _)| *s == ModuleState::Running)
            };
            let came_up = wait_until(START, || {
                running(&outcomes(&dir, "local", &MODULES))
                    || up.child.try_wait().unwrap().is_some()
            });
            assert!(
                came_up && up.child.try_wait().unwrap().is_none(),
                "{what}: mesh up ended ({:?}) or its modules never all ran: {:?}",
                up.child.try_wait().unwrap(),
                outcomes(&dir, "local", &MODULES)
            );
        } else {
            up.wait_reported();
            up.kill_reader();
        }
        let recorded = up.recorded();
        assert!(
            recorded.iter().any(|r| r.what == "ticker-box"),
            "{what}: {recorded:?}"
        );
        assert_eq!(up.containers(), [up.container_of("ticker-box")], "{what}");
        up.stop_leaving_nothing(libc::SIGINT, &recorded, what);
    }
}

fn refused(out: &Output, holder: &str, what: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{what} was not refused:\n{err}");
    assert!(
        err.contains(&format!("is in use by {holder}; stop it first")),
        "{what}:\n{err}"
    );
}

#[test]
fn one_mesh_per_directory_a_second_start_is_refused_and_the_first_runs_on() {
    let _one = serial();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let dir = root.join(".mesh");
    let d = dir.to_str().unwrap();
    let mut up = Up::start(root, root, Some(&dir), &Mesh::examples());
    up.wait_reported();
    let holder = format!("mesh up (pid {})", up.child.id());
    let modules = module_pids(&dir.join("host"));
    assert_eq!(modules.len(), MODULES.len(), "{modules:?}");

    let port = mesh_testkit::broker::free_port().unwrap().to_string();
    let examples = Mesh::examples();
    let second = run_bounded(
        root,
        &[
            "up",
            "--dir",
            d,
            "--port",
            &port,
            "--no-http",
            "--catalogue",
        ]
        .into_iter()
        .chain([examples.to_str().unwrap()])
        .collect::<Vec<_>>(),
        None,
    );
    refused(&second, &holder, "a second mesh up");
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains(&format!(
            "the mesh in {d} is in use by {holder}; stop it first, or give another --dir"
        )),
        "{err}"
    );
    refused(
        &run_bounded(root, &["controller", "--dir", d, "--no-http"], None),
        &holder,
        "mesh controller",
    );
    let host_dir = dir.join("host");
    let host = run_bounded(root, &["host", "--state", host_dir.to_str().unwrap()], None);
    refused(&host, &holder, "mesh host");
    assert!(
        String::from_utf8_lossy(&host.stderr).contains("give another --state"),
        "{}",
        String::from_utf8_lossy(&host.stderr)
    );

    // From another directory, on the first one's broker port: refused
    // before any process is started, naming the port (not, later, a broker
    // certificate that matches no token).
    let other = root.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let clash = run_bounded(
        &other,
        &[
            "up",
            "--port",
            &up.port,
            "--no-http",
            "--catalogue",
            examples.to_str().unwrap(),
        ],
        None,
    );
    let err = String::from_utf8_lossy(&clash.stderr);
    assert!(!clash.status.success(), "{err}");
    assert!(
        err.contains(&format!("the broker's port 127.0.0.1:{} is taken", up.port)),
        "{err}"
    );

    // The first is untouched: the same module processes, still running.
    assert_eq!(module_pids(&host_dir), modules);
    for (m, pid) in &modules {
        assert!(mesh_testkit::pid_alive(*pid), "{m} (pid {pid}) is gone");
    }
    assert!(up.child.try_wait().unwrap().is_none(), "{}", up.log());
    // And its controller still composes: a person added now is admitted.
    let seed = root.join("carol.seed");
    let key = run_bounded(
        root,
        &["person", "key", "--out", seed.to_str().unwrap()],
        None,
    );
    assert!(key.status.success(), "{key:?}");
    let key = String::from_utf8(key.stdout).unwrap();
    let added = run_bounded(
        root,
        &[
            "person",
            "add",
            "carol",
            "--tools",
            "*",
            "--nkey",
            key.trim(),
            "--dir",
            d,
        ],
        None,
    );
    assert!(added.status.success(), "{added:?}");
    let mut answer = None;
    wait_until(START, || {
        let out = run_bounded(
            root,
            &[
                "call",
                "greeter.greet",
                r#"{"name": "ada"}"#,
                "--as",
                seed.to_str().unwrap(),
                "--dir",
                d,
            ],
            None,
        );
        let admitted = !String::from_utf8_lossy(&out.stderr).contains("authorization");
        answer = Some(out);
        admitted
    });
    let answer = answer.unwrap();
    assert!(
        answer.status.success(),
        "{}",
        String::from_utf8_lossy(&answer.stderr)
    );
    let said: serde_json::Value = serde_json::from_slice(&answer.stdout).unwrap();
    assert_eq!(said["greeting"], "hello, ada", "{said}");

    // Stopped, the lock file stays with a dead pid in it: no obstacle.
    up.signal_group(libc::SIGINT);
    assert!(up.wait_exit().success(), "{}", up.log());
    let lock = std::fs::read_to_string(dir.join("mesh.lock")).unwrap();
    assert!(lock.starts_with(&format!("{} ", up.child.id())), "{lock}");
    drop(up);
    let mut again = Up::start(root, root, Some(&dir), &Mesh::examples());
    again.wait_reported();
    // What it says of its modules is this run's: the host connected first
    // (the previous run's newest report said `running` too).
    let text = again.log();
    let connected = text
        .find("connected to the bus node=local")
        .unwrap_or(usize::MAX);
    let reported = text.find("up: node local reports").unwrap();
    assert!(connected < reported, "{text}");
    // Each program put again, the container module's image built again:
    // the same bytes, so one stored version of each.
    for module in ["ticker", "ticker-box"] {
        let versions = stored_versions(&dir, module);
        assert_eq!(versions.len(), 1, "{module}: {versions:?}");
    }
}

/// Every module in `modules` comes up `running` on `node` and stays so: a
/// few seconds later the same process runs, restarted no more often (a
/// module that cannot read its key would be in a crash loop by then).
fn assert_running_steadily(dir: &Path, node: &str, host_dir: &Path, modules: &[&str]) {
    let all_running = |o: &[(ModuleState, u32)]| {
        o.len() == modules.len() && o.iter().all(|(s, _)| *s == ModuleState::Running)
    };
    let came_up = wait_until(START, || all_running(&outcomes(dir, node, modules)));
    let before = outcomes(dir, node, modules);
    assert!(
        came_up,
        "{modules:?} on {node} never all running: {before:?}"
    );
    let pids: Vec<Option<u32>> = modules
        .iter()
        .map(|m| module_pids(host_dir).get(*m).copied())
        .collect();
    std::thread::sleep(STEADY);
    let after = outcomes(dir, node, modules);
    assert_eq!(after, before, "{modules:?} on {node}: restarted meanwhile");
    for (m, pid) in modules.iter().zip(&pids) {
        let pid = pid.unwrap_or_else(|| panic!("{m} on {node}: no pid record"));
        assert_eq!(module_pids(host_dir).get(*m), Some(&pid), "{m} on {node}");
        assert!(
            mesh_testkit::pid_alive(pid),
            "{m} on {node} (pid {pid}) is gone"
        );
    }
    // Keys announced ahead: each module starts with a key the broker
    // already admits, so no first start is refused.
    for ((_, restarts), m) in after.iter().zip(modules) {
        assert_eq!(*restarts, 0, "{m} on {node}: {after:?}");
    }
}

/// What a crash loop needs to show: a module that cannot read its key
/// exits at once, and is started again after 1 s, then 2 s.
const STEADY: Duration = Duration::from_secs(4);

#[test]
fn relative_state_directories_run_every_module() {
    let _one = serial();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // Plain `mesh up` in the directory: `--dir` left to its relative default.
    let mut up = Up::start(root, root, None, &Mesh::examples());
    up.wait_reported();

    // A second node, its host on a relative `--state`.
    let token = run_bounded(root, &["node", "add", "n2"], None);
    assert!(token.status.success(), "{token:?}");
    let token = String::from_utf8(token.stdout).unwrap();
    let host_log = root.join("host.log");
    let out = std::fs::File::create(&host_log).unwrap();
    let mut host = Command::new(mesh_bin())
        .args(["host", "--token", "-", "--state", "./rel"])
        .current_dir(root)
        .env("PATH", path_with_bins())
        .env("MESH_LOG", "info,async_nats=off")
        .env_remove("MESH_TOKEN")
        .stdin(Stdio::piped())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    host.stdin
        .take()
        .unwrap()
        .write_all(token.as_bytes())
        .unwrap();
    let assigned = run_bounded(root, &["assign", "recorder", "n2"], None);
    assert!(assigned.status.success(), "{assigned:?}");
    let dir = root.join(".mesh");
    assert_running_steadily(&dir, "local", &dir.join("host"), &MODULES);
    assert_running_steadily(&dir, "n2", &root.join("rel"), &["recorder"]);

    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(host.id() as i32, libc::SIGTERM) };
    let _ = host.wait();
    up.signal_group(libc::SIGINT);
    let status = up.wait_exit();
    assert!(status.success(), "{status}\n{}", up.log());
}

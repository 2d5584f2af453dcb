//! `mesh up` the way a person runs it: the real binary in a process group
//! of its own, stopped as a terminal stops it (SIGINT, or SIGTERM, to the
//! whole group) while starting, while running and right after its broker
//! died, each time gone within a bound with nothing it started left, not
//! even a zombie; a second signal forcing the stop; one mesh per
//! directory; and a relative state directory that every module still runs
//! from.

#[path = "join_live/harness.rs"]
mod harness;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use harness::{Mesh, mesh_bin, path_with_bins, wait_until};
use mesh_core::names::Name;
use mesh_store::ModuleState;

/// Bound on a start (genesis, broker, enrolment, modules running).
const START: Duration = Duration::from_secs(60);
/// Bound on a stop: a person waits this long, not for ever.
const STOP: Duration = Duration::from_secs(10);

/// The runnable example modules `mesh up` assigns.
const MODULES: [&str; 8] = [
    "build-machine",
    "echo",
    "greeter",
    "node-worker",
    "recorder",
    "ticker",
    "ticker-box",
    "worker",
];

/// One whole mesh at a time: each case runs a broker, a controller, a host
/// and eight modules, on a machine of two cores.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running `mesh up`, the leader of its own process group. Dropped, the
/// group and everything recorded under `root` is killed.
struct Up {
    child: Child,
    log: PathBuf,
    /// Every process started for the case has this in its command line or
    /// working directory.
    root: PathBuf,
    /// The mesh's directory.
    dir: PathBuf,
    /// Its broker's port.
    port: String,
    /// `tee`, when its output goes through a pipe (see [`Up::start_piped`]).
    reader: Option<Child>,
}

impl Up {
    /// `mesh up` in `cwd`, with `--dir dir` unless `None` (the default,
    /// relative `.mesh`), on a free port, serving no HTTP.
    fn start(root: &Path, cwd: &Path, dir: Option<&Path>, catalogue: &Path) -> Up {
        Up::start_with(root, cwd, dir, catalogue, &[])
    }

    /// As [`Up::start`], with `env` set for `mesh up`.
    fn start_with(
        root: &Path,
        cwd: &Path,
        dir: Option<&Path>,
        catalogue: &Path,
        env: &[(&str, &str)],
    ) -> Up {
        let launch = Launch {
            env,
            ..Launch::default()
        };
        Up::spawn(root, cwd, dir, catalogue, launch)
    }

    /// `mesh up 2>&1 | tee LOG` as a shell runs it: `tee` in `mesh up`'s
    /// process group, so the group's Ctrl-C reaches it too.
    fn start_piped(root: &Path, dir: &Path, catalogue: &Path) -> Up {
        let launch = Launch {
            piped: true,
            ..Launch::default()
        };
        Up::spawn(root, root, Some(dir), catalogue, launch)
    }

    /// `mesh up --ha`: its three servers on the ports from a free run.
    fn start_ha(root: &Path, dir: &Path, catalogue: &Path) -> Up {
        let launch = Launch {
            port: Some(mesh_testkit::cluster::free_port_run(6).unwrap().to_string()),
            extra: &["--ha"],
            ..Launch::default()
        };
        Up::spawn(root, root, Some(dir), catalogue, launch)
    }

    /// The pipe's reader killed (and reaped): every write `mesh up` makes
    /// from now on fails with EPIPE.
    fn kill_reader(&mut self) {
        let tee = self.reader.as_mut().expect("a piped mesh up");
        tee.kill().unwrap();
        tee.wait().unwrap();
    }

    fn spawn(root: &Path, cwd: &Path, dir: Option<&Path>, catalogue: &Path, launch: Launch) -> Up {
        let Launch {
            env,
            port,
            extra,
            piped,
        } = launch;
        let port = port.unwrap_or_else(|| mesh_testkit::broker::free_port().unwrap().to_string());
        let log = root.join(format!(
            "up-{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let (stdout, stderr, read): (Stdio, Stdio, _) = match piped {
            true => {
                let (read, write) = std::io::pipe().unwrap();
                (write.try_clone().unwrap().into(), write.into(), Some(read))
            }
            false => {
                let out = std::fs::File::create(&log).unwrap();
                (out.try_clone().unwrap().into(), out.into(), None)
            }
        };
        let mut cmd = Command::new(mesh_bin());
        cmd.args(["up", "--port", &port, "--no-http", "--catalogue"])
            .arg(catalogue)
            .args(extra);
        if let Some(d) = dir {
            cmd.arg("--dir").arg(d);
        }
        cmd.envs(env.iter().copied());
        let child = cmd
            .current_dir(cwd)
            .env("PATH", path_with_bins())
            .env(
                "MESH_NATS_SERVER",
                mesh_testkit::nats_server_binary().unwrap(),
            )
            .env("MESH_LOG", "info,async_nats=off")
            .env_remove("MESH_STORE")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            // As a shell starts a job: its own group, which a terminal's
            // Ctrl-C reaches as a whole.
            .process_group(0)
            .spawn()
            .unwrap();
        // The command (holding the pipe's writing end) is gone: the
        // reader's end then closes when `mesh up`'s does.
        drop(cmd);
        let reader = read.map(|read| {
            Command::new("tee")
                .arg(&log)
                .stdin(read)
                .stdout(Stdio::null())
                .process_group(child.id() as i32)
                .spawn()
                .unwrap()
        });
        Up {
            child,
            log,
            root: root.to_path_buf(),
            dir: dir.map_or_else(|| cwd.join(".mesh"), Path::to_path_buf),
            port,
            reader,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (bounded) until the log holds `needle`; fails if `mesh up`
    /// ended first.
    fn wait_log(&mut self, needle: &str) {
        let mut ended = None;
        let said = wait_until(START, || {
            if self.log().contains(needle) {
                return true;
            }
            ended = self.child.try_wait().unwrap();
            ended.is_some()
        }) && ended.is_none();
        assert!(
            said,
            "mesh up never said {needle:?} (ended: {ended:?}):\n{}",
            self.log()
        );
    }

    /// Waits until the local node reported how its modules came out.
    fn wait_reported(&mut self) {
        self.wait_log("up: node local reports");
    }

    fn signal_group(&self, signal: i32) {
        let pgid = self.child.id() as i32;
        // SAFETY: kill(2) on the group this test made.
        assert_eq!(unsafe { libc::kill(-pgid, signal) }, 0, "signal {signal}");
    }

    /// The exit status, within [`STOP`]; fails naming what still runs.
    fn wait_exit(&mut self) -> ExitStatus {
        self.wait_exit_within(STOP)
    }

    fn wait_exit_within(&mut self, within: Duration) -> ExitStatus {
        let until = Instant::now() + within;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                Instant::now() < until,
                "mesh up still running {within:?} after the signal; processes: {:?}\nlog:\n{}",
                processes_under(&self.root),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The broker's and each module's recorded process, while they run.
    fn recorded(&self) -> Vec<Recorded> {
        let mut out = Vec::new();
        let broker = std::fs::read_to_string(self.dir.join("broker/nats.pid")).unwrap_or_default();
        if let Ok(pid) = broker.trim().parse() {
            out.extend(Recorded::of("broker", pid));
        }
        for (module, pid) in module_pids(&self.dir.join("host")) {
            out.extend(Recorded::of(&module, pid));
        }
        out
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let pgid = self.child.id() as i32;
        // SAFETY: kill(2) on the group this test made, and on processes
        // found under this case's own temp dir.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        for p in self.recorded() {
            unsafe { libc::kill(-(p.pid as i32), libc::SIGKILL) };
        }
        for (pid, _) in processes_under(&self.root) {
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        let _ = self.child.wait();
        if let Some(tee) = &mut self.reader {
            let _ = tee.kill();
            let _ = tee.wait();
        }
        if let Some(engine) = mesh_host::driver::container::engine() {
            for id in self.containers() {
                let _ = Command::new(&engine)
                    .args(["rm", "-f", "-t", "0", "--ignore", &id])
                    .output();
            }
        }
    }
}

impl Up {
    /// The names of the containers labelled with this mesh's local host's
    /// key (none without an engine or an enrolled host).
    fn containers(&self) -> Vec<String> {
        let (Some(engine), Ok(keys)) = (
            mesh_host::driver::container::engine(),
            mesh_host::HostKeys::load(&self.dir.join("host")),
        ) else {
            return Vec::new();
        };
        let out = Command::new(engine)
            .args(["ps", "-a", "--format", "{{.Names}}", "--filter"])
            .arg(format!("label=mesh.host={}", keys.host_key()))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// How a case starts `mesh up`, beside where.
#[derive(Default)]
struct Launch<'a> {
    /// Set for `mesh up`.
    env: &'a [(&'a str, &'a str)],
    /// The broker's port: a free one unless given.
    port: Option<String>,
    /// More arguments.
    extra: &'a [&'a str],
    /// Its output through a pipe to `tee` (see [`Up::start_piped`]).
    piped: bool,
}

/// A process as its start time identifies it (a pid alone may be reused).
#[derive(Debug, Clone)]
struct Recorded {
    what: String,
    pid: u32,
    starttime: u64,
}

impl Recorded {
    fn of(what: &str, pid: u32) -> Option<Recorded> {
        let (_, starttime) = stat(pid)?;
        Some(Recorded {
            what: what.to_string(),
            pid,
            starttime,
        })
    }

    /// Still there, as itself (a zombie counts: nobody reaped it).
    fn left(&self) -> Option<String> {
        match stat(self.pid) {
            Some((state, st)) if st == self.starttime => {
                Some(format!("{} (pid {}, state {state})", self.what, self.pid))
            }
            _ => None,
        }
    }
}

/// State and start time from `/proc/<pid>/stat`.
fn stat(pid: u32) -> Option<(char, u64)> {
    let line = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = line.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some((
        fields.first()?.chars().next()?,
        fields.get(19)?.parse().ok()?,
    ))
}

/// Every process whose command line or working directory is under `root`.
fn processes_under(root: &Path) -> Vec<(u32, String)> {
    let root_text = root.to_str().unwrap();
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter_map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_default();
            (cmdline.contains(root_text) || cwd.starts_with(root)).then_some((pid, cmdline))
        })
        .collect()
}

/// Module -> pid, from the host's pid records under `host_dir`.
fn module_pids(host_dir: &Path) -> BTreeMap<String, u32> {
    let Ok(entries) = std::fs::read_dir(host_dir.join("modules")) else {
        return BTreeMap::new();
    };
    entries
        .filter_map(|e| {
            let e = e.ok()?;
            let text = std::fs::read_to_string(e.path().join("pid")).ok()?;
            let pid = text.split_whitespace().next()?.parse().ok()?;
            Some((e.file_name().to_string_lossy().into_owned(), pid))
        })
        .collect()
}

/// Nothing the case started is left: no process under its temp dir, no
/// recorded broker or module (running or a zombie).
fn assert_nothing_left(up: &Up, recorded: &[Recorded], what: &str) {
    let left: Vec<String> = recorded.iter().filter_map(Recorded::left).collect();
    let under = processes_under(&up.root);
    let containers = up.containers();
    assert!(
        left.is_empty() && under.is_empty() && containers.is_empty(),
        "{what}: left behind: {left:?} {under:?} {containers:?}\nlog:\n{}",
        up.log()
    );
}

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
        assert_eq!(up.containers(), ["mesh-local-ticker-box"], "{what}");
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
        assert!(
            !up.log().contains("bus connection lost"),
            "{what}: the broker went first:\n{}",
            up.log()
        );
    }
    assert_nothing_left(&up, &recorded, &what);
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

/// A catalogue of one module that ignores SIGTERM (its whole group does):
/// an orderly stop waits out its grace.
fn stubborn_catalogue(root: &Path) -> PathBuf {
    let catalogue = root.join("catalogue");
    std::fs::create_dir_all(catalogue.join("stubborn")).unwrap();
    let mut f = std::fs::File::create(catalogue.join("stubborn/mesh.toml")).unwrap();
    f.write_all(
        br#"[module]
name = "stubborn"
description = "Ignores SIGTERM"

[run]
command = ["sh", "-c", "trap '' TERM; while :; do sleep 1; done"]
"#,
    )
    .unwrap();
    catalogue
}

#[test]
fn a_container_module_without_an_engine_is_left_unassigned_naming_what_to_install() {
    let _one = serial();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let catalogue = root.join("catalogue");
    std::fs::create_dir_all(catalogue.join("steady")).unwrap();
    std::fs::write(
        catalogue.join("steady/mesh.toml"),
        "[module]\nname = \"steady\"\ndescription = \"sleeps\"\n\n[run]\ncommand = [\"sleep\", \"3600\"]\n",
    )
    .unwrap();
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
    up.signal_group(libc::SIGTERM);
    let status = up.wait_exit();
    assert!(status.success(), "{status}\n{}", up.log());
    assert_nothing_left(&up, &recorded, "no engine");
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
    up.signal_group(libc::SIGINT);
    up.wait_log("up: stopping");
    // The orderly stop now waits out the module's 10 s grace; the second
    // Ctrl-C does not.
    up.signal_group(libc::SIGINT);
    let status = up.wait_exit();
    assert_eq!(status.code(), Some(130), "{status}\n{}", up.log());
    assert_nothing_left(&up, &recorded, "forced");
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
        assert_eq!(up.containers(), ["mesh-local-ticker-box"], "{what}");
        up.signal_group(libc::SIGINT);
        let status = up.wait_exit();
        assert!(status.success(), "{what}: {status}");
        assert_nothing_left(&up, &recorded, what);
    }
}

/// Runs `args` (a command that must end by itself) within [`STOP`].
fn run_bounded(cwd: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(mesh_bin())
        .args(args)
        .current_dir(cwd)
        .env("PATH", path_with_bins())
        .env(
            "MESH_NATS_SERVER",
            mesh_testkit::nats_server_binary().unwrap(),
        )
        .env("MESH_LOG", "warn,async_nats=off")
        .env_remove("MESH_STORE")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let pid = child.id();
    let until = Instant::now() + STOP;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "mesh {args:?} (pid {pid}) did not end within {STOP:?}:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
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
}

/// `node`'s newest report, as the store holds it.
fn latest_report(dir: &Path, node: &str) -> Option<mesh_store::Report> {
    let url = format!("sqlite://{}", dir.join("mesh.db").display());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = mesh_store::Store::open(&url).await.unwrap();
        let r = store
            .latest_report(&Name::new(node).unwrap())
            .await
            .unwrap();
        store.close().await;
        r.map(|r| r.report)
    })
}

/// Each of `modules` in `node`'s newest report: (state, restarts).
fn outcomes(dir: &Path, node: &str, modules: &[&str]) -> Vec<(ModuleState, u32)> {
    let Some(report) = latest_report(dir, node) else {
        return Vec::new();
    };
    modules
        .iter()
        .filter_map(|m| {
            let o = report.outcomes.iter().find(|o| o.module.as_str() == *m)?;
            Some((o.state.clone(), o.restarts))
        })
        .collect()
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

/// `mesh up --ha` as a person runs it: three broker servers, a PostgreSQL
/// of its own, two controllers (one active, the other standing by, as
/// `mesh status` shows), the local node running its module through the
/// cluster; Ctrl-C to the whole group stops all of it, the store last,
/// leaving nothing.
#[test]
fn mesh_up_ha_runs_three_servers_a_store_and_two_controllers_and_stops_them_all() {
    let _one = serial();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let dir = root.join(".mesh-ha");
    let catalogue = root.join("catalogue");
    std::fs::create_dir_all(&catalogue).unwrap();
    let out = Command::new("cp")
        .arg("-r")
        .arg(Mesh::examples().join("echo"))
        .arg(&catalogue)
        .output()
        .unwrap();
    assert!(out.status.success());
    // Removed however the case ends: as root, the store's data is outside
    // `root`, where the README says.
    struct Gone(PathBuf);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let flat: String = dir
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let gone = Gone(Path::new("/var/lib/mesh-up").join(flat.trim_matches('-')));
    let mut up = Up::start_ha(root, &dir, &catalogue);
    up.wait_log("up: node local reports echo running");
    let log = up.log();
    assert!(
        log.contains("  broker      3 servers, every stream on each: tls://127.0.0.1:"),
        "{log}"
    );
    let data = log
        .lines()
        .find_map(|l| l.split("data in ").nth(1)?.split(", its URL").next())
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("the summary names the store's data:\n{log}"));
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert_eq!(data, gone.0, "as root, the data is where the README says");
    }
    let store_url = std::fs::read_to_string(dir.join("store.url")).unwrap();
    assert!(
        store_url.starts_with("postgres://postgres:"),
        "a PostgreSQL store"
    );
    assert!(
        !log.contains(store_url.trim()),
        "the store's URL (its password) is in no log"
    );
    let standby_log = dir.join("controller-2.log");
    let standby = wait_until(START, || {
        let l = std::fs::read_to_string(&standby_log).unwrap_or_default();
        l.contains("standing by") || l.contains("lease taken")
    });
    assert!(
        standby,
        "the second controller never started:\n{}",
        std::fs::read_to_string(&standby_log).unwrap_or_default()
    );
    let out = Command::new(mesh_bin())
        .args(["status", "--dir"])
        .arg(&dir)
        .env_remove("MESH_STORE")
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{status}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lease = status
        .lines()
        .find(|l| l.starts_with("lease "))
        .unwrap_or_else(|| panic!("{status}"));
    assert!(lease.contains("mesh controller on "), "{status}");
    let servers = status
        .lines()
        .find(|l| l.starts_with("servers "))
        .unwrap_or_else(|| panic!("{status}"));
    assert_eq!(servers.matches(" up").count(), 3, "{status}");
    // One of the two holds the lease; the other says it stands by.
    let up_log = up.log();
    let standby_said = std::fs::read_to_string(&standby_log).unwrap_or_default();
    assert!(
        (up_log.contains("lease taken") && standby_said.contains("standing by"))
            || (standby_said.contains("lease taken") && up_log.contains("standing by")),
        "one active, one standing by:\nmesh up:\n{up_log}\nsecond:\n{standby_said}"
    );
    // The second controller killed, as a machine lost: `mesh up` starts it
    // again, and the lease is held by a controller that runs.
    let second: i32 = log
        .lines()
        .find_map(|l| l.split("this process and pid ").nth(1)?.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("the summary names the second controller:\n{log}"));
    // SAFETY: kill(2) on a process this case started.
    assert_eq!(unsafe { libc::kill(second, libc::SIGKILL) }, 0);
    up.wait_log("the second controller exited; starting it again");
    let held = wait_until(START, || {
        let out = Command::new(mesh_bin())
            .args(["status", "--dir"])
            .arg(&dir)
            .output()
            .unwrap();
        let status = String::from_utf8_lossy(&out.stdout).to_string();
        status.lines().any(|l| {
            l.starts_with("lease ")
                && l.split("(pid ")
                    .nth(1)
                    .and_then(|p| p.split(',').next()?.parse::<u32>().ok())
                    .is_some_and(|p| p != second as u32 && stat(p).is_some())
        })
    });
    assert!(
        held,
        "no running controller holds the lease after the second was killed"
    );
    let postgres: u32 = std::fs::read_to_string(data.join("postmaster.pid"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let mut recorded: Vec<Recorded> = Recorded::of("postgres", postgres).into_iter().collect();
    for i in 1..=3 {
        let pid = std::fs::read_to_string(dir.join(format!("broker/nats-{i}.pid"))).unwrap();
        recorded.extend(Recorded::of(
            &format!("server {i}"),
            pid.trim().parse().unwrap(),
        ));
    }
    recorded.extend(up.recorded());
    assert_eq!(
        recorded
            .iter()
            .filter(|r| r.what.starts_with("server"))
            .count(),
        3
    );
    up.signal_group(libc::SIGINT);
    let exit = up.wait_exit_within(STOP * 3);
    assert!(exit.success(), "{exit}\n{}", up.log());
    assert_nothing_left(&up, &recorded, "mesh up --ha");

    // Its store's URL (the password's only copy) lost: the data is never
    // made again over, and the refusal says what to do.
    std::fs::remove_file(dir.join("store.url")).unwrap();
    let out = run_bounded(root, &["up", "--ha", "--dir", dir.to_str().unwrap()], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("(its URL and password) is gone; put it back, or remove"),
        "{err}"
    );
    assert!(
        data.join("PG_VERSION").is_file(),
        "the store's data was kept"
    );
    drop(gone);
}

/// A mesh of one server is not started as `--ha`, nor a `--ha` one
/// without it: refused before anything is made or started, naming what to
/// run instead.
#[test]
fn mesh_up_refuses_a_directory_of_the_other_kind_naming_which_to_run() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let one = root.join("one");
    let three = root.join("three");
    for (dir, replicas) in [(&one, "1"), (&three, "3")] {
        let port = mesh_testkit::cluster::free_port_run(6).unwrap().to_string();
        let out = run_bounded(
            root,
            &[
                "init",
                "--dir",
                dir.to_str().unwrap(),
                "--port",
                &port,
                "--replicas",
                replicas,
            ],
            None,
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = run_bounded(root, &["up", "--ha", "--dir", one.to_str().unwrap()], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("holds a mesh of one broker server; `mesh up --ha` makes a mesh of its own"),
        "{err}"
    );
    assert!(
        !one.join("store.url").exists() && !one.join("postgres").exists(),
        "nothing made"
    );
    let out = run_bounded(root, &["up", "--dir", three.to_str().unwrap()], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "holds a mesh of 3 broker servers, and `mesh up` runs one: start it with `mesh up --ha --dir {}`",
            three.display()
        )),
        "{err}"
    );
    assert!(
        processes_under(root).is_empty(),
        "{:?}",
        processes_under(root)
    );
}

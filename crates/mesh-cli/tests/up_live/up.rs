//! `mesh up` run by a test as a person runs it: the real binary, the
//! leader of its own process group (as a shell starts a job), signalled as
//! a terminal signals it; what it started recorded, so that a case can say
//! nothing is left (no process, no zombie, no container), and everything
//! killed however the case ends.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::harness::{mesh_bin, path_with_bins, wait_until};
use mesh_core::names::Name;
use mesh_store::ModuleState;

/// Bound on a start (genesis, broker, enrolment, modules running).
pub const START: Duration = Duration::from_secs(60);
/// Bound on a stop: a person waits this long, not for ever.
pub const STOP: Duration = Duration::from_secs(10);

/// The runnable example modules `mesh up` assigns.
pub const MODULES: [&str; 8] = [
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
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running `mesh up`, the leader of its own process group. Dropped, the
/// group and everything recorded under `root` is killed.
pub struct Up {
    pub child: Child,
    pub log: PathBuf,
    /// Every process started for the case has this in its command line or
    /// working directory.
    pub root: PathBuf,
    /// The mesh's directory.
    pub dir: PathBuf,
    /// Its broker's port.
    pub port: String,
    /// `tee`, when its output goes through a pipe (see [`Up::start_piped`]).
    pub reader: Option<Child>,
}

impl Up {
    /// `mesh up` in `cwd`, with `--dir dir` unless `None` (the default,
    /// relative `.mesh`), on a free port, serving no HTTP.
    pub fn start(root: &Path, cwd: &Path, dir: Option<&Path>, catalogue: &Path) -> Up {
        Up::start_with(root, cwd, dir, catalogue, &[])
    }

    /// As [`Up::start`], with `env` set for `mesh up`.
    pub fn start_with(
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
    pub fn start_piped(root: &Path, dir: &Path, catalogue: &Path) -> Up {
        let launch = Launch {
            piped: true,
            ..Launch::default()
        };
        Up::spawn(root, root, Some(dir), catalogue, launch)
    }

    /// `mesh up --ha`: its three servers on the ports from a free run.
    pub fn start_ha(root: &Path, dir: &Path, catalogue: &Path) -> Up {
        let launch = Launch {
            port: Some(mesh_testkit::cluster::free_port_run(6).unwrap().to_string()),
            extra: &["--ha"],
            ..Launch::default()
        };
        Up::spawn(root, root, Some(dir), catalogue, launch)
    }

    /// The pipe's reader killed (and reaped): every write `mesh up` makes
    /// from now on fails with EPIPE.
    pub fn kill_reader(&mut self) {
        let tee = self.reader.as_mut().expect("a piped mesh up");
        tee.kill().unwrap();
        tee.wait().unwrap();
    }

    pub fn spawn(
        root: &Path,
        cwd: &Path,
        dir: Option<&Path>,
        catalogue: &Path,
        launch: Launch,
    ) -> Up {
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

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (bounded) until the log holds `needle`; fails if `mesh up`
    /// ended first.
    pub fn wait_log(&mut self, needle: &str) {
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
    pub fn wait_reported(&mut self) {
        self.wait_log("up: node local reports");
    }

    pub fn signal_group(&self, signal: i32) {
        let pgid = self.child.id() as i32;
        // SAFETY: kill(2) on the group this test made.
        assert_eq!(unsafe { libc::kill(-pgid, signal) }, 0, "signal {signal}");
    }

    /// The exit status, within [`STOP`]; fails naming what still runs.
    pub fn wait_exit(&mut self) -> ExitStatus {
        self.wait_exit_within(STOP)
    }

    pub fn wait_exit_within(&mut self, within: Duration) -> ExitStatus {
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

    /// `signal` to the group: `mesh up` exits 0 within [`STOP`], leaving
    /// nothing of `recorded` (nor anything else of the case's).
    pub fn stop_leaving_nothing(&mut self, signal: i32, recorded: &[Recorded], what: &str) {
        self.signal_group(signal);
        let status = self.wait_exit();
        assert!(status.success(), "{what}: {status}\n{}", self.log());
        assert_nothing_left(self, recorded, what);
    }

    /// Ctrl-C, and a second one once the orderly stop began: `mesh up`
    /// exits 130 within [`STOP`], leaving nothing.
    pub fn force_stop_leaving_nothing(&mut self, recorded: &[Recorded], what: &str) {
        self.signal_group(libc::SIGINT);
        self.wait_log("up: stopping");
        self.signal_group(libc::SIGINT);
        let status = self.wait_exit();
        assert_eq!(status.code(), Some(130), "{what}: {status}\n{}", self.log());
        assert_nothing_left(self, recorded, what);
    }

    /// The broker's and each module's recorded process, while they run.
    pub fn recorded(&self) -> Vec<Recorded> {
        let mut out = Vec::new();
        // nats-server's, or RabbitMQ's (a mesh on AMQP).
        for file in ["broker/nats.pid", "rabbitmq/pid"] {
            let broker = std::fs::read_to_string(self.dir.join(file)).unwrap_or_default();
            if let Ok(pid) = broker.trim().parse() {
                out.extend(Recorded::of("broker", pid));
            }
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
    pub fn containers(&self) -> Vec<String> {
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

    /// The name of `module`'s container on this mesh's local node.
    pub fn container_of(&self, module: &str) -> String {
        let keys = mesh_host::HostKeys::load(&self.dir.join("host")).unwrap();
        mesh_host::driver::container::container_name(
            &Name::new("local").unwrap(),
            &Name::new(module).unwrap(),
            keys.host_key(),
        )
    }
}

/// How a case starts `mesh up`, beside where.
#[derive(Default)]
pub struct Launch<'a> {
    /// Set for `mesh up`.
    pub env: &'a [(&'a str, &'a str)],
    /// The broker's port: a free one unless given.
    pub port: Option<String>,
    /// More arguments.
    pub extra: &'a [&'a str],
    /// Its output through a pipe to `tee` (see [`Up::start_piped`]).
    pub piped: bool,
}

/// A process as its start time identifies it (a pid alone may be reused).
#[derive(Debug, Clone)]
pub struct Recorded {
    pub what: String,
    pub pid: u32,
    pub starttime: u64,
}

impl Recorded {
    pub fn of(what: &str, pid: u32) -> Option<Recorded> {
        let (_, starttime) = stat(pid)?;
        Some(Recorded {
            what: what.to_string(),
            pid,
            starttime,
        })
    }

    /// Still there, as itself (a zombie counts: nobody reaped it).
    pub fn left(&self) -> Option<String> {
        match stat(self.pid) {
            Some((state, st)) if st == self.starttime => {
                Some(format!("{} (pid {}, state {state})", self.what, self.pid))
            }
            _ => None,
        }
    }
}

/// State and start time from `/proc/<pid>/stat`.
pub fn stat(pid: u32) -> Option<(char, u64)> {
    let line = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = line.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some((
        fields.first()?.chars().next()?,
        fields.get(19)?.parse().ok()?,
    ))
}

/// Every process whose command line or working directory is under `root`.
pub fn processes_under(root: &Path) -> Vec<(u32, String)> {
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
pub fn module_pids(host_dir: &Path) -> BTreeMap<String, u32> {
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
pub fn assert_nothing_left(up: &Up, recorded: &[Recorded], what: &str) {
    let left: Vec<String> = recorded.iter().filter_map(Recorded::left).collect();
    let under = processes_under(&up.root);
    let containers = up.containers();
    assert!(
        left.is_empty() && under.is_empty() && containers.is_empty(),
        "{what}: left behind: {left:?} {under:?} {containers:?}\nlog:\n{}",
        up.log()
    );
}

/// A catalogue of one module that ignores SIGTERM (its whole group does):
/// an orderly stop waits out its grace.
pub fn stubborn_catalogue(root: &Path) -> PathBuf {
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

/// Runs `args` (a command that must end by itself) within [`STOP`].
pub fn run_bounded(cwd: &Path, args: &[&str], stdin: Option<&str>) -> Output {
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

/// `node`'s newest report, as the store holds it.
pub fn latest_report(dir: &Path, node: &str) -> Option<mesh_store::Report> {
    let (rt, store) = store_of(dir);
    rt.block_on(async {
        let r = store.latest_report(&Name::new(node).unwrap()).await;
        store.close().await;
        r.unwrap().map(|r| r.report)
    })
}

/// The versions the store records of `module`'s artifacts.
pub fn stored_versions(dir: &Path, module: &str) -> std::collections::BTreeSet<String> {
    let (rt, store) = store_of(dir);
    rt.block_on(async {
        let rows = store.artifacts(Some(&Name::new(module).unwrap())).await;
        store.close().await;
        rows.unwrap().into_iter().map(|r| r.version).collect()
    })
}

/// The SQLite store of the mesh in `dir`, and a runtime to use it on.
fn store_of(dir: &Path) -> (tokio::runtime::Runtime, mesh_store::Store) {
    let url = format!("sqlite://{}", dir.join("mesh.db").display());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = rt.block_on(mesh_store::Store::open(&url)).unwrap();
    (rt, store)
}

/// Each of `modules` in `node`'s newest report: (state, restarts).
pub fn outcomes(dir: &Path, node: &str, modules: &[&str]) -> Vec<(ModuleState, u32)> {
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

//! A mesh over the machines kit: the broker and the controller on machine
//! 0, hosts on the others, each reaching the rest over its own address.
//! Every process runs inside its machine; the kit's drop ends them all.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use mesh_testkit::{Machine, Machines};

pub fn mesh_bin() -> &'static str {
    env!("CARGO_BIN_EXE_mesh")
}

/// A process inside a machine, its output in a log file.
pub struct Proc {
    pub name: String,
    child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (bounded) until the log holds `needle`.
    pub fn wait_log(&self, needle: &str, within: Duration) {
        assert!(
            wait_until(within, || self.log().contains(needle)),
            "{} never logged {needle:?} within {within:?}:\n{}",
            self.name,
            self.log()
        );
    }

    /// Whether it has exited (reaped now if so).
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill(2) on our unreaped child.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

pub fn wait_until(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `program args` in `machine`, run in `dir`, its output in
/// `<dir>/<name>.log` (appended: a process started again keeps its
/// earlier lines), `stdin` written to it when given.
pub fn spawn_in(
    machine: &Machine,
    dir: &Path,
    name: &str,
    program: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> Proc {
    let log = dir.join(format!("{name}.log"));
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .unwrap();
    let mut child = machine
        .command(program)
        .args(args)
        .current_dir(dir)
        .env("MESH_LOG", "info,async_nats=off")
        .env_remove("MESH_STORE")
        .env_remove("MESH_STORE_FILE")
        .env_remove("MESH_TOKEN")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        use std::io::Write as _;
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(input.as_bytes()).unwrap();
    }
    Proc {
        name: name.to_string(),
        child,
        log,
    }
}

/// A mesh on machine 0 with hosts on the others. Field order is drop
/// order: the processes, then the machines, then the files.
pub struct Fleet {
    pub hosts: Vec<Option<Proc>>,
    pub controller: Option<Proc>,
    pub broker: Option<Proc>,
    pub kit: Machines,
    pub dir: PathBuf,
    pub tmp: tempfile::TempDir,
}

impl Fleet {
    /// `machines` machines; `mesh init --address` of machine 0, its broker
    /// and its controller started and running.
    pub fn new(machines: usize) -> Fleet {
        let kit = Machines::new(machines).unwrap_or_else(|e| panic!("{e}"));
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ctl");
        let addr = kit.machine(0).addr.to_string();
        let out = Command::new(mesh_bin())
            .args(["init", "--dir", dir.to_str().unwrap(), "--address", &addr])
            .output()
            .unwrap();
        assert!(out.status.success(), "init: {}", text(&out));
        let mut fleet = Fleet {
            hosts: (0..machines).map(|_| None).collect(),
            controller: None,
            broker: None,
            kit,
            dir,
            tmp,
        };
        let nats = mesh_testkit::nats_server_binary().unwrap();
        let conf = fleet.dir.join("broker/nats.conf");
        let broker = fleet.spawn(0, "broker", &nats, &["-c", conf.to_str().unwrap()], None);
        broker.wait_log("Server is ready", Duration::from_secs(20));
        fleet.broker = Some(broker);
        let ctl = fleet.dir.to_str().unwrap().to_string();
        let controller = fleet.spawn(
            0,
            "controller",
            Path::new(mesh_bin()),
            &["controller", "--dir", &ctl, "--no-http"],
            None,
        );
        controller.wait_log("controller running", Duration::from_secs(30));
        fleet.controller = Some(controller);
        fleet
    }

    pub fn machine(&self, i: usize) -> &Machine {
        self.kit.machine(i)
    }

    /// `program args` in machine `i` (see [`spawn_in`]).
    pub fn spawn(
        &self,
        i: usize,
        name: &str,
        program: &Path,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Proc {
        spawn_in(self.machine(i), self.tmp.path(), name, program, args, stdin)
    }

    /// `mesh ARGS --dir D` run in machine 0 (the controller's).
    pub fn mesh(&self, args: &[&str]) -> Output {
        self.machine(0)
            .command(mesh_bin())
            .args(args)
            .args(["--dir", self.dir.to_str().unwrap()])
            .current_dir(self.tmp.path())
            .env_remove("MESH_STORE")
            .output()
            .unwrap()
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.mesh(args);
        assert!(out.status.success(), "mesh {args:?}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn host_state(&self, node: &str) -> PathBuf {
        self.tmp.path().join(format!("host-{node}"))
    }

    /// Node `node`'s host on machine `i`, advertising the machine's
    /// address; enrolled with a token read from its stdin when `token`.
    pub fn start_host(&mut self, i: usize, node: &str, token: Option<&str>) {
        let state = self.host_state(node);
        let addr = self.machine(i).addr.to_string();
        let mut args = vec![
            "host",
            "--state",
            state.to_str().unwrap(),
            "--advertise",
            &addr,
        ];
        if token.is_some() {
            args.extend(["--token", "-"]);
        }
        let name = format!("host-{node}");
        let host = self.spawn(i, &name, Path::new(mesh_bin()), &args, token);
        self.hosts[i] = Some(host);
    }

    /// `mesh node add NODE`, its host started on machine `i` with the
    /// token on stdin.
    pub fn enrol(&mut self, i: usize, node: &str) {
        let token = self.ok(&["node", "add", node, "--ttl", "10m"]);
        self.start_host(i, node, Some(token.trim()));
        self.hosts[i]
            .as_ref()
            .unwrap()
            .wait_log("connected to the bus", Duration::from_secs(60));
    }

    /// A node's liveness as `mesh nodes` says it.
    pub fn liveness(&self, node: &str) -> String {
        let out = self.ok(&["nodes", "--output", "json"]);
        let nodes: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
        nodes
            .iter()
            .find(|n| n["node"] == node)
            .and_then(|n| n["liveness"].as_str())
            .unwrap_or("absent")
            .to_string()
    }

    /// The pid a module's host recorded for it, when alive.
    pub fn module_pid(&self, node: &str, module: &str) -> Option<u32> {
        let path = self
            .host_state(node)
            .join("modules")
            .join(module)
            .join("pid");
        let text = std::fs::read_to_string(path).ok()?;
        let pid: u32 = text.split_whitespace().next()?.parse().ok()?;
        mesh_testkit::pid_alive(pid).then_some(pid)
    }

    /// What a module wrote (its log on its host).
    pub fn module_log(&self, node: &str, module: &str) -> String {
        let path = self
            .host_state(node)
            .join("modules")
            .join(module)
            .join("log");
        std::fs::read_to_string(path).unwrap_or_default()
    }
}

//! A whole mesh on this machine for the join tests: `mesh init` in a temp
//! dir, the broker on the genesis's own configuration, a real `mesh
//! controller` process, and real `mesh host` processes — each killed when
//! its handle drops.
#![allow(dead_code)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use mesh_bus::{BusConfig, CertPin, ClientCredential, Secret};
use mesh_testkit::{Broker, TestDatabase};

pub fn mesh_bin() -> &'static str {
    env!("CARGO_BIN_EXE_mesh")
}

/// PATH with the directory of the `mesh` binary first: the example
/// modules (`mesh-echo`) are built beside it.
pub fn path_with_bins() -> std::ffi::OsString {
    let bins = Path::new(mesh_bin()).parent().unwrap().to_path_buf();
    ensure_example_built(&bins);
    let mut dirs = vec![bins];
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).unwrap()
}

/// The example modules' programs, built beside `mesh`.
pub const EXAMPLE_BINS: [&str; 6] = [
    "mesh-echo",
    "mesh-ticker",
    "mesh-recorder",
    "mesh-greeter",
    "mesh-worker",
    "mesh-web",
];

/// The example modules and the program each runs as `${artifact:..}`.
pub const EXAMPLE_MODULES: [(&str, &str); 6] = [
    ("echo", "mesh-echo"),
    ("ticker", "mesh-ticker"),
    ("recorder", "mesh-recorder"),
    ("greeter", "mesh-greeter"),
    ("worker", "mesh-worker"),
    ("node-worker", "mesh-worker"),
];

/// The example ticker in an OCI archive built here under `work` (what a
/// container module of the tests runs), put with `mesh artifact put`.
pub fn ticker_archive(engine: &Path, work: &Path) -> PathBuf {
    path_with_bins();
    let ticker = Path::new(mesh_bin()).with_file_name("mesh-ticker");
    let archive = work.join("ticker.oci.tar");
    mesh_cli::image::build_archive(
        engine,
        &ticker,
        "localhost/mesh-test-ticker:latest",
        &work.join("image-build"),
        &archive,
    )
    .unwrap();
    archive
}

/// `program` (built beside `mesh`) without its debug info, kept beside it
/// in `stripped/` and made again when the build is newer: a debug build is
/// over 100 MB, put once per mesh a test starts.
pub fn stripped(program: &str) -> PathBuf {
    static MAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    path_with_bins();
    let bins = Path::new(mesh_bin()).parent().unwrap();
    let built = bins.join(program);
    let out = bins.join("stripped").join(program);
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if modified(&out).is_some() && modified(&out) >= modified(&built) {
        return out;
    }
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let partial = out.with_extension(format!("partial-{}", std::process::id()));
    let status = Command::new("strip")
        .arg("--strip-debug")
        .arg("-o")
        .arg(&partial)
        .arg(&built)
        .status()
        .unwrap_or_else(|e| panic!("strip (binutils): {e}"));
    assert!(status.success(), "strip {}", built.display());
    std::fs::rename(&partial, &out).unwrap();
    out
}

/// `cargo test -p mesh-cli` alone does not build other packages' binaries.
fn ensure_example_built(bins: &Path) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if EXAMPLE_BINS.iter().all(|b| bins.join(b).is_file()) {
            return;
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "-q",
                "-p",
                "mesh-echo",
                "-p",
                "mesh-example-modules",
                "-p",
                "mesh-web",
                "--bins",
            ])
            .status()
            .unwrap();
        assert!(status.success(), "building the example modules");
    });
}

/// `mesh ARGS --dir DIR --store URL`, run in `cwd`.
pub fn mesh_in(dir: &Path, store_url: &str, cwd: &Path, args: &[&str]) -> Output {
    Command::new(mesh_bin())
        .args(args)
        .args(["--dir", dir.to_str().unwrap(), "--store", store_url])
        .current_dir(cwd)
        .env_remove("MESH_STORE")
        .output()
        .unwrap()
}

/// A command's stdout and stderr, as one text for a failure's message.
pub fn out_text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `cmd` as a person runs it at `home`: their directory and config home,
/// nothing naming a mesh in the environment.
pub fn at_home<'c>(cmd: &'c mut Command, home: &Path) -> &'c mut Command {
    cmd.current_dir(home)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env_remove("MESH_DIR")
        .env_remove("MESH_STORE")
        .env_remove("MESH_STORE_FILE")
        .env_remove("MESH_CONTEXT")
}

/// `mesh ARGS` against `mesh`, which must succeed: its output.
pub fn ok(mesh: &Mesh, args: &[&str]) -> String {
    let o = mesh.mesh(args);
    assert!(o.status.success(), "mesh {args:?}: {}", out_text(&o));
    out_text(&o)
}

/// Lowercase hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// `module`'s pid on `host`, from the driver's record, while it lives.
pub fn module_pid(mesh: &Mesh, host: &str, module: &str) -> Option<u32> {
    let text = std::fs::read_to_string(mesh.module_dir(host, module).join("pid")).ok()?;
    let pid: u32 = text.split_whitespace().next()?.parse().ok()?;
    mesh_testkit::pid_alive(pid).then_some(pid)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A `mesh` daemon process (controller or host) with its log.
#[derive(Debug)]
pub struct Daemon {
    pub name: String,
    child: Child,
    pub log: PathBuf,
}

impl Daemon {
    pub fn spawn(name: &str, args: &[&str], log: PathBuf, cwd: &Path) -> Daemon {
        Daemon::spawn_logging(name, args, log, cwd, "info,async_nats=off")
    }

    /// As [`Daemon::spawn`] with `filter` as `MESH_LOG`.
    fn spawn_logging(name: &str, args: &[&str], log: PathBuf, cwd: &Path, filter: &str) -> Daemon {
        let out = File::create(&log).unwrap();
        let child = Command::new(mesh_bin())
            .args(args)
            .current_dir(cwd)
            .env("MESH_LOG", filter)
            .env("PATH", path_with_bins())
            .env_remove("MESH_STORE")
            .env_remove("MESH_TOKEN")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        Daemon {
            name: name.to_string(),
            child,
            log,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has not exited.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (bounded) until the log holds `needle`; panics with the log.
    pub fn wait_log(&self, needle: &str, within: Duration) {
        assert!(
            wait_until(within, || self.log().contains(needle)),
            "{} never logged {needle:?} within {within:?}; log:\n{}",
            self.name,
            self.log()
        );
    }

    /// The exit status once the process ends by itself (bounded wait).
    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "{} still running after {within:?}; log:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL (no chance to stop what it started), then the exit status.
    pub fn kill(&mut self) -> ExitStatus {
        signal(self.pid(), libc::SIGKILL);
        self.child.wait().unwrap()
    }

    /// SIGTERM, then the exit status (SIGKILL after 10 s).
    pub fn stop(&mut self) -> ExitStatus {
        signal(self.pid(), libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        self.child.wait().unwrap()
    }
}

impl Drop for Daemon {
    /// An orderly stop first: a host killed outright leaves its modules
    /// running (each is in its own process group, as it must be).
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
        let _ = self.child.wait();
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on a child we spawned and have not reaped.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// Polls `f` every 20 ms until it holds or `within` passes. For state only
/// another process holds (its log, the broker's consumer info).
pub fn wait_until(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A mesh on this machine. Field order is drop order: processes first, the
/// database and the directory last.
pub struct Mesh {
    pub controller: Option<Daemon>,
    pub broker: Broker,
    /// The other servers of a clustered bus (`mesh init --replicas N`):
    /// servers 2 to N, in order; none on a single server.
    pub others: Vec<Broker>,
    pub dir: PathBuf,
    pub store_url: String,
    _db: Option<TestDatabase>,
    pub tmp: tempfile::TempDir,
}

impl Mesh {
    /// `mesh init` on a free port and the broker on its configuration.
    pub fn new(backend: Backend) -> Mesh {
        match backend {
            Backend::Sqlite => Mesh::with_store(None),
            Backend::Postgres => Mesh::with_store(Some(
                mesh_testkit::fresh_database().expect("a PostgreSQL database"),
            )),
        }
    }

    /// A mesh on `db` (a database of a cluster the test may stop), or on
    /// SQLite in its own directory.
    pub fn with_store(db: Option<TestDatabase>) -> Mesh {
        Mesh::with_servers(db, 1)
    }

    /// A mesh whose bus is a cluster of `replicas` servers on this machine
    /// (`mesh init --replicas N`), every server started.
    pub fn with_servers(db: Option<TestDatabase>, replicas: u16) -> Mesh {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ctl");
        let store_url = match &db {
            None => format!("sqlite://{}", dir.join("mesh.db").display()),
            Some(db) => db.url().to_string(),
        };
        // A cluster's servers take the ports after --port: client ports,
        // then route ports.
        let port = match replicas {
            1 => mesh_testkit::broker::free_port(),
            n => mesh_testkit::cluster::free_port_run(2 * n),
        }
        .unwrap()
        .to_string();
        let replicas = replicas.to_string();
        let out = Command::new(mesh_bin())
            .args([
                "init",
                "--dir",
                dir.to_str().unwrap(),
                "--port",
                &port,
                "--replicas",
                &replicas,
                "--store",
                &store_url,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "init: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let genesis = mesh_controller::Genesis::open(&dir).unwrap();
        let mut servers = genesis
            .broker_configs()
            .into_iter()
            .enumerate()
            .map(|(i, conf)| {
                let log = match i {
                    0 => tmp.path().join("nats.log"),
                    i => tmp.path().join(format!("nats-{}.log", i + 1)),
                };
                Broker::start(&conf, &log).expect("the broker starts on the genesis configuration")
            })
            .collect::<Vec<_>>()
            .into_iter();
        let broker = servers.next().expect("a server");
        Mesh {
            controller: None,
            broker,
            others: servers.collect(),
            dir,
            store_url,
            _db: db,
            tmp,
        }
    }

    /// Every server of the bus, server 1 first.
    pub fn servers(&self) -> Vec<&Broker> {
        std::iter::once(&self.broker).chain(&self.others).collect()
    }

    /// Server `i` (1-based) of the bus.
    pub fn server_mut(&mut self, i: usize) -> &mut Broker {
        match i {
            1 => &mut self.broker,
            i => &mut self.others[i - 2],
        }
    }

    pub fn start_controller(&mut self) -> &Daemon {
        self.start_controller_with(&[])
    }

    /// Starts (or starts again) the controller with extra arguments, each
    /// start with a log of its own.
    pub fn start_controller_with(&mut self, extra: &[&str]) -> &Daemon {
        self.start_controller_full(extra, "info,async_nats=off")
    }

    /// The controller with `filter` as `MESH_LOG` (e.g. debug for what it
    /// ignores quietly).
    pub fn start_controller_logging(&mut self, filter: &str) -> &Daemon {
        self.start_controller_full(&[], filter)
    }

    fn start_controller_full(&mut self, extra: &[&str], filter: &str) -> &Daemon {
        let d = self.spawn_controller("controller", extra, filter);
        d.wait_log("controller running", Duration::from_secs(30));
        self.controller = Some(d);
        self.controller.as_ref().unwrap()
    }

    /// Another `mesh controller` on this mesh's directory and store (a
    /// standby beside the first, on PostgreSQL), not waited for.
    pub fn spawn_controller(&self, name: &str, extra: &[&str], filter: &str) -> Daemon {
        let log = self.tmp.path().join(format!("{name}-{}.log", unique()));
        let mut args = vec![
            "controller",
            "--dir",
            self.dir.to_str().unwrap(),
            "--store",
            &self.store_url,
        ];
        args.extend(extra);
        Daemon::spawn_logging(name, &args, log, self.tmp.path(), filter)
    }

    pub fn controller(&self) -> &Daemon {
        self.controller
            .as_ref()
            .expect("the controller was started")
    }

    /// Runs a `mesh` command against this mesh's state dir and store.
    pub fn mesh(&self, args: &[&str]) -> Output {
        mesh_in(&self.dir, &self.store_url, self.tmp.path(), args)
    }

    /// `mesh node add NAME`: the token it printed.
    pub fn node_add(&self, name: &str, ttl: &str) -> String {
        let out = self.mesh(&["node", "add", name, "--ttl", ttl]);
        assert!(
            out.status.success(),
            "node add {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let token = String::from_utf8(out.stdout).unwrap();
        assert_eq!(token.lines().count(), 1, "the token alone on stdout");
        // The advice keeps the token off command lines (world-readable).
        let advice = String::from_utf8_lossy(&out.stderr);
        assert!(
            advice.contains("`mesh host --token - < FILE`")
                && advice.contains("MESH_TOKEN")
                && !advice.contains("--token <token>"),
            "{advice}"
        );
        token.trim().to_string()
    }

    /// A state dir for a host, inside the mesh's temp dir.
    pub fn host_dir(&self, name: &str) -> PathBuf {
        self.tmp.path().join(format!("host-{name}"))
    }

    /// `mesh host [--token T] --state DIR` as a process.
    pub fn host(&self, name: &str, token: Option<&str>) -> Daemon {
        self.host_with(name, token, &[])
    }

    /// As [`Mesh::host`], with more arguments (`--advertise A`).
    pub fn host_with(&self, name: &str, token: Option<&str>, extra: &[&str]) -> Daemon {
        let state = self.host_dir(name);
        let mut args = vec!["host", "--state", state.to_str().unwrap()];
        if let Some(t) = token {
            args.extend(["--token", t]);
        }
        args.extend(extra);
        let log = self
            .tmp
            .path()
            .join(format!("host-{name}-{}.log", unique()));
        Daemon::spawn(&format!("host {name}"), &args, log, self.tmp.path())
    }

    pub fn users_file(&self) -> String {
        std::fs::read_to_string(self.dir.join("broker/users.conf")).unwrap()
    }

    /// The broker's address and pin, as a client of this mesh would use.
    pub fn bus(&self, principal: &str, seed: &str, inbox: Option<String>) -> BusConfig {
        let fingerprint =
            mesh_bus::fingerprint_of_pem_file(&self.dir.join("broker/cert.pem")).unwrap();
        let port = self.port();
        // Every server of a cluster, as a host is given them.
        let urls: Vec<String> = (0..self.servers().len() as u16)
            .map(|i| format!("tls://127.0.0.1:{}", port + i))
            .collect();
        BusConfig {
            url: urls.join(","),
            principal: principal.into(),
            credential: ClientCredential::NKey(Secret::new(seed)),
            ca_file: None,
            inbox_prefix: inbox,
            pin: Some(CertPin::from_hex(&fingerprint).unwrap()),
        }
    }

    pub fn port(&self) -> u16 {
        let bus: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(self.dir.join("broker/bus.json")).unwrap(),
        )
        .unwrap();
        bus["port"].as_u64().unwrap() as u16
    }

    /// A client with the controller's own key: what the tests observe the
    /// bus through (consumer info), as the controller would.
    /// A connection as `principal` with `seed`, hearing the server's
    /// refusals (a refused publish is otherwise silent).
    pub async fn connect_hearing(
        &self,
        principal: &str,
        seed: &str,
    ) -> (async_nats::Client, mesh_bus::Refusals) {
        let cfg = self.bus(principal, seed.trim(), Some(format!("_INBOX.{principal}")));
        let (client, refusals) = mesh_bus::connect_hearing(&cfg).await.unwrap();
        (client, refusals)
    }

    pub async fn observer(&self) -> async_nats::Client {
        let seed = std::fs::read_to_string(self.dir.join("controller/nkey.seed")).unwrap();
        mesh_bus::connect(&self.bus("controller", seed.trim(), Some("_INBOX.controller".into())))
            .await
            .expect("the controller's key connects")
    }

    /// How many messages a stream holds, as the controller reads it.
    pub async fn stored(&self, stream: &str) -> u64 {
        let js = async_nats::jetstream::new(self.observer().await);
        js.get_stream(stream)
            .await
            .unwrap()
            .info()
            .await
            .unwrap()
            .state
            .messages
    }

    /// A mesh with its controller, the example catalogue registered, and a
    /// real host per name, enrolled and bound.
    pub async fn with_hosts(backend: Backend, names: &[&str]) -> (Mesh, Vec<Daemon>) {
        let mut mesh = Mesh::new(backend);
        mesh.start_controller();
        mesh.register(&Mesh::examples());
        let hosts: Vec<_> = names
            .iter()
            .map(|n| {
                let t = mesh.node_add(n, "1h");
                mesh.host(n, Some(&t))
            })
            .collect();
        let js = async_nats::jetstream::new(mesh.observer().await);
        wait_bound(&js, names, Duration::from_secs(60)).await;
        (mesh, hosts)
    }

    /// `mesh catalogue register PATH`; for the example catalogue, its
    /// modules' programs put into the artifact store too (they run from
    /// it, as under `mesh up`).
    pub fn register(&self, catalogue: &Path) {
        let out = self.mesh(&["catalogue", "register", catalogue.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "register: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if catalogue.canonicalize().ok() == Some(Mesh::examples()) {
            self.put_example_programs();
        }
    }

    /// Each example module's program (`${artifact:mesh-echo}`, …) put as
    /// an artifact of its module, stripped of debug info as `mesh up`
    /// puts it.
    pub fn put_example_programs(&self) {
        for (module, program) in EXAMPLE_MODULES {
            let file = stripped(program);
            let out = self.mesh(&[
                "artifact",
                "put",
                file.to_str().unwrap(),
                "--module",
                module,
                "--name",
                program,
            ]);
            assert!(
                out.status.success(),
                "artifact put {program}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// `mesh assign MODULE NODE` (or unassign).
    pub fn assign(&self, module: &str, node: &str, assign: bool) {
        let verb = if assign { "assign" } else { "unassign" };
        let out = self.mesh(&[verb, module, node]);
        assert!(
            out.status.success(),
            "{verb}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A module's directory on a host: its key, log, pid record, `work/`.
    pub fn module_dir(&self, host: &str, module: &str) -> PathBuf {
        self.host_dir(host).join("modules").join(module)
    }

    /// The example catalogue.
    pub fn examples() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/catalogue")
            .canonicalize()
            .unwrap()
    }

    /// `mesh nodes --output json`.
    pub fn nodes(&self) -> Vec<serde_json::Value> {
        let out = self.mesh(&["nodes", "--output", "json"]);
        assert!(
            out.status.success(),
            "nodes: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

/// Whether `node`'s consumer on NODES exists and has a subscriber bound.
pub async fn bound(js: &async_nats::jetstream::Context, node: &str) -> bool {
    let Ok(stream) = js.get_stream_no_info("NODES").await else {
        return false;
    };
    match stream.consumer_info(node).await {
        Ok(info) => info.push_bound,
        Err(_) => false,
    }
}

/// Waits (bounded) until every node's consumer is bound.
pub async fn wait_bound(js: &async_nats::jetstream::Context, nodes: &[&str], within: Duration) {
    let deadline = Instant::now() + within;
    for n in nodes {
        loop {
            if bound(js, n).await {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {n}'s consumer never bound within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

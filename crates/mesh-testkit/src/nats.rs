//! A real `nats-server` per test: its own port, config, store dir and log,
//! killed by pid on drop.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::error::io;
use crate::process::{checked_output, stop_child, wait_ready};
use crate::tls::TestCertificates;
use crate::{TestkitError, nats_server_binary};

const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// How to start a test server.
#[derive(Debug, Default, Clone)]
pub struct NatsServerBuilder {
    tls: bool,
    no_jetstream: bool,
    config: String,
    files: Vec<(String, String)>,
}

impl NatsServerBuilder {
    /// Serve TLS with a certificate generated for 127.0.0.1 and localhost.
    pub fn tls(mut self, on: bool) -> Self {
        self.tls = on;
        self
    }

    /// Turn JetStream off (it is on by default).
    pub fn without_jetstream(mut self) -> Self {
        self.no_jetstream = true;
        self
    }

    /// Extra text appended to the main configuration (e.g. `include users.conf`).
    pub fn config(mut self, text: impl Into<String>) -> Self {
        self.config.push_str(&text.into());
        self.config.push('\n');
        self
    }

    /// A file written beside the main configuration before the server starts;
    /// `include <name>` in [`Self::config`] finds it, since nats-server resolves
    /// includes against the including file's directory.
    pub fn file(mut self, name: impl Into<String>, contents: impl Into<String>) -> Self {
        self.files.push((name.into(), contents.into()));
        self
    }

    pub fn start(self) -> Result<NatsServer, TestkitError> {
        NatsServer::start_with(self)
    }
}

/// A running `nats-server`. Dropping it kills the process and removes its
/// directory.
#[derive(Debug)]
pub struct NatsServer {
    child: Child,
    port: u16,
    builder: NatsServerBuilder,
    certs: Option<TestCertificates>,
    // Declared last: removed after the process is gone.
    dir: TempDir,
}

impl NatsServer {
    pub fn builder() -> NatsServerBuilder {
        NatsServerBuilder::default()
    }

    /// A plain server with JetStream on.
    pub fn start() -> Result<Self, TestkitError> {
        Self::builder().start()
    }

    fn start_with(builder: NatsServerBuilder) -> Result<Self, TestkitError> {
        let bin = nats_server_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("mesh-nats-")
            .tempdir()
            .map_err(io("create a temp dir for nats-server"))?;
        let certs = if builder.tls {
            Some(TestCertificates::generate(dir.path())?)
        } else {
            None
        };
        for (name, contents) in &builder.files {
            let path = dir.path().join(name);
            std::fs::write(&path, contents).map_err(io(format!("write {}", path.display())))?;
        }
        // Port -1 lets the server pick a free one: no clash between parallel tests.
        let child = spawn(&bin, dir.path(), &builder, certs.as_ref(), None)?;
        let mut server = NatsServer {
            child,
            port: 0,
            builder,
            certs,
            dir,
        };
        server.port = server.wait_ready()?;
        Ok(server)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `nats://127.0.0.1:<port>` or `tls://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        let scheme = if self.certs.is_some() { "tls" } else { "nats" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The generated certificates, when TLS is on.
    pub fn certificates(&self) -> Option<&TestCertificates> {
        self.certs.as_ref()
    }

    /// The directory holding the config, included files, store and log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("nats.conf")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("nats.log")
    }

    /// Everything the server has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Waits until the log contains `needle` (the server logs after it acts,
    /// so a line may lag what a client already sees).
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.log().contains(needle) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Rewrites a file beside the config (then [`Self::reload`] to apply it).
    pub fn write_file(&self, name: &str, contents: &str) -> Result<(), TestkitError> {
        let path = self.dir.path().join(name);
        std::fs::write(&path, contents).map_err(io(format!("write {}", path.display())))
    }

    /// Asks this server (by its own pid) to reload its configuration. A failed
    /// reload is only logged by the server; callers must confirm it took.
    pub fn reload(&self) -> Result<(), TestkitError> {
        crate::process::signal(self.pid(), libc::SIGHUP);
        Ok(())
    }

    /// Kills the server and removes its directory, for a server kept in a
    /// static (never dropped) and shared by a test binary: call it from an
    /// `atexit` handler, or the process and its store outlive the tests.
    pub fn kill_and_remove(&self) {
        crate::process::signal(self.pid(), libc::SIGKILL);
        let _ = std::fs::remove_dir_all(self.dir.path());
    }

    /// Stops the server and starts it again on the same port with the same
    /// store, so durable state survives.
    pub fn restart(&mut self) -> Result<(), TestkitError> {
        stop_child(&mut self.child, libc::SIGTERM, Duration::from_secs(10));
        let bin = nats_server_binary()?;
        self.child = spawn(
            &bin,
            self.dir.path(),
            &self.builder,
            self.certs.as_ref(),
            Some(self.port),
        )?;
        self.wait_ready()?;
        Ok(())
    }

    /// Waits for the ports file of the current pid and for the server's
    /// "ready" line; returns the client port.
    fn wait_ready(&mut self) -> Result<u16, TestkitError> {
        let ports_file = self
            .dir
            .path()
            .join(format!("nats-server_{}.ports", self.child.id()));
        let log = self.log_path();
        let child = &mut self.child;
        wait_ready(
            "nats-server",
            READY_TIMEOUT,
            Duration::from_millis(20),
            &log,
            || child.try_wait().ok().flatten(),
            || {
                read_client_port(&ports_file).filter(|_| {
                    std::fs::read_to_string(&log)
                        .unwrap_or_default()
                        .contains("Server is ready")
                })
            },
        )
    }
}

fn read_client_port(path: &Path) -> Option<u16> {
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let url = v.get("nats")?.get(0)?.as_str()?;
    url.rsplit(':').next()?.parse().ok()
}

fn spawn(
    bin: &Path,
    dir: &Path,
    b: &NatsServerBuilder,
    certs: Option<&TestCertificates>,
    port: Option<u16>,
) -> Result<Child, TestkitError> {
    let mut conf = String::new();
    let port = port.map(i32::from).unwrap_or(-1);
    let _ = writeln!(conf, "listen: \"127.0.0.1:{port}\"");
    let _ = writeln!(conf, "ports_file_dir: {:?}", dir.display().to_string());
    let _ = writeln!(
        conf,
        "log_file: {:?}",
        dir.join("nats.log").display().to_string()
    );
    let _ = writeln!(conf, "server_name: \"mesh-test\"");
    if !b.no_jetstream {
        let store = dir.join("jetstream").display().to_string();
        let _ = writeln!(conf, "jetstream {{ store_dir: {store:?} }}");
    }
    if let Some(c) = certs {
        // No `verify: true`: mesh clients authenticate by credential over
        // server-authenticated TLS; verify would demand a client certificate.
        let _ = writeln!(
            conf,
            "tls {{ cert_file: {:?}, key_file: {:?} }}",
            c.cert_pem.display().to_string(),
            c.key_pem.display().to_string()
        );
    }
    conf.push_str(&b.config);
    let conf_path = dir.join("nats.conf");
    std::fs::write(&conf_path, conf).map_err(io("write nats.conf"))?;
    Command::new(bin)
        .arg("-c")
        .arg(&conf_path)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(io(format!("start {}", bin.display())))
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        stop_child(&mut self.child, libc::SIGKILL, Duration::from_secs(5));
    }
}

/// Runs `nats-server -t -c <config>`: whether the server accepts a
/// configuration, with its own words when it does not.
pub fn test_config(config: &Path) -> Result<(), TestkitError> {
    let bin = nats_server_binary()?;
    checked_output(
        Command::new(&bin).arg("-t").arg("-c").arg(config),
        &format!("nats-server -t -c {}", config.display()),
    )?;
    Ok(())
}

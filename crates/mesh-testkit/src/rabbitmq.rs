//! A real RabbitMQ per test binary (or per test that restarts it): Debian's
//! `rabbitmq-server` with the management plugin, TLS on both listeners (a
//! certificate generated for 127.0.0.1), ports, node name, Erlang port
//! mapper and data of its own, and no `guest`: its one user at boot is an
//! administrator made from a definitions file holding only a password hash.
//! Killed (the whole process group, and its port mapper) on drop.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use rand::Rng as _;
use tempfile::TempDir;

use crate::error::io;
use crate::process::{free_port, signal, wait_ready};
use crate::tls::TestCertificates;
use crate::{TestkitError, rabbitmq_server_binary};

/// Boot takes 5–15 s on these machines (an Erlang VM, Mnesia, plugins).
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// How long a delivery may stay unacknowledged before the broker closes its
/// channel (RabbitMQ's default is 30 minutes): longer than the store
/// window's default bound, an hour, for which the controller holds a report
/// it retries (`docs/bus-seam.md`).
pub const CONSUMER_TIMEOUT_MS: u64 = 2 * 3600 * 1000;

/// The administrator the server boots with: the test's own observer and
/// the management API's first user.
pub const ADMIN: &str = "observer";

/// A running RabbitMQ. The broker process group and the port mapper are
/// killed on drop; the data directory goes with the temp dir.
#[derive(Debug)]
pub struct RabbitMq {
    child: Mutex<Option<Child>>,
    epmd: Mutex<Option<Child>>,
    amqp_port: u16,
    management_port: u16,
    epmd_port: u16,
    dist_port: u16,
    node: String,
    admin_password: String,
    certs: TestCertificates,
    /// The environment a genesis names (`mesh init --bus amqp`), in place
    /// of this server's own configuration.
    given_env: Option<Vec<(String, std::ffi::OsString)>>,
    // Declared last: removed after the processes are gone.
    dir: TempDir,
}

impl RabbitMq {
    pub fn start() -> Result<Self, TestkitError> {
        let dir = tempfile::Builder::new()
            .prefix("mesh-rabbitmq-")
            .tempdir()
            .map_err(io("create a temp dir for rabbitmq"))?;
        let certs = TestCertificates::generate(dir.path())?;
        let mut rng = rand::rng();
        let admin_password: String = (0..24)
            .map(|_| char::from(b'a' + rng.random_range(0..26u8)))
            .collect();
        let salt: [u8; 4] = rng.random();
        let server = RabbitMq {
            child: Mutex::new(None),
            epmd: Mutex::new(None),
            amqp_port: free_port()?,
            management_port: free_port()?,
            epmd_port: free_port()?,
            dist_port: free_port()?,
            node: format!("mesh{}@localhost", rng.random_range(0..u32::MAX)),
            certs,
            dir,
            admin_password: admin_password.clone(),
            given_env: None,
        };
        server.write_config(&mesh_core::authority::amqp::password_hash(
            salt,
            admin_password.as_bytes(),
        ))?;
        server.boot()?;
        Ok(server)
    }

    /// RabbitMQ in the environment `env` names (a genesis's: its
    /// configuration, data directory, node name and ports; `epmd_port` is
    /// its port mapper's), started and waited for. Its log is kept apart.
    pub fn start_with_env(
        env: Vec<(String, std::ffi::OsString)>,
        epmd_port: u16,
    ) -> Result<Self, TestkitError> {
        let dir = tempfile::Builder::new()
            .prefix("mesh-rabbitmq-")
            .tempdir()
            .map_err(io("create a temp dir for rabbitmq"))?;
        let certs = TestCertificates::generate(dir.path())?;
        let port = |name: &str| {
            env.iter()
                .find(|(k, _)| k == name)
                .and_then(|(_, v)| v.to_str()?.parse().ok())
                .unwrap_or(0)
        };
        let server = RabbitMq {
            child: Mutex::new(None),
            epmd: Mutex::new(None),
            amqp_port: 0,
            management_port: 0,
            epmd_port,
            dist_port: port("RABBITMQ_DIST_PORT"),
            node: String::new(),
            certs,
            dir,
            admin_password: String::new(),
            given_env: Some(env),
        };
        server.boot()?;
        Ok(server)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write_config(&self, admin_hash: &str) -> Result<(), TestkitError> {
        let definitions = mesh_bus::amqp::broker::definitions(ADMIN, admin_hash);
        let c = &self.certs;
        let config = mesh_bus::amqp::broker::config(&mesh_bus::amqp::broker::BrokerFiles {
            listen: format!("127.0.0.1:{}", self.amqp_port),
            ca: &c.ca_pem,
            cert: &c.cert_pem,
            key: &c.key_pem,
            management_port: self.management_port,
            definitions: &self.path("definitions.json"),
            consumer_timeout_ms: CONSUMER_TIMEOUT_MS,
        });
        for (name, text) in [
            ("definitions.json", definitions.to_string()),
            ("rabbitmq.conf", config),
            (
                "enabled_plugins",
                mesh_bus::amqp::broker::ENABLED_PLUGINS.to_string(),
            ),
        ] {
            let p = self.path(name);
            std::fs::write(&p, text).map_err(io(format!("write {}", p.display())))?;
        }
        Ok(())
    }

    /// Starts the port mapper and the broker (again, after [`Self::stop`]:
    /// the same ports, node and data), and waits until it serves.
    pub fn boot(&self) -> Result<(), TestkitError> {
        let bin = rabbitmq_server_binary()?;
        let log = self.log_path();
        let epmd = Command::new("epmd")
            .args(["-port", &self.epmd_port.to_string()])
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(io(
                "start epmd (Erlang's port mapper, from Debian's erlang-base)",
            ))?;
        *self.epmd.lock().unwrap() = Some(epmd);
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(io(format!("open {}", log.display())))?;
        let err = out.try_clone().map_err(io("clone a log handle"))?;
        let d = self.dir.path();
        let mut cmd = Command::new(bin);
        if let Some(env) = &self.given_env {
            cmd.envs(env.iter().map(|(k, v)| (k, v)));
        } else {
            cmd.env("RABBITMQ_NODENAME", &self.node)
                .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
                .env("RABBITMQ_CONFIG_FILE", self.path("rabbitmq.conf"))
                .env(
                    "RABBITMQ_ENABLED_PLUGINS_FILE",
                    self.path("enabled_plugins"),
                )
                .env("RABBITMQ_MNESIA_BASE", d.join("mnesia"))
                .env("RABBITMQ_LOG_BASE", d.join("log"))
                .env("RABBITMQ_FEATURE_FLAGS_FILE", d.join("feature_flags"))
                .env("RABBITMQ_PLUGINS_EXPAND_DIR", d.join("plugins"))
                .env("RABBITMQ_PID_FILE", d.join("pid"))
                .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
                .env("ERL_EPMD_PORT", self.epmd_port.to_string())
                // The Erlang cookie is written to $HOME.
                .env("HOME", d);
        }
        cmd.stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            // Its own group: the script, the VM and the VM's helpers stop together.
            .process_group(0);
        let child = cmd.spawn().map_err(io("start rabbitmq-server"))?;
        *self.child.lock().unwrap() = Some(child);
        let ready = wait_ready(
            "rabbitmq-server",
            READY_TIMEOUT,
            Duration::from_millis(100),
            &log,
            || {
                self.child
                    .lock()
                    .unwrap()
                    .as_mut()
                    .and_then(|c| c.try_wait().ok().flatten())
            },
            || {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                // Counted: a restart appends to the same log.
                let booted = text.matches("Server startup complete").count();
                (booted > self.boots()).then_some(booted)
            },
        );
        match ready {
            Ok(n) => {
                self.set_boots(n);
                Ok(())
            }
            Err(e) => {
                self.kill();
                Err(e)
            }
        }
    }

    fn boots(&self) -> usize {
        std::fs::read_to_string(self.path("boots"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    fn set_boots(&self, n: usize) {
        let _ = std::fs::write(self.path("boots"), n.to_string());
    }

    pub fn log_path(&self) -> PathBuf {
        self.path("rabbitmq.log")
    }

    /// A graceful stop (SIGTERM: the script stops the VM), waited for, then
    /// the port mapper. [`Self::boot`] starts it again.
    pub fn stop(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            signal(child.id(), libc::SIGTERM);
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while std::time::Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            kill_group(&mut child);
        }
        self.stop_epmd();
    }

    fn kill(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            kill_group(&mut child);
        }
        self.stop_epmd();
    }

    fn stop_epmd(&self) {
        if let Some(mut e) = self.epmd.lock().unwrap().take() {
            let _ = e.kill();
            let _ = e.wait();
        }
    }

    pub fn amqp_port(&self) -> u16 {
        self.amqp_port
    }

    /// `https://127.0.0.1:<port>`: the management API.
    pub fn management_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.management_port)
    }

    /// The CA the server's certificate is signed by.
    pub fn ca_pem(&self) -> &Path {
        &self.certs.ca_pem
    }

    /// The server certificate, what a client pins.
    pub fn cert_pem(&self) -> &Path {
        &self.certs.cert_pem
    }

    /// The administrator's password (the test's own; never a mesh secret).
    pub fn admin_password(&self) -> &str {
        &self.admin_password
    }
}

/// SIGKILL to the whole group (the VM's helpers too), then reap.
fn kill_group(child: &mut Child) {
    // SAFETY: kill(2) on the process group we made for this child.
    unsafe {
        libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for RabbitMq {
    fn drop(&mut self) {
        self.kill();
    }
}

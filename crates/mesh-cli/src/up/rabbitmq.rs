//! RabbitMQ as `mesh up` runs it for a mesh whose bus is AMQP: Debian's
//! `rabbitmq-server` in the environment the genesis names (every file in
//! the state directory, a node name and ports of its own), beside an Erlang
//! port mapper of its own, which `mesh up` starts first and stops last (one
//! the server started itself would detach and outlive the mesh).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use mesh_controller::Genesis;
use tokio::process::{Child, Command};

use super::children::{self, Forced, PidCell};

/// Its log, beside the NATS one.
pub const LOG: &str = "broker/rabbitmq.log";
/// What it says once it serves.
pub const READY_LINE: &str = "Server startup complete";
/// An Erlang VM, Mnesia and the management plugin: 5–15 s here, more on a
/// loaded machine.
pub const BOOT_WITHIN: Duration = Duration::from_secs(90);
/// A graceful stop takes about 6 s here.
pub const STOP_GRACE: Duration = Duration::from_secs(20);

/// Debian's server script (the one in /usr/sbin switches to a `rabbitmq`
/// user and a system node).
const DEBIAN_SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

pub struct RabbitMq {
    binary: PathBuf,
    env: Vec<(&'static str, std::ffi::OsString)>,
    epmd_port: u16,
    epmd: Option<Child>,
    epmd_pid: Option<u32>,
}

impl RabbitMq {
    /// The genesis's RabbitMQ; `None` when its bus is NATS.
    pub fn of(genesis: &Genesis) -> anyhow::Result<Option<RabbitMq>> {
        let (Some(env), Some(ports)) = (genesis.rabbitmq_env(), genesis.amqp_ports) else {
            return Ok(None);
        };
        Ok(Some(RabbitMq {
            binary: server_binary()?,
            env,
            epmd_port: ports.epmd,
            epmd: None,
            epmd_pid: None,
        }))
    }

    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// The port mapper started, and the server's command to spawn.
    pub fn command(&mut self, pids: &PidCell) -> anyhow::Result<Command> {
        if self.epmd.is_none() {
            let epmd = Command::new("epmd")
                .args(["-port", &self.epmd_port.to_string()])
                .env("ERL_EPMD_ADDRESS", "127.0.0.1")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .context(
                    "starting epmd, Erlang's port mapper (Debian's erlang-base; `scripts/setup --rabbitmq` installs it)",
                )?;
            self.epmd_pid = epmd.id();
            children::remember(pids, self.epmd_pid, Forced::Kill);
            self.epmd = Some(epmd);
        }
        let mut c = Command::new(&self.binary);
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        Ok(c)
    }

    /// The port mapper stopped (after the server).
    pub fn stop_epmd(&mut self, pids: &PidCell) {
        if let Some(mut e) = self.epmd.take() {
            let _ = e.start_kill();
            // Reaped at once: a mapper left `<defunct>` while the mesh stops.
            let _ = e.try_wait();
            tokio::spawn(async move {
                let _ = e.wait().await;
            });
        }
        children::forget(pids, self.epmd_pid.take());
    }
}

/// `MESH_RABBITMQ_SERVER`, else Debian's script.
fn server_binary() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("MESH_RABBITMQ_SERVER") {
        return Ok(PathBuf::from(p));
    }
    let debian = PathBuf::from(DEBIAN_SERVER);
    if debian.is_file() {
        return Ok(debian);
    }
    anyhow::bail!(
        "no RabbitMQ found at {DEBIAN_SERVER}: a mesh on AMQP runs Debian's rabbitmq-server; run `scripts/setup --rabbitmq`, or set MESH_RABBITMQ_SERVER to its server script"
    )
}

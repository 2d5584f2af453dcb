//! The broker `mesh up` starts and supervises: `nats-server` on the
//! genesis's configuration (each server's, for `mesh up --ha`'s three), or
//! RabbitMQ on a mesh whose bus is AMQP, in a process group of its own so a terminal's
//! Ctrl-C (sent to the whole foreground group) does not reach it — `mesh
//! up` stops it itself, last, once the host and the controller are done
//! with it — and always reaped, so no `<defunct>` is left.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail};
use mesh_controller::Genesis;
use tokio::process::{Child, Command};

/// How long the broker gets after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(4);

/// How long a start may take to listen.
const LISTEN_WITHIN: Duration = Duration::from_secs(20);

use super::children::{self, Forced, PidCell};

/// Every server of the genesis's bus, started and stopped together.
pub struct Broker {
    servers: Vec<Server>,
    pids: PidCell,
}

struct Server {
    program: Program,
    log_path: PathBuf,
    addr: String,
    child: Option<Child>,
    /// Kept apart: a reaped child no longer says its pid.
    pid: Option<u32>,
}

/// What a server runs.
enum Program {
    Nats { nats: PathBuf, conf: PathBuf },
    RabbitMq(Box<super::rabbitmq::RabbitMq>),
}

impl Broker {
    /// The genesis's broker: nats-server (`nats`), or RabbitMQ on a mesh
    /// whose bus is AMQP.
    pub fn new(nats: &Path, genesis: &Genesis, pids: PidCell) -> anyhow::Result<Broker> {
        if let Some(rabbit) = super::rabbitmq::RabbitMq::of(genesis)? {
            let server = Server {
                log_path: genesis.path(super::rabbitmq::LOG),
                addr: format!("127.0.0.1:{}", genesis.port),
                program: Program::RabbitMq(Box::new(rabbit)),
                child: None,
                pid: None,
            };
            return Ok(Broker {
                servers: vec![server],
                pids,
            });
        }
        let servers = genesis.servers();
        let one = servers.len() == 1;
        let servers = servers
            .into_iter()
            .enumerate()
            .map(|(i, s)| Server {
                program: Program::Nats {
                    nats: nats.to_path_buf(),
                    conf: genesis.path(&s.conf),
                },
                log_path: genesis.path(&if one {
                    "broker/nats.log".to_string()
                } else {
                    format!("broker/nats-{}.log", i + 1)
                }),
                addr: format!("127.0.0.1:{}", s.port),
                child: None,
                pid: None,
            })
            .collect();
        Ok(Broker { servers, pids })
    }

    pub fn pid_cell(&self) -> PidCell {
        self.pids.clone()
    }

    /// Starts each server not running; returns once each says in its log
    /// that it is ready (listening). Cancelled (dropped) meanwhile, the processes
    /// are kept here for [`Broker::stop`].
    pub async fn start(&mut self) -> anyhow::Result<()> {
        for s in &mut self.servers {
            if s.child.is_none() {
                s.start(&self.pids).await?;
            }
        }
        Ok(())
    }

    /// Resolves when a running server exits (reaped): its log; never
    /// without one.
    pub async fn exited(&mut self) -> (std::io::Result<ExitStatus>, PathBuf) {
        let running: Vec<_> = self
            .servers
            .iter_mut()
            .filter(|s| s.child.is_some())
            .map(|s| Box::pin(s.exited(&self.pids)))
            .collect();
        if running.is_empty() {
            return std::future::pending().await;
        }
        futures::future::select_all(running).await.0
    }

    /// Each server: SIGTERM, SIGKILL after [`STOP_GRACE`], and reaped.
    pub async fn stop(&mut self) {
        futures::future::join_all(self.servers.iter_mut().map(|s| s.stop(&self.pids))).await;
    }
}

impl Server {
    async fn start(&mut self, pids: &PidCell) -> anyhow::Result<()> {
        // A port another server holds would answer the readiness probe
        // below: this mesh would then enrol against someone else's broker
        // and fail on its certificate, far from the cause.
        if let Err(e) = std::net::TcpListener::bind(&self.addr)
            && e.kind() == std::io::ErrorKind::AddrInUse
        {
            bail!(
                "the broker's port {} is taken by another process (another mesh's broker?); stop it, or give a new mesh another port with `mesh up --port P` (a mesh that ran before keeps its genesis's port: make the new one in another --dir)",
                self.addr
            );
        }
        // Where this start's lines begin: the log is appended to.
        let from = std::fs::metadata(&self.log_path).map_or(0, |m| m.len());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .with_context(|| format!("opening {}", self.log_path.display()))?;
        let mut command = match &mut self.program {
            Program::Nats { nats, conf } => {
                let mut c = Command::new(&*nats);
                c.arg("-c").arg(&*conf);
                c
            }
            Program::RabbitMq(r) => r.command(pids)?,
        };
        let program = match &self.program {
            Program::Nats { nats, .. } => nats.display().to_string(),
            Program::RabbitMq(r) => r.binary().display().to_string(),
        };
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            // The broker must not outlive a `mesh up` that unwinds without
            // stopping it (its own group no longer ends it with ours).
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {program}"))?;
        self.pid = child.id();
        let forced = match self.program {
            Program::Nats { .. } => Forced::Kill,
            // The Erlang VM's helpers are in its group.
            Program::RabbitMq(_) => Forced::KillGroup,
        };
        children::remember(pids, self.pid, forced);
        self.child = Some(child);
        let (within, ready) = match self.program {
            Program::Nats { .. } => (LISTEN_WITHIN, "Server is ready"),
            Program::RabbitMq(_) => (super::rabbitmq::BOOT_WITHIN, super::rabbitmq::READY_LINE),
        };
        let deadline = tokio::time::Instant::now() + within;
        while tokio::time::Instant::now() < deadline {
            // Its own word, not a probe: a connection that never speaks
            // TLS is logged by the server as a failed handshake.
            if said_ready(&self.log_path, from, ready) {
                return Ok(());
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.forget(pids);
                bail!(
                    "the broker {status} before it listened on {}; its log is {}",
                    self.addr,
                    self.log_path.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        bail!(
            "the broker did not listen on {} within {within:?}; its log is {}",
            self.addr,
            self.log_path.display()
        )
    }

    async fn exited(&mut self, pids: &PidCell) -> (std::io::Result<ExitStatus>, PathBuf) {
        let Some(child) = self.child.as_mut() else {
            return std::future::pending().await;
        };
        let status = child.wait().await;
        self.forget(pids);
        (status, self.log_path.clone())
    }

    async fn stop(&mut self, pids: &PidCell) {
        let Some(child) = self.child.as_mut() else {
            return;
        };
        match &self.program {
            Program::Nats { .. } => children::stop(child, libc::SIGTERM, STOP_GRACE).await,
            // Its script stops the VM on SIGTERM; what is left of its group
            // (the VM's helpers) goes after it.
            Program::RabbitMq(_) => {
                children::stop_group(child, libc::SIGTERM, super::rabbitmq::STOP_GRACE).await
            }
        }
        self.forget(pids);
    }

    /// Its pid out of the cell, and the child gone (reaped); RabbitMQ's
    /// port mapper with it.
    fn forget(&mut self, pids: &PidCell) {
        self.child = None;
        children::forget(pids, self.pid.take());
        if let Program::RabbitMq(r) = &mut self.program {
            r.stop_epmd(pids);
        }
    }
}

/// Whether the server's log, from byte `from` on, says it is ready.
fn said_ready(log: &Path, from: u64, ready: &str) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(log) else {
        return false;
    };
    let mut text = Vec::new();
    if f.seek(SeekFrom::Start(from)).is_err() || f.read_to_end(&mut text).is_err() {
        return false;
    }
    String::from_utf8_lossy(&text).contains(ready)
}

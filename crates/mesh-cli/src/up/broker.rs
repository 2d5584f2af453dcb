//! The broker `mesh up` starts and supervises: `nats-server` on the
//! genesis's configuration, in a process group of its own so a terminal's
//! Ctrl-C (sent to the whole foreground group) does not reach it — `mesh
//! up` stops it itself, last, once the host and the controller are done
//! with it — and always reaped, so no `<defunct>` is left.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, bail};
use mesh_controller::Genesis;
use tokio::process::{Child, Command};

/// How long the broker gets after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(4);

/// How long a start may take to listen.
const LISTEN_WITHIN: Duration = Duration::from_secs(5);

/// The pid of the running broker, for a forced stop that cannot wait for
/// the task holding the child. `None` once it was reaped: a reaped pid may
/// be handed to a stranger.
pub type PidCell = Arc<Mutex<Option<u32>>>;

pub struct Broker {
    nats: PathBuf,
    conf: PathBuf,
    log_path: PathBuf,
    addr: String,
    child: Option<Child>,
    pid: PidCell,
}

impl Broker {
    pub fn new(nats: &Path, genesis: &Genesis) -> Broker {
        Broker {
            nats: nats.to_path_buf(),
            conf: genesis.path(mesh_controller::genesis::BROKER_CONF),
            log_path: genesis.path("broker/nats.log"),
            addr: format!("127.0.0.1:{}", genesis.port),
            child: None,
            pid: PidCell::default(),
        }
    }

    pub fn pid_cell(&self) -> PidCell {
        self.pid.clone()
    }

    /// Starts it and returns once it accepts a TCP connection on its port.
    /// Cancelled (dropped) meanwhile, the process is kept here for
    /// [`Broker::stop`].
    pub async fn start(&mut self) -> anyhow::Result<()> {
        // A port another server holds would answer the readiness probe
        // below: this mesh would then enrol against someone else's broker
        // and fail on its certificate, far from the cause.
        if let Err(e) = std::net::TcpListener::bind(&self.addr)
            && e.kind() == std::io::ErrorKind::AddrInUse
        {
            bail!(
                "the broker's port {} is taken by another process (another mesh's broker?); stop it, or make this mesh in another directory with `mesh up --port P` (a new genesis takes its port)",
                self.addr
            );
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .with_context(|| format!("opening {}", self.log_path.display()))?;
        let child = Command::new(&self.nats)
            .arg("-c")
            .arg(&self.conf)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            // The broker must not outlive a `mesh up` that unwinds without
            // stopping it (its own group no longer ends it with ours).
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.nats.display()))?;
        *lock(&self.pid) = child.id();
        self.child = Some(child);
        let deadline = tokio::time::Instant::now() + LISTEN_WITHIN;
        while tokio::time::Instant::now() < deadline {
            if tokio::net::TcpStream::connect(&self.addr).await.is_ok() {
                return Ok(());
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                *lock(&self.pid) = None;
                bail!(
                    "the broker {status} before it listened on {}; its log is {}",
                    self.addr,
                    self.log_path.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        bail!(
            "the broker did not listen on {} within {LISTEN_WITHIN:?}; its log is {}",
            self.addr,
            self.log_path.display()
        )
    }

    /// Resolves when the running broker exits (reaped); never without one.
    pub async fn exited(&mut self) -> std::io::Result<ExitStatus> {
        let Some(child) = self.child.as_mut() else {
            return std::future::pending().await;
        };
        let status = child.wait().await;
        self.child = None;
        *lock(&self.pid) = None;
        status
    }

    /// SIGTERM, SIGKILL after [`STOP_GRACE`], and reaped.
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Some(pid) = child.id().and_then(|p| libc::pid_t::try_from(p).ok()) {
            // SAFETY: kill(2) on our own child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        if tokio::time::timeout(STOP_GRACE, child.wait())
            .await
            .is_err()
        {
            // kill() sends SIGKILL and waits: reaped either way.
            let _ = child.kill().await;
        }
        *lock(&self.pid) = None;
    }
}

fn lock(cell: &PidCell) -> std::sync::MutexGuard<'_, Option<u32>> {
    cell.lock().unwrap_or_else(|p| p.into_inner())
}

/// The broker's pid while it runs, for [`crate::shutdown::kill_and_reap`].
pub fn running(cell: &PidCell) -> Option<u32> {
    *lock(cell)
}

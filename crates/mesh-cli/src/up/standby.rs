//! `mesh up --ha`'s second controller: `mesh controller` on the same
//! store, a process of its own (so it can be killed alone, as a machine
//! lost), in a process group of its own (a terminal's Ctrl-C reaches it
//! only through `mesh up`, which stops it before the broker and the
//! store). Whichever of the two takes the store's lease first is active;
//! the other stands by.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use tokio::process::{Child, Command};

use super::broker::PidCell;

pub struct Standby {
    child: Child,
    pid: Option<u32>,
    pub log: PathBuf,
    pub http: Option<std::net::SocketAddr>,
}

impl Standby {
    /// Starts `mesh controller --dir DIR` on the store `dir/store.url`
    /// names, serving HTTP on a free loopback port unless `no_http`.
    pub fn start(dir: &Path, no_http: bool, pids: &PidCell) -> anyhow::Result<Standby> {
        let exe = std::env::current_exe().context("finding this mesh binary")?;
        let log = dir.join("controller-2.log");
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("opening {}", log.display()))?;
        let http = match no_http {
            true => None,
            false => std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .ok(),
        };
        let mut cmd = Command::new(exe);
        cmd.arg("controller")
            .arg("--dir")
            .arg(dir)
            .arg("--store-file")
            .arg(dir.join(super::postgres::STORE_URL_FILE));
        match http {
            Some(addr) => cmd.arg("--http").arg(addr.to_string()),
            None => cmd.arg("--no-http"),
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .context("starting the second controller")?;
        let pid = child.id();
        pids.lock().unwrap_or_else(|p| p.into_inner()).extend(pid);
        Ok(Standby {
            child,
            pid,
            log,
            http,
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// SIGTERM, SIGKILL after `grace`, reaped.
    pub async fn stop(&mut self, grace: Duration, pids: &PidCell) {
        if let Some(pid) = self.child.id().and_then(|p| libc::pid_t::try_from(p).ok()) {
            // SAFETY: kill(2) on our own child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        if tokio::time::timeout(grace, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
        if let Some(pid) = self.pid.take() {
            pids.lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|p| *p != pid);
        }
    }
}

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

use super::children::{self, Forced, PidCell};

pub struct Standby {
    /// None once it exited, until started again.
    child: Option<Child>,
    pid: Option<u32>,
    dir: PathBuf,
    no_http: bool,
    pub log: PathBuf,
    pub http: Option<std::net::SocketAddr>,
}

impl Standby {
    /// Starts `mesh controller --dir DIR` on the store `dir/store.url`
    /// names, serving HTTP on a free loopback port unless `no_http`.
    pub fn start(dir: &Path, no_http: bool, pids: &PidCell) -> anyhow::Result<Standby> {
        let mut s = Standby {
            child: None,
            pid: None,
            dir: dir.to_path_buf(),
            no_http,
            log: dir.join("controller-2.log"),
            http: None,
        };
        s.start_again(pids)?;
        Ok(s)
    }

    /// Starts it again once it exited (on another free port).
    pub fn start_again(&mut self, pids: &PidCell) -> anyhow::Result<()> {
        if self.child.is_some() {
            return Ok(());
        }
        let exe = std::env::current_exe().context("finding this mesh binary")?;
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        self.http = match self.no_http {
            true => None,
            false => std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .ok(),
        };
        let mut cmd = Command::new(exe);
        cmd.arg("controller")
            .arg("--dir")
            .arg(&self.dir)
            .arg("--store-file")
            .arg(self.dir.join(super::postgres::STORE_URL_FILE));
        match self.http {
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
        self.pid = child.id();
        children::remember(pids, self.pid, Forced::Kill);
        self.child = Some(child);
        Ok(())
    }

    /// Resolves when it exits (reaped); never while it is not running.
    pub async fn exited(&mut self, pids: &PidCell) -> std::io::Result<std::process::ExitStatus> {
        let Some(child) = self.child.as_mut() else {
            return std::future::pending().await;
        };
        let status = child.wait().await;
        self.forget(pids);
        status
    }

    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// SIGTERM, SIGKILL after `grace`, reaped.
    pub async fn stop(&mut self, grace: Duration, pids: &PidCell) {
        let Some(child) = self.child.as_mut() else {
            return;
        };
        children::stop(child, libc::SIGTERM, grace).await;
        self.forget(pids);
    }

    fn forget(&mut self, pids: &PidCell) {
        self.child = None;
        children::forget(pids, self.pid.take());
    }
}

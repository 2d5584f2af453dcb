//! A nats-server on a configuration the code under test wrote (a genesis's
//! `nats.conf`): started, restarted, signalled, and killed on drop.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::TestkitError;
use crate::error::io;
use crate::locate::nats_server_binary;
use crate::process::{signal, stop_child, wait_ready};

const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A port nothing listens on now, for a configuration written before its
/// server starts (genesis takes `--port`).
pub fn free_port() -> Result<u16, TestkitError> {
    crate::process::free_port()
}

#[derive(Debug)]
pub struct Broker {
    child: Child,
    conf: PathBuf,
    log: PathBuf,
    starts: u32,
}

impl Broker {
    /// Runs `nats-server -c conf`, its log (stderr) in `log`, and waits for
    /// "Server is ready".
    pub fn start(conf: &Path, log: &Path) -> Result<Broker, TestkitError> {
        let mut b = Broker {
            child: spawn(conf, log)?,
            conf: conf.to_path_buf(),
            log: log.to_path_buf(),
            starts: 1,
        };
        b.wait_ready(1)?;
        Ok(b)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the server logged, across restarts.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGHUP: a reload of the configuration and of the files it includes.
    pub fn reload(&self) {
        signal(self.pid(), libc::SIGHUP);
    }

    /// SIGKILL, as a machine lost: no chance to tell its cluster anything.
    /// [`Broker::start_again`] brings it back.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts a killed (or stopped) server again on its configuration.
    pub fn start_again(&mut self) -> Result<(), TestkitError> {
        if let Ok(None) = self.child.try_wait() {
            stop_child(&mut self.child, libc::SIGTERM, Duration::from_secs(10));
        }
        self.child = spawn(&self.conf, &self.log)?;
        self.starts += 1;
        self.wait_ready(self.starts)
    }

    /// Stops the server (SIGTERM) and starts it on the same configuration.
    pub fn restart(&mut self) -> Result<(), TestkitError> {
        stop_child(&mut self.child, libc::SIGTERM, Duration::from_secs(10));
        self.child = spawn(&self.conf, &self.log)?;
        self.starts += 1;
        self.wait_ready(self.starts)
    }

    /// Stops the server, runs `meanwhile` (a wiped store, say), and starts
    /// it again on the same configuration.
    pub fn stop_for(&mut self, meanwhile: impl FnOnce()) {
        stop_child(&mut self.child, libc::SIGTERM, Duration::from_secs(10));
        meanwhile();
        self.child = spawn(&self.conf, &self.log).expect("start the broker again");
        self.starts += 1;
        let n = self.starts;
        self.wait_ready(n).expect("the broker is ready again");
    }

    /// Waits for the `n`th "Server is ready" in the log (the log is
    /// appended across restarts).
    fn wait_ready(&mut self, n: u32) -> Result<(), TestkitError> {
        let log = self.log.clone();
        let child = &mut self.child;
        wait_ready(
            "nats-server",
            READY_TIMEOUT,
            Duration::from_millis(20),
            &log,
            || child.try_wait().ok().flatten(),
            || {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                (text.matches("Server is ready").count() >= n as usize).then_some(())
            },
        )
    }
}

fn spawn(conf: &Path, log: &Path) -> Result<Child, TestkitError> {
    let bin = nats_server_binary()?;
    let out = File::options()
        .create(true)
        .append(true)
        .open(log)
        .map_err(io(format!("open {}", log.display())))?;
    let err = out.try_clone().map_err(io("duplicate the log file"))?;
    Command::new(&bin)
        .arg("-c")
        .arg(conf)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(io(format!("start {}", bin.display())))
}

impl Drop for Broker {
    fn drop(&mut self) {
        stop_child(&mut self.child, libc::SIGKILL, Duration::from_secs(5));
    }
}

//! A NATS cluster on configurations the code under test wrote (a genesis's
//! `nats-1.conf` … `nats-N.conf`): every server started, each killed on drop.

use std::net::TcpListener;
use std::path::{Path, PathBuf};

use crate::error::io;
use crate::{Broker, TestkitError};

/// The first of `n` consecutive ports nothing listens on now, for a
/// configuration that numbers its servers' ports from one (a genesis of
/// several servers on one machine). Each is held while the others are
/// tried, so the run is free as a whole when returned. Taken below the
/// kernel's ephemeral range: a port the kernel hands out as an outgoing
/// connection's own was taken by one while its server was down, and the
/// server could not listen on it again.
pub fn free_port_run(n: u16) -> Result<u16, TestkitError> {
    const LOWEST: u32 = 10_000;
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let span = ephemeral.saturating_sub(LOWEST + u32::from(n)).max(1);
    for _ in 0..200 {
        // Spread over the span: tests of several processes pick at once.
        let Ok(first) = u16::try_from(LOWEST + rand::random_range(0..span)) else {
            continue;
        };
        let held: Vec<TcpListener> = (first..first + n)
            .map_while(|p| TcpListener::bind(("127.0.0.1", p)).ok())
            .collect();
        if held.len() == usize::from(n) {
            return Ok(first);
        }
    }
    Err(io(format!("find {n} consecutive free ports"))(
        std::io::Error::from(std::io::ErrorKind::AddrInUse),
    ))
}

/// The servers of a cluster, in the order of their configurations.
#[derive(Debug)]
pub struct Cluster {
    servers: Vec<Broker>,
    logs: Vec<PathBuf>,
}

impl Cluster {
    /// Starts `nats-server -c conf` for each configuration, its log in
    /// `log_dir/server-<i>.log` (1-based), each waited for until ready.
    /// A server that fails to start stops the ones already started.
    pub fn start(confs: &[PathBuf], log_dir: &Path) -> Result<Cluster, TestkitError> {
        let mut cluster = Cluster {
            servers: Vec::new(),
            logs: Vec::new(),
        };
        for (i, conf) in confs.iter().enumerate() {
            let log = log_dir.join(format!("server-{}.log", i + 1));
            cluster.servers.push(Broker::start(conf, &log)?);
            cluster.logs.push(log);
        }
        Ok(cluster)
    }

    pub fn servers(&self) -> &[Broker] {
        &self.servers
    }

    /// Every server's log, each headed by its file's name: what a failed
    /// test shows.
    pub fn logs(&self) -> String {
        self.logs
            .iter()
            .map(|l| {
                let text = std::fs::read_to_string(l).unwrap_or_default();
                format!("== {}\n{text}", l.display())
            })
            .collect()
    }
}

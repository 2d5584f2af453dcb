//! What the bench prints in its header, and the small measurements it takes
//! of processes: the machine (cores, memory, CPU, kernel), the versions of
//! what it ran, a process's resident set.

use std::path::Path;

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cores: usize,
    pub memory_bytes: u64,
    pub cpu: String,
    pub kernel: String,
    /// `/proc/loadavg`'s three averages when the bench started.
    pub load_at_start: String,
}

impl Machine {
    pub fn read() -> Machine {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let memory_bytes = proc_field("/proc/meminfo", "MemTotal:").unwrap_or(0) * 1024;
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown CPU".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| format!("Linux {}", s.trim()))
            .unwrap_or_else(|_| std::env::consts::OS.to_string());
        let load_at_start = std::fs::read_to_string("/proc/loadavg")
            .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_default();
        Machine {
            load_at_start,
            cores,
            memory_bytes,
            cpu,
            kernel,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Versions {
    pub mesh: String,
    pub nats_server: String,
    /// The store the mesh ran on, as it names itself.
    pub store: String,
    /// SQLite's and PostgreSQL's, from the ingestion runs.
    pub ingestion: Vec<String>,
}

/// `nats-server --version`, e.g. `v2.12.8`.
pub fn nats_version(nats: &Path) -> String {
    std::process::Command::new(nats)
        .arg("--version")
        .output()
        .ok()
        .map(|o| {
            let text = String::from_utf8_lossy(&o.stdout);
            text.split_whitespace().last().unwrap_or("?").to_string()
        })
        .unwrap_or_else(|| "?".into())
}

/// A `kB` field of a `/proc` file (`VmRSS:`, `MemTotal:`).
fn proc_field(path: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A process's resident set now and at its peak, in bytes.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Rss {
    pub now: u64,
    pub peak: u64,
}

pub fn rss(pid: u32) -> Rss {
    let path = format!("/proc/{pid}/status");
    Rss {
        now: proc_field(&path, "VmRSS:").unwrap_or(0) * 1024,
        peak: proc_field(&path, "VmHWM:").unwrap_or(0) * 1024,
    }
}

pub fn own_rss() -> Rss {
    rss(std::process::id())
}

/// Bytes that can still be written under `dir`: its filesystem's free
/// space, and on tmpfs no more than the memory available (its pages are
/// memory). `None` when it cannot be read.
pub fn room(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt as _;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statfs(2) with a NUL-terminated path and a zeroed struct of
    // its own type, read only when it succeeded.
    let s = unsafe {
        let mut s: libc::statfs = std::mem::zeroed();
        if libc::statfs(path.as_ptr(), &mut s) != 0 {
            return None;
        }
        s
    };
    let free = s
        .f_bavail
        .saturating_mul(u64::try_from(s.f_bsize).unwrap_or(0));
    if s.f_type == libc::TMPFS_MAGIC {
        let available = proc_field("/proc/meminfo", "MemAvailable:")? * 1024;
        return Some(free.min(available));
    }
    Some(free)
}

/// Raises this process's open-file limit to its hard limit: 10,000 hosts
/// are 10,000 connections here and 10,000 at the broker (which inherits it).
pub fn raise_fd_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit on our own process with a valid struct.
    unsafe {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) != 0 {
            return 0;
        }
        l.rlim_cur = l.rlim_max;
        let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        l.rlim_cur
    }
}

/// Samples a process's resident set every 250 ms, keeping the peak seen in
/// each phase the bench names (what the controller holds while it
/// composes, recovers, or idles).
pub struct RssSampler {
    phase: std::sync::Arc<std::sync::Mutex<&'static str>>,
    peaks: std::sync::Arc<std::sync::Mutex<Vec<(&'static str, u64)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RssSampler {
    pub fn start(pid: u32, phase: &'static str) -> RssSampler {
        let phase = std::sync::Arc::new(std::sync::Mutex::new(phase));
        let peaks = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(&'static str, u64)>::new()));
        let task = tokio::spawn({
            let (phase, peaks) = (phase.clone(), peaks.clone());
            async move {
                loop {
                    {
                        let now = rss(pid).now;
                        let p = *phase.lock().unwrap_or_else(|e| e.into_inner());
                        let mut peaks = peaks.lock().unwrap_or_else(|e| e.into_inner());
                        match peaks.iter_mut().find(|(q, _)| *q == p) {
                            Some((_, peak)) => *peak = (*peak).max(now),
                            None => peaks.push((p, now)),
                        }
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
                }
            }
        });
        RssSampler { phase, peaks, task }
    }

    pub fn phase(&self, p: &'static str) {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner()) = p;
    }

    /// Each phase with its peak, in the order they began.
    pub fn stop(self) -> Vec<(String, u64)> {
        self.task.abort();
        let peaks = self.peaks.lock().unwrap_or_else(|e| e.into_inner());
        peaks.iter().map(|(p, b)| (p.to_string(), *b)).collect()
    }
}

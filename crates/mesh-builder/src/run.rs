//! Running `[build] command`: in the checkout, with a clean environment,
//! in a process group of its own (a time limit kills everything it forked),
//! its output into the build's log.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use mesh_core::names::Name;
use sha2::{Digest as _, Sha256};
use tokio::process::Command;

/// What the build's command did: its log, and why it failed if it did.
pub struct Ran {
    pub log: String,
    pub failure: Option<String>,
}

/// Variables a build inherits from the build machine when set: where the
/// toolchains are. Nothing else of the build machine's environment reaches
/// a build — least of all `MESH_NKEY_FILE`, its credential's path.
const INHERITED: [&str; 3] = ["PATH", "CARGO_HOME", "RUSTUP_HOME"];

/// The whole environment of a build: [`INHERITED`] when set, HOME and
/// TMPDIR in the cache (kept between builds), `LANG=C.UTF-8`, and the
/// module and version being built.
pub fn environment(cache: &Path, module: &Name, version: &str) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for name in INHERITED {
        if let Ok(v) = std::env::var(name) {
            env.insert(name.to_string(), v);
        }
    }
    env.insert("HOME".into(), cache.join("home").display().to_string());
    env.insert("TMPDIR".into(), cache.join("tmp").display().to_string());
    env.insert("LANG".into(), "C.UTF-8".into());
    env.insert("MESH_BUILD_MODULE".into(), module.to_string());
    env.insert("MESH_BUILD_VERSION".into(), version.to_string());
    env
}

/// Runs `command` in `dir` with exactly `env`, its output (both streams)
/// into `log`, killed with its whole group after `limit`.
pub async fn run(
    command: &[String],
    dir: &Path,
    log: &Path,
    env: &BTreeMap<String, String>,
    limit: Duration,
) -> Ran {
    let Some((program, args)) = command.split_first() else {
        return Ran {
            log: String::new(),
            failure: Some("[build] command is empty".into()),
        };
    };
    let file = match std::fs::File::create(log) {
        Ok(f) => f,
        Err(e) => {
            return Ran {
                log: String::new(),
                failure: Some(format!("could not write the build's log: {e}")),
            };
        }
    };
    let (out, err) = match (file.try_clone(), file.try_clone()) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            return Ran {
                log: String::new(),
                failure: Some(format!("could not write the build's log: {e}")),
            };
        }
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(env)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Ran {
                log: String::new(),
                failure: Some(format!("could not start {program}: {e}")),
            };
        }
    };
    let pid = child.id();
    let _running = Running::add(pid);
    let failure = match tokio::time::timeout(limit, child.wait()).await {
        Ok(Ok(status)) if status.success() => None,
        Ok(Ok(status)) => Some(format!("{} exited with {status}", command.join(" "))),
        Ok(Err(e)) => Some(format!("could not wait for {program}: {e}")),
        Err(_) => {
            kill_group(pid);
            let _ = child.wait().await;
            Some(format!(
                "the build ran longer than its time limit ({}s) and was killed",
                limit.as_secs()
            ))
        }
    };
    // Whatever the build's children still hold open is theirs no longer.
    kill_group(pid);
    Ran {
        log: read_end(log),
        failure,
    }
}

/// The process groups of the builds running now: what [`stop_all`] kills
/// when the build machine is stopped (its own group, which the host
/// signals, does not hold them).
static RUNNING: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

struct Running(Option<u32>);

impl Running {
    fn add(pid: Option<u32>) -> Running {
        if let Some(p) = pid {
            RUNNING.lock().unwrap_or_else(|e| e.into_inner()).push(p);
        }
        Running(pid)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(p) = self.0 {
            RUNNING
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|x| *x != p);
        }
    }
}

/// Kills every running build with all it forked: the build machine is
/// stopping, and an unfinished build comes round again to whoever takes it.
pub fn stop_all() {
    let pids = std::mem::take(&mut *RUNNING.lock().unwrap_or_else(|e| e.into_inner()));
    for p in pids {
        kill_group(Some(p));
    }
}

fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        // SAFETY: signalling a process group we created; no memory involved.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}

/// The end of the log (enough for any tail), as text.
fn read_end(path: &Path) -> String {
    use std::io::{Seek as _, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

/// Lowercase hex SHA-256 of a file, read in blocks.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(hex::encode(h.finalize()));
        }
        h.update(&buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    #[tokio::test]
    async fn a_build_sees_only_its_clean_environment() {
        let dir = tempfile::tempdir().unwrap();
        let env = environment(dir.path(), &Name::new("m").unwrap(), "abc");
        assert!(!env.contains_key("MESH_NKEY_FILE"));
        let ran = run(
            &sh("env | sort; echo to-stderr >&2"),
            dir.path(),
            &dir.path().join("log"),
            &env,
            Duration::from_secs(30),
        )
        .await;
        assert_eq!(ran.failure, None);
        let names: Vec<&str> = ran
            .log
            .lines()
            .filter_map(|l| l.split_once('=').map(|(n, _)| n))
            .filter(|n| *n != "PWD" && *n != "SHLVL" && *n != "_")
            .collect();
        for n in &names {
            assert!(
                env.contains_key(*n),
                "{n} leaked into the build: {}",
                ran.log
            );
        }
        assert!(ran.log.contains("MESH_BUILD_VERSION=abc"), "{}", ran.log);
        assert!(ran.log.contains("to-stderr"), "stderr is logged");
    }

    #[tokio::test]
    async fn a_failing_build_says_its_status_and_keeps_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let env = environment(dir.path(), &Name::new("m").unwrap(), "abc");
        let ran = run(
            &sh("echo broken; exit 3"),
            dir.path(),
            &dir.path().join("log"),
            &env,
            Duration::from_secs(30),
        )
        .await;
        assert!(
            ran.failure.as_deref().unwrap().contains("exit status: 3"),
            "{:?}",
            ran.failure
        );
        assert_eq!(ran.log.trim(), "broken");
    }

    #[tokio::test]
    async fn a_build_past_its_limit_is_killed_with_what_it_forked() {
        let dir = tempfile::tempdir().unwrap();
        let env = environment(dir.path(), &Name::new("m").unwrap(), "abc");
        let pidfile = dir.path().join("child.pid");
        let script = format!("sleep 300 & echo $! > {}; wait", pidfile.display());
        let ran = run(
            &sh(&script),
            dir.path(),
            &dir.path().join("log"),
            &env,
            Duration::from_millis(500),
        )
        .await;
        assert!(
            ran.failure.as_deref().unwrap().contains("time limit"),
            "{:?}",
            ran.failure
        );
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The grandchild went with its group: signal 0 finds no process
        // (a zombie reaped by init may linger an instant).
        let mut gone = false;
        for _ in 0..50 {
            let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| !s.contains(") Z "))
                .unwrap_or(false);
            if !alive {
                gone = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(gone, "the build's child {pid} outlived the time limit");
    }
}

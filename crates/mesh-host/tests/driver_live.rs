//! The process driver with real processes (`sh -c`, `sleep`): groups,
//! logs, stopping within and after the grace, restarts with backoff, the
//! `failed` report, and a host killed and started again.
//!
//! Some containers run an init that does not reap orphans; a process
//! reparented there stays a zombie, which is dead (it holds only its exit
//! status), so [`gone`] accepts it. The driver's own children are reaped by
//! the driver and checked to be absent from `/proc` outright.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mesh_core::names::Name;
use mesh_host::driver::{
    Driver, DriverOptions, ModuleState, ModuleStatus, PID_FILE, PidRecord, RunSpec,
};

const MARKER: &str = "MESH_DRIVER_TEST_MARKER";
const HELPER_DIR: &str = "MESH_DRIVER_TEST_HOST_DIR";
/// The marker handed to the helper host under another name, so the host
/// process itself is not counted as one of its module's processes.
const HELPER_MARKER: &str = "MESH_DRIVER_TEST_HOST_MARKER";

fn name(s: &str) -> Name {
    Name::new(s).unwrap()
}

fn opts() -> DriverOptions {
    DriverOptions {
        backoff_start: Duration::from_millis(100),
        backoff_max: Duration::from_millis(800),
        reset_after: Duration::from_secs(30),
        failed_after: 3,
        running_after: Duration::from_millis(300),
        leftover_grace: Duration::from_secs(2),
        ..DriverOptions::default()
    }
}

fn unique() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{}-{nanos}", std::process::id())
}

fn spec(dir: &Path, module: &str, command: &[&str], marker: &str) -> RunSpec {
    RunSpec {
        module: name(module),
        command: command.iter().map(|s| s.to_string()).collect(),
        env: BTreeMap::from([(MARKER.to_string(), marker.to_string())]),
        stop_grace: Duration::from_secs(5),
        workdir: dir.join("work").join(module),
        container: None,
    }
}

fn sh(dir: &Path, module: &str, script: &str, marker: &str) -> RunSpec {
    spec(dir, module, &["sh", "-c", script], marker)
}

/// Kills the groups it was given when the test ends, passed or not, so a
/// failing assertion leaves no process behind.
#[derive(Default)]
struct Reap(Vec<u32>);

impl Drop for Reap {
    fn drop(&mut self) {
        for &pgid in &self.0 {
            if pgid > 1 {
                // SAFETY: plain integers; the group is one this test made.
                unsafe { libc::kill(-(pgid as i32), libc::SIGKILL) };
            }
        }
    }
}

fn stat_state(pid: u32) -> Option<char> {
    let line = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    line.rsplit_once(')')?
        .1
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// Dead: absent from `/proc`, or a zombie waiting for a parent to reap it.
fn gone(pid: u32) -> bool {
    matches!(stat_state(pid), None | Some('Z') | Some('X'))
}

fn absent(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

async fn eventually(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let until = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < until, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn status(driver: &Driver, module: &str) -> ModuleStatus {
    driver
        .status()
        .into_iter()
        .find(|s| s.module.as_str() == module)
        .unwrap_or_else(|| panic!("no status for {module}"))
}

async fn wait_state(driver: &Driver, module: &str, state: ModuleState) -> ModuleStatus {
    let mut changes = driver.watch();
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let s = status(driver, module);
        if s.state == state {
            return s;
        }
        let left = until.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "{module} never became {state:?}: {s:?}");
        let _ = tokio::time::timeout(left, changes.changed()).await;
    }
}

fn count_marked(marker: &str) -> usize {
    marked(marker).len()
}

/// Live processes whose environment carries `MARKER=marker`.
fn marked(marker: &str) -> Vec<u32> {
    let needle = format!("{MARKER}={marker}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| !gone(pid))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|env| String::from_utf8_lossy(&env).contains(&needle))
                .unwrap_or(false)
        })
        .collect()
}

fn getpgid(pid: u32) -> i32 {
    // SAFETY: plain integer in and out.
    unsafe { libc::getpgid(pid as i32) }
}

#[tokio::test]
async fn a_module_runs_alone_in_its_group_logs_and_stops_within_its_grace() {
    let dir = tempfile::tempdir().unwrap();
    let mut reap = Reap::default();
    let driver = Driver::new(dir.path(), opts()).await.unwrap();
    let marker = unique();
    let script = "echo hi; echo \"home=${HOME-unset} marker=$MESH_DRIVER_TEST_MARKER\"; sleep 600";
    driver
        .start(sh(dir.path(), "web", script, &marker))
        .await
        .unwrap();
    let pid = driver.pid(&name("web")).expect("a pid once started");
    reap.0.push(pid);
    let running = wait_state(&driver, "web", ModuleState::Running).await;
    assert_eq!(
        (running.pid, running.restarts, running.reason),
        (Some(pid), 0, None)
    );

    assert_eq!(getpgid(pid), pid as i32, "the module leads its own group");
    assert_ne!(getpgid(pid), getpgid(std::process::id()));
    let module_dir = dir.path().join("modules").join("web");
    let record = std::fs::read_to_string(module_dir.join(PID_FILE)).unwrap();
    assert_eq!(PidRecord::parse(&record), PidRecord::of(pid));
    let log = module_dir.join("log");
    eventually("the log holds the output", Duration::from_secs(5), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("marker="))
    })
    .await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.starts_with("hi\n"), "{text:?}");
    // Only the declared env (plus PATH): the test's HOME is not passed on.
    assert!(
        text.contains(&format!("home=unset marker={marker}")),
        "{text:?}"
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&log), 0o600);
    assert_eq!(mode(&module_dir), 0o700);
    assert_eq!(mode(&dir.path().join("work").join("web")), 0o700);

    // Starting the same spec again changes nothing.
    driver
        .start(sh(dir.path(), "web", script, &marker))
        .await
        .unwrap();
    assert_eq!(driver.pid(&name("web")), Some(pid));

    let t = Instant::now();
    let exit = driver
        .stop(&name("web"))
        .await
        .unwrap()
        .expect("it was running");
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(exit.signal, Some(libc::SIGTERM), "{exit:?}");
    assert!(absent(pid), "the driver reaped its child");
    assert!(
        !module_dir.join(PID_FILE).exists(),
        "the pid record is removed"
    );
    let stopped = status(&driver, "web");
    assert_eq!((stopped.state, stopped.pid), (ModuleState::Stopped, None));
    assert_eq!(count_marked(&marker), 0);
    assert_eq!(driver.stop(&name("web")).await.unwrap(), None);
}

#[tokio::test]
async fn a_module_ignoring_term_is_killed_once_its_grace_passed() {
    let dir = tempfile::tempdir().unwrap();
    let mut reap = Reap::default();
    let driver = Driver::new(dir.path(), opts()).await.unwrap();
    let marker = unique();
    // An ignored signal stays ignored across exec: sleep ignores it too.
    let mut s = sh(
        dir.path(),
        "stubborn",
        "trap '' TERM; echo ready; sleep 600",
        &marker,
    );
    s.stop_grace = Duration::from_secs(1);
    driver.start(s).await.unwrap();
    let pid = driver.pid(&name("stubborn")).unwrap();
    reap.0.push(pid);
    let log = dir.path().join("modules/stubborn/log");
    eventually("the trap is set", Duration::from_secs(5), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("ready"))
    })
    .await;
    let t = Instant::now();
    let exit = driver.stop(&name("stubborn")).await.unwrap().unwrap();
    let took = t.elapsed();
    assert!(
        took >= Duration::from_secs(1),
        "killed before the grace: {took:?}"
    );
    assert!(took < Duration::from_secs(4), "took {took:?}");
    assert_eq!(exit.signal, Some(libc::SIGKILL), "{exit:?}");
    assert!(absent(pid));
    assert_eq!(count_marked(&marker), 0, "sleep went with the group");
}

#[tokio::test]
async fn a_crashing_module_is_restarted_with_growing_delays_and_reported_failed() {
    let dir = tempfile::tempdir().unwrap();
    let driver = Driver::new(dir.path(), opts()).await.unwrap();
    let marker = unique();
    let script = "echo starting; printf 'boom\\033[31m\\n' >&2; exit 3";
    driver
        .start(sh(dir.path(), "crash", script, &marker))
        .await
        .unwrap();

    // The instant each new run is seen: restarts counts spawns.
    let mut spawns = vec![Instant::now()];
    let mut changes = driver.watch();
    let until = Instant::now() + Duration::from_secs(10);
    while spawns.len() < 5 {
        assert!(Instant::now() < until, "{:?}", status(&driver, "crash"));
        let _ = tokio::time::timeout(Duration::from_millis(50), changes.changed()).await;
        let restarts = status(&driver, "crash").restarts as usize;
        while spawns.len() <= restarts {
            spawns.push(Instant::now());
        }
    }
    let gaps: Vec<Duration> = spawns.windows(2).map(|w| w[1] - w[0]).collect();
    // 100, 200, 400, 800 ms (the cap): each wait at least its step, and
    // later ones clearly longer than the first.
    for (gap, least) in gaps.iter().zip([100, 200, 400, 800]) {
        assert!(*gap >= Duration::from_millis(least - 20), "{gaps:?}");
    }
    assert!(gaps[3] > gaps[0] * 2, "{gaps:?}");

    let failed = wait_state(&driver, "crash", ModuleState::Failed).await;
    let reason = failed.reason.clone().unwrap();
    assert!(reason.contains("exited with status 3"), "{reason}");
    assert!(reason.contains("boom"), "{reason}");
    assert!(
        reason.contains("starting | boom\\u{1b}[31m"),
        "escaped: {reason}"
    );
    assert!(!reason.chars().any(char::is_control), "{reason:?}");
    // Still retried, still failed.
    let later = failed.restarts + 1;
    eventually("another retry", Duration::from_secs(5), || {
        status(&driver, "crash").restarts >= later
    })
    .await;
    assert_eq!(status(&driver, "crash").state, ModuleState::Failed);

    driver.stop(&name("crash")).await.unwrap();
    assert_eq!(status(&driver, "crash").state, ModuleState::Stopped);
    assert!(!dir.path().join("modules/crash").join(PID_FILE).exists());
}

#[tokio::test]
async fn a_program_that_cannot_be_spawned_is_failed_with_the_reason_and_retried() {
    let dir = tempfile::tempdir().unwrap();
    let driver = Driver::new(dir.path(), opts()).await.unwrap();
    let marker = unique();
    for (module, program) in [
        ("absolute", "/nonexistent/prog"),
        ("onpath", "no-such-program-here"),
    ] {
        driver
            .start(spec(dir.path(), module, &[program, "arg"], &marker))
            .await
            .unwrap();
    }
    for (module, program) in [
        ("absolute", "/nonexistent/prog"),
        ("onpath", "no-such-program-here"),
    ] {
        let failed = wait_state(&driver, module, ModuleState::Failed).await;
        let reason = failed.reason.unwrap();
        assert!(
            reason.starts_with(&format!("could not start {program:?}:")),
            "{reason}"
        );
        assert!(reason.contains("No such file"), "{reason}");
        assert!(failed.restarts >= 2, "retried: {}", failed.restarts);
        assert_eq!(failed.pid, None);
    }
    assert_eq!(driver.stop(&name("absolute")).await.unwrap(), None);
    driver.stop_all().await;
    assert!(
        driver
            .status()
            .iter()
            .all(|s| s.state == ModuleState::Stopped)
    );
    // An empty command is refused up front.
    let err = driver
        .start(spec(dir.path(), "empty", &[], &marker))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "module empty has an empty command; declare the program to run"
    );
}

#[tokio::test]
async fn background_children_go_with_their_group() {
    let dir = tempfile::tempdir().unwrap();
    let mut reap = Reap::default();
    let driver = Driver::new(dir.path(), opts()).await.unwrap();
    let marker = unique();
    let child_of = |module: &str| -> Option<u32> {
        let path = dir.path().join("work").join(module).join("child");
        std::fs::read_to_string(path).ok()?.trim().parse().ok()
    };

    // Stopped: the background sleep dies with its leader.
    let script = "sleep 600 & echo $! > child.tmp && mv child.tmp child; sleep 600";
    driver
        .start(sh(dir.path(), "pair", script, &marker))
        .await
        .unwrap();
    let leader = driver.pid(&name("pair")).unwrap();
    reap.0.push(leader);
    eventually("the child pid", Duration::from_secs(5), || {
        child_of("pair").is_some()
    })
    .await;
    let child = child_of("pair").unwrap();
    assert_eq!(
        getpgid(child),
        leader as i32,
        "the child is in the module's group"
    );
    driver.stop(&name("pair")).await.unwrap();
    assert!(absent(leader));
    assert!(gone(child), "the background child was killed");

    // Exited by itself: what it left in the group is killed before the
    // restart, so runs never pile up.
    let script = "sleep 600 & echo $! > child.tmp && mv child.tmp child; sleep 0.2; exit 1";
    driver
        .start(sh(dir.path(), "leaver", script, &marker))
        .await
        .unwrap();
    let first = driver.pid(&name("leaver")).unwrap();
    reap.0.push(first);
    eventually("the first child", Duration::from_secs(5), || {
        child_of("leaver").is_some()
    })
    .await;
    let first_child = child_of("leaver").unwrap();
    eventually("a restart", Duration::from_secs(5), || {
        status(&driver, "leaver").restarts >= 1
    })
    .await;
    assert!(
        gone(first_child),
        "the first run's child was killed on its exit"
    );
    let current = driver.pid(&name("leaver"));
    reap.0.extend(current);
    // Every live process of the module is the current run's; one that is
    // not either belongs to an earlier run or is just exiting.
    for pid in marked(&marker) {
        let group = getpgid(pid);
        assert!(
            current.is_some_and(|c| group == c as i32) || gone(pid),
            "{pid} in group {group} beside the current run {current:?}"
        );
    }
    driver.stop_all().await;
    assert_eq!(count_marked(&marker), 0);
}

/// Not a test of its own: run as a child process by
/// `a_killed_host_leaves_nothing_the_next_driver_does_not_kill`, it plays a
/// host that gets SIGKILLed while its module runs.
#[tokio::test]
async fn helper_host_process() {
    let Ok(dir) = std::env::var(HELPER_DIR) else {
        return;
    };
    let marker = std::env::var(HELPER_MARKER).unwrap();
    let dir = PathBuf::from(dir);
    let driver = Driver::new(&dir, opts()).await.unwrap();
    driver
        .start(spec(&dir, "kept", &["sleep", "600"], &marker))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(600)).await;
}

#[tokio::test]
async fn a_killed_host_leaves_nothing_the_next_driver_does_not_kill() {
    let dir = tempfile::tempdir().unwrap();
    let mut reap = Reap::default();
    let marker = unique();
    let mut host = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "helper_host_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_DIR, dir.path())
        .env(HELPER_MARKER, &marker)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let record_path = dir.path().join("modules/kept").join(PID_FILE);
    let record = || PidRecord::parse(&std::fs::read_to_string(&record_path).ok()?);
    let until = Instant::now() + Duration::from_secs(20);
    while record().is_none() || count_marked(&marker) != 1 {
        if Instant::now() > until {
            let _ = host.kill();
            let _ = host.wait();
            panic!("the helper host never started its module");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let old = record().unwrap();
    reap.0.push(old.pid);
    host.kill().unwrap();
    host.wait().unwrap();
    assert!(!gone(old.pid), "the module outlived its host");
    assert_eq!(PidRecord::of(old.pid), Some(old));

    let driver = Driver::new(dir.path(), opts()).await.unwrap();
    assert!(gone(old.pid), "the leftover was killed");
    assert!(!record_path.exists(), "its record is cleared");
    assert_eq!(count_marked(&marker), 0);

    driver
        .start(spec(dir.path(), "kept", &["sleep", "600"], &marker))
        .await
        .unwrap();
    reap.0.push(driver.pid(&name("kept")).unwrap());
    wait_state(&driver, "kept", ModuleState::Running).await;
    assert_eq!(
        count_marked(&marker),
        1,
        "exactly one process for the module"
    );
    driver.stop_all().await;
    assert_eq!(count_marked(&marker), 0);
}

#[tokio::test]
async fn a_recorded_pid_now_used_by_another_process_is_not_killed() {
    use std::os::unix::process::CommandExt as _;
    let dir = tempfile::tempdir().unwrap();
    let mut reap = Reap::default();
    // A stranger leading its own group, as a module would.
    let mut stranger = std::process::Command::new("sleep")
        .arg("600")
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = stranger.id();
    reap.0.push(pid);
    let real = PidRecord::of(pid).unwrap();
    let write = |module: &str, text: &str| {
        let d = dir.path().join("modules").join(module);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(PID_FILE), text).unwrap();
    };
    // Its pid recorded with another start time: an earlier process's pid.
    write(
        "reused",
        &format!("{} {}\n", pid, real.starttime.saturating_sub(7)),
    );
    // Records that must never become a signal: damaged, or naming pid 1
    // or the test's own process (group 0 / -1 semantics).
    write("damaged", "12x 3\n");
    write("init", "1 0\n");
    let me = PidRecord::of(std::process::id()).unwrap();
    write("me", &format!("{} {}\n", me.pid, me.starttime + 1));

    let _driver = Driver::new(dir.path(), opts()).await.unwrap();
    assert!(!gone(pid), "the stranger is alive");
    assert_eq!(PidRecord::of(pid), Some(real));
    for module in ["reused", "damaged", "init", "me"] {
        let p = dir.path().join("modules").join(module).join(PID_FILE);
        assert!(!p.exists(), "{module}: the stale record is cleared");
    }
    stranger.kill().unwrap();
    stranger.wait().unwrap();
    assert!(absent(pid));
}

#[tokio::test]
async fn a_failed_module_that_stays_up_is_running_again() {
    let dir = tempfile::tempdir().unwrap();
    let mut reap = Reap::default();
    // A wide window between the spawn and `running`, to see it in.
    let opts = DriverOptions {
        running_after: Duration::from_millis(1500),
        ..opts()
    };
    let driver = Driver::new(dir.path(), opts).await.unwrap();
    let marker = unique();
    // Fails its first three runs, then stays up.
    let script = "n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count; \
                  if [ $n -le 3 ]; then echo \"run $n fails\"; exit 2; fi; sleep 600";
    driver
        .start(sh(dir.path(), "flaky", script, &marker))
        .await
        .unwrap();
    let failed = wait_state(&driver, "flaky", ModuleState::Failed).await;
    assert_eq!(
        failed.reason.as_deref(),
        Some("exited with status 2; last lines: run 3 fails")
    );
    // The fourth run is spawned while still reported failed.
    eventually("the fourth run", Duration::from_secs(5), || {
        status(&driver, "flaky").restarts == 3 && driver.pid(&name("flaky")).is_some()
    })
    .await;
    reap.0.extend(driver.pid(&name("flaky")));
    let early = status(&driver, "flaky");
    let running = wait_state(&driver, "flaky", ModuleState::Running).await;
    assert_eq!(early.state, ModuleState::Failed, "failed until it stays up");
    assert_eq!((running.restarts, running.reason), (3, None));
    driver.stop_all().await;
    assert_eq!(count_marked(&marker), 0);
}

#[tokio::test]
async fn a_changed_spec_replaces_the_running_process() {
    let dir = tempfile::tempdir().unwrap();
    let mut reap = Reap::default();
    let driver = Driver::new(dir.path(), opts()).await.unwrap();
    let marker = unique();
    driver
        .start(spec(dir.path(), "svc", &["sleep", "600"], &marker))
        .await
        .unwrap();
    let old = driver.pid(&name("svc")).unwrap();
    reap.0.push(old);
    driver
        .start(spec(dir.path(), "svc", &["sleep", "601"], &marker))
        .await
        .unwrap();
    let new = driver.pid(&name("svc")).unwrap();
    reap.0.push(new);
    assert_ne!(old, new);
    assert!(absent(old), "the old process is stopped first");
    assert_eq!(marked(&marker), [new]);
    assert_eq!(status(&driver, "svc").restarts, 0);
    driver.stop_all().await;
    assert!(absent(new));
}

#[tokio::test]
async fn a_dropped_driver_stops_its_modules() {
    let dir = tempfile::tempdir().unwrap();
    let mut reap = Reap::default();
    let driver = Driver::new(dir.path(), opts()).await.unwrap();
    let marker = unique();
    driver
        .start(spec(dir.path(), "orphan", &["sleep", "600"], &marker))
        .await
        .unwrap();
    let pid = driver.pid(&name("orphan")).unwrap();
    reap.0.push(pid);
    drop(driver);
    eventually("the module stopped", Duration::from_secs(10), || {
        absent(pid)
    })
    .await;
    let record = dir.path().join("modules/orphan").join(PID_FILE);
    eventually("the record removed", Duration::from_secs(5), || {
        !record.exists()
    })
    .await;
}

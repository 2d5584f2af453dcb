//! `mesh up --ha` the way a person runs it: three broker servers, a
//! PostgreSQL of its own, two controllers; stopped by Ctrl-C to the whole
//! group (and forced by a second), leaving nothing; and a directory of the
//! other kind refused before anything starts.

#[path = "join_live/harness.rs"]
mod harness;
#[path = "up_live/up.rs"]
mod up;

use std::path::{Path, PathBuf};
use std::process::Command;

use harness::{Mesh, mesh_bin, wait_until};
use up::{
    Launch, Recorded, START, STOP, Up, assert_nothing_left, processes_under, run_bounded, serial,
    stat, stubborn_catalogue,
};

/// `mesh up --ha` as a person runs it: three broker servers, a PostgreSQL
/// of its own, two controllers (one active, the other standing by, as
/// `mesh status` shows), the local node running its module through the
/// cluster; Ctrl-C to the whole group stops all of it, the store last,
/// leaving nothing.
#[test]
fn mesh_up_ha_runs_three_servers_a_store_and_two_controllers_and_stops_them_all() {
    let _one = serial();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let dir = root.join(".mesh-ha");
    let catalogue = root.join("catalogue");
    std::fs::create_dir_all(&catalogue).unwrap();
    let out = Command::new("cp")
        .arg("-r")
        .arg(Mesh::examples().join("echo"))
        .arg(&catalogue)
        .output()
        .unwrap();
    assert!(out.status.success());
    let gone = RootData::of(&dir);
    let mut up = Up::start_ha(root, &dir, &catalogue);
    up.wait_log("up: node local reports echo running");
    let log = up.log();
    assert!(
        log.contains("  broker      3 servers, every stream on each: tls://127.0.0.1:"),
        "{log}"
    );
    let data = summary_data(&log);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert_eq!(data, gone.0, "as root, the data is where the README says");
    }
    let store_url = std::fs::read_to_string(dir.join("store.url")).unwrap();
    assert!(
        store_url.starts_with("postgres://postgres:"),
        "a PostgreSQL store"
    );
    // The password alone, not only the whole URL: a log that printed it
    // apart (an error naming the connection's options) would be missed.
    let password = store_url
        .trim()
        .strip_prefix("postgres://postgres:")
        .and_then(|rest| rest.split('@').next())
        .filter(|p| p.len() >= 16)
        .unwrap_or_else(|| panic!("no password in the store URL: {store_url}"));
    assert!(
        !log.contains(password),
        "the store's password is in mesh up's output"
    );
    // mesh up's own logs, and its PostgreSQL's.
    let logs = walk_files(&dir)
        .into_iter()
        .chain([data.join("postgres.log")]);
    for entry in logs {
        let text = std::fs::read(&entry).unwrap_or_default();
        let named_log = entry
            .file_name()
            .is_some_and(|n| n.to_string_lossy().contains("log"));
        if named_log {
            assert!(
                !String::from_utf8_lossy(&text).contains(password),
                "the store's password is in {}",
                entry.display()
            );
        }
    }
    let standby_log = dir.join("controller-2.log");
    let standby = wait_until(START, || {
        let l = std::fs::read_to_string(&standby_log).unwrap_or_default();
        l.contains("standing by") || l.contains("lease taken")
    });
    assert!(
        standby,
        "the second controller never started:\n{}",
        std::fs::read_to_string(&standby_log).unwrap_or_default()
    );
    let out = Command::new(mesh_bin())
        .args(["status", "--dir"])
        .arg(&dir)
        .env_remove("MESH_STORE")
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{status}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lease = status
        .lines()
        .find(|l| l.starts_with("lease "))
        .unwrap_or_else(|| panic!("{status}"));
    assert!(lease.contains("mesh controller on "), "{status}");
    let listed = status
        .lines()
        .find(|l| l.starts_with("servers "))
        .unwrap_or_else(|| panic!("{status}"));
    assert_eq!(listed.matches(" up").count(), 3, "{status}");
    // One of the two holds the lease; the other says it stands by.
    let up_log = up.log();
    let standby_said = std::fs::read_to_string(&standby_log).unwrap_or_default();
    assert!(
        (up_log.contains("lease taken") && standby_said.contains("standing by"))
            || (standby_said.contains("lease taken") && up_log.contains("standing by")),
        "one active, one standing by:\nmesh up:\n{up_log}\nsecond:\n{standby_said}"
    );
    // The second controller killed, as a machine lost: `mesh up` starts it
    // again, and the lease is held by a controller that runs.
    let second: i32 = log
        .lines()
        .find_map(|l| l.split("this process and pid ").nth(1)?.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("the summary names the second controller:\n{log}"));
    // SAFETY: kill(2) on a process this case started.
    assert_eq!(unsafe { libc::kill(second, libc::SIGKILL) }, 0);
    up.wait_log("the second controller exited; starting it again");
    let held = wait_until(START, || {
        let out = Command::new(mesh_bin())
            .args(["status", "--dir"])
            .arg(&dir)
            .output()
            .unwrap();
        let status = String::from_utf8_lossy(&out.stdout).to_string();
        status.lines().any(|l| {
            l.starts_with("lease ")
                && l.split("(pid ")
                    .nth(1)
                    .and_then(|p| p.split(',').next()?.parse::<u32>().ok())
                    .is_some_and(|p| p != second as u32 && stat(p).is_some())
        })
    });
    assert!(
        held,
        "no running controller holds the lease after the second was killed"
    );
    let mut recorded = postgres_processes(&data);
    recorded.extend(servers(&dir));
    recorded.extend(up.recorded());
    assert_eq!(
        recorded
            .iter()
            .filter(|r| r.what.starts_with("server"))
            .count(),
        3
    );
    up.signal_group(libc::SIGINT);
    let exit = up.wait_exit_within(STOP * 3);
    assert!(exit.success(), "{exit}\n{}", up.log());
    assert_nothing_left(&up, &recorded, "mesh up --ha");

    // Its store's URL (the password's only copy) lost: the data is never
    // made again over, and the refusal says what to do.
    std::fs::remove_file(dir.join("store.url")).unwrap();
    let out = run_bounded(root, &["up", "--ha", "--dir", dir.to_str().unwrap()], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("(its URL and password) is gone; put it back, or remove"),
        "{err}"
    );
    assert!(
        data.join("PG_VERSION").is_file(),
        "the store's data was kept"
    );
    drop(gone);
}

/// A second Ctrl-C of `mesh up --ha`, while its orderly stop waits out a
/// module's grace, kills what it started and exits 130 at once: its
/// PostgreSQL too, every process of it (a SIGKILL to the postmaster alone
/// would leave its server processes orphaned).
#[test]
fn a_second_ctrl_c_of_mesh_up_ha_stops_its_postgresql_too() {
    let _one = serial();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let dir = root.join(".mesh-ha");
    let _gone = RootData::of(&dir);
    let catalogue = stubborn_catalogue(root);
    let mut up = Up::start_ha(root, &dir, &catalogue);
    up.wait_log("up: node local reports stubborn running");
    let mut recorded = postgres_processes(&summary_data(&up.log()));
    assert!(
        recorded.len() > 1,
        "the postmaster and its server processes: {recorded:?}"
    );
    recorded.extend(servers(&dir));
    recorded.extend(up.recorded());
    assert!(
        recorded.iter().any(|r| r.what == "stubborn"),
        "{recorded:?}"
    );
    up.force_stop_leaving_nothing(&recorded, "forced mesh up --ha");
}

/// A first `mesh up --ha` whose broker port is taken removes what it made,
/// its PostgreSQL's data (kept outside the directory as root) included.
#[test]
fn a_failed_first_ha_start_leaves_no_store_data_behind() {
    let _one = serial();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let dir = root.join(".mesh-ha");
    let data = RootData::of(&dir);
    // None: nothing to register, nothing to assign.
    let catalogue = root.join("no-catalogue");
    let port = mesh_testkit::cluster::free_port_run(6).unwrap();
    let _taken = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let launch = Launch {
        port: Some(port.to_string()),
        extra: &["--ha"],
        ..Launch::default()
    };
    let mut up = Up::spawn(root, root, Some(&dir), &catalogue, launch);
    let status = up.wait_exit_within(START);
    let log = up.log();
    assert!(!status.success(), "{log}");
    assert!(
        log.contains(&format!("the broker's port 127.0.0.1:{port} is taken")),
        "{log}"
    );
    assert!(
        log.contains("up: this first start failed; what it made in"),
        "{log}"
    );
    assert!(!dir.exists(), "{log}");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert!(!data.0.exists(), "{} is left:\n{log}", data.0.display());
    }
    assert_nothing_left(&up, &[], "a failed first --ha start");
}

/// Where `mesh up --ha` keeps the store's data of the mesh in `dir` when
/// run as root (outside it, where the README says), removed however the
/// case ends, its server ended first (immediate shutdown) if it runs.
struct RootData(PathBuf);

impl RootData {
    fn of(dir: &Path) -> RootData {
        let flat: String = dir
            .to_string_lossy()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        RootData(Path::new("/var/lib/mesh-up").join(flat.trim_matches('-')))
    }
}

impl Drop for RootData {
    fn drop(&mut self) {
        let postmaster = std::fs::read_to_string(self.0.join("postmaster.pid")).unwrap_or_default();
        if let Some(pid) = postmaster
            .lines()
            .next()
            .and_then(|l| l.parse::<i32>().ok())
        {
            // SAFETY: kill(2) on the server this case's mesh started.
            unsafe { libc::kill(pid, libc::SIGQUIT) };
            wait_until(STOP, || stat(pid as u32).is_none());
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The store's data directory, as the summary names it.
fn summary_data(log: &str) -> PathBuf {
    log.lines()
        .find_map(|l| l.split("data in ").nth(1)?.split(", its URL").next())
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("the summary names the store's data:\n{log}"))
}

/// PostgreSQL's processes: the postmaster its `postmaster.pid` names, and
/// each server process it started.
fn postgres_processes(data: &Path) -> Vec<Recorded> {
    let postmaster: u32 = std::fs::read_to_string(data.join("postmaster.pid"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let children = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| parent(*pid) == Some(postmaster));
    std::iter::once(postmaster)
        .chain(children)
        .filter_map(|pid| Recorded::of("postgres", pid))
        .collect()
}

/// The parent's pid, from `/proc/<pid>/stat`.
fn parent(pid: u32) -> Option<u32> {
    let line = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = line.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The three broker servers, from their pid files.
fn servers(dir: &Path) -> Vec<Recorded> {
    (1..=3)
        .filter_map(|i| {
            let pid = std::fs::read_to_string(dir.join(format!("broker/nats-{i}.pid"))).ok()?;
            Recorded::of(&format!("server {i}"), pid.trim().parse().ok()?)
        })
        .collect()
}

/// A mesh of one server is not started as `--ha`, nor a `--ha` one
/// without it: refused before anything is made or started, naming what to
/// run instead.
#[test]
fn mesh_up_refuses_a_directory_of_the_other_kind_naming_which_to_run() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let one = root.join("one");
    let three = root.join("three");
    for (dir, replicas) in [(&one, "1"), (&three, "3")] {
        let port = mesh_testkit::cluster::free_port_run(6).unwrap().to_string();
        let out = run_bounded(
            root,
            &[
                "init",
                "--dir",
                dir.to_str().unwrap(),
                "--port",
                &port,
                "--replicas",
                replicas,
            ],
            None,
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = run_bounded(root, &["up", "--ha", "--dir", one.to_str().unwrap()], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("holds a mesh of one broker server; `mesh up --ha` makes a mesh of its own"),
        "{err}"
    );
    assert!(
        !one.join("store.url").exists() && !one.join("postgres").exists(),
        "nothing made"
    );
    let out = run_bounded(root, &["up", "--dir", three.to_str().unwrap()], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "holds a mesh of 3 broker servers, and `mesh up` runs one: start it with `mesh up --ha --dir {}`",
            three.display()
        )),
        "{err}"
    );
    assert!(
        processes_under(root).is_empty(),
        "{:?}",
        processes_under(root)
    );
}

/// Every file below `dir`, at any depth.
fn walk_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => dirs.push(path),
                Ok(t) if t.is_file() => files.push(path),
                _ => {}
            }
        }
    }
    files
}

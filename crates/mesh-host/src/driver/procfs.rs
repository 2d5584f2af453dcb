//! Processes as the kernel shows them: `/proc/<pid>/stat` (state, process
//! group, start time), the pid records a driver leaves in each module's
//! directory, and signals to whole process groups.
//!
//! A pid alone is not an identity: the kernel hands it out again once the
//! process is gone. A record therefore carries the start time too, and a
//! recorded process is only signalled while both still match.

use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

/// The pid record in a module's directory.
pub const PID_FILE: &str = "pid";

/// The fields of `/proc/<pid>/stat` the driver reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// `R`, `S`, `D`, `Z` (zombie), `X` (dead), …
    pub state: char,
    pub pgid: u32,
    /// Clock ticks after boot; with the pid, identifies one process.
    pub starttime: u64,
}

impl ProcStat {
    /// A zombie has exited and holds nothing but its exit status; it counts
    /// as gone (an init that does not reap would otherwise keep it "alive").
    pub fn is_live(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parses one `/proc/<pid>/stat` line. The command name (field 2) is in
/// parentheses and may itself hold `)` and spaces, so fields are counted
/// from the last `)`.
pub fn parse_stat(line: &str) -> Option<ProcStat> {
    let (_, rest) = line.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3 of the line, pgrp field 5, starttime 22.
    let state = fields.first()?.chars().next()?;
    let pgid = fields.get(2)?.parse().ok()?;
    let starttime = fields.get(19)?.parse().ok()?;
    Some(ProcStat {
        state,
        pgid,
        starttime,
    })
}

pub fn read_stat(pid: u32) -> Option<ProcStat> {
    let line = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&line)
}

/// The live processes in process group `pgid`, with their stat.
pub fn group_members(pgid: u32) -> Vec<(u32, ProcStat)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, read_stat(pid)?)))
        .filter(|(_, st)| st.pgid == pgid && st.is_live())
        .collect()
}

/// Whether group `pgid` still has a live member.
pub fn group_alive(pgid: u32) -> bool {
    !group_members(pgid).is_empty()
}

/// Sends `signal` to every process in group `pgid`. Group ids 0 and 1 are
/// refused: `kill(-0)` is the caller's own group and `kill(-1)` is every
/// process the host may signal, and a damaged record must never reach them.
pub fn signal_group(pgid: u32, signal: i32) -> io::Result<()> {
    let Some(pgid) = usable_pid(pgid) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("refusing to signal process group {pgid}"),
        ));
    };
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    let rc = unsafe { libc::kill(-pgid, signal) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    // Nobody left in the group: what the caller wanted.
    if err.raw_os_error() == Some(libc::ESRCH) {
        return Ok(());
    }
    Err(err)
}

/// A pid the driver may signal as a group: above 1 and within `pid_t`.
fn usable_pid(pid: u32) -> Option<i32> {
    let pid = i32::try_from(pid).ok()?;
    (pid > 1).then_some(pid)
}

/// Waits until group `pgid` has no live member, at most `limit`.
pub async fn wait_group_gone(pgid: u32, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    loop {
        if !group_alive(pgid) {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// TERM to the group, KILL once `grace` passed, then a short wait for the
/// kernel to tear the processes down. Returns whether the group is gone.
pub async fn terminate_group(pgid: u32, grace: Duration) -> bool {
    let _ = signal_group(pgid, libc::SIGTERM);
    if wait_group_gone(pgid, grace).await {
        return true;
    }
    let _ = signal_group(pgid, libc::SIGKILL);
    wait_group_gone(pgid, Duration::from_secs(2)).await
}

/// The identity of a process the driver started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PidRecord {
    pub pid: u32,
    pub starttime: u64,
}

impl PidRecord {
    /// The record for a live process, read from `/proc`.
    pub fn of(pid: u32) -> Option<PidRecord> {
        let st = read_stat(pid)?;
        Some(PidRecord {
            pid,
            starttime: st.starttime,
        })
    }

    pub fn format(&self) -> String {
        format!("{} {}\n", self.pid, self.starttime)
    }

    /// Reads `"<pid> <starttime>"`; anything else (a truncated write, a
    /// stray file) is `None`, never a pid to signal.
    pub fn parse(text: &str) -> Option<PidRecord> {
        let mut parts = text.split_whitespace();
        let pid = parts.next()?.parse().ok()?;
        let starttime = parts.next()?.parse().ok()?;
        if parts.next().is_some() || usable_pid(pid).is_none() {
            return None;
        }
        Some(PidRecord { pid, starttime })
    }

    /// Written to a temporary name and renamed: a host killed mid-write
    /// leaves the old record or the new one, never half of one.
    pub fn write(&self, dir: &Path) -> io::Result<()> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let tmp = dir.join(format!("{PID_FILE}.tmp"));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(self.format().as_bytes())?;
        drop(f);
        std::fs::rename(&tmp, dir.join(PID_FILE))
    }

    /// Whether the recorded group may still hold processes this record
    /// started. The leader alive with another start time means its pid was
    /// reused: that group is someone else's. The leader gone while its group
    /// lives means the group is still ours (the kernel does not hand out a
    /// pid that is still a group's id), so its members are checked instead.
    pub fn is_ours_and_alive(&self) -> bool {
        match read_stat(self.pid) {
            Some(st) if st.is_live() => st.starttime == self.starttime && st.pgid == self.pid,
            _ => group_members(self.pid)
                .iter()
                .any(|(_, st)| st.starttime >= self.starttime),
        }
    }
}

/// Removes `dir/pid`; a missing one is fine.
pub fn remove_record(dir: &Path) -> io::Result<()> {
    match std::fs::remove_file(dir.join(PID_FILE)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// What a pid record in a module directory turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leftover {
    /// The recorded group was alive and has been terminated (or, `false`,
    /// survived even SIGKILL).
    Killed { pid: u32, gone: bool },
    /// The process is gone, or its pid now belongs to another process.
    NotOurs { pid: u32 },
    /// The record could not be read as one.
    Unreadable,
}

impl std::fmt::Display for Leftover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Leftover::Killed { pid, gone: true } => {
                write!(f, "its process group {pid} was still running; stopped")
            }
            Leftover::Killed { pid, gone: false } => write!(
                f,
                "its process group {pid} was still running and survived SIGKILL"
            ),
            Leftover::NotOurs { pid } => write!(
                f,
                "process {pid} is gone (or the pid is another program's now); nothing to stop"
            ),
            Leftover::Unreadable => write!(f, "unreadable; removed"),
        }
    }
}

/// Terminates what the record in `dir` names, if it is still ours, and
/// removes the record.
pub async fn kill_leftover(dir: &Path, grace: Duration) -> io::Result<Option<Leftover>> {
    let text = match std::fs::read_to_string(dir.join(PID_FILE)) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let outcome = match PidRecord::parse(&text) {
        None => Leftover::Unreadable,
        Some(rec) if rec.is_ours_and_alive() => Leftover::Killed {
            pid: rec.pid,
            gone: terminate_group(rec.pid, grace).await,
        },
        Some(rec) => Leftover::NotOurs { pid: rec.pid },
    };
    remove_record(dir)?;
    Ok(Some(outcome))
}

/// SIGKILL, at once, to the group each record under `modules_dir` names
/// while it is still ours; records are left for the next driver to clear.
/// For a host forced to exit now (a second Ctrl-C), which cannot wait for
/// the graces. Returns the groups signalled.
pub fn kill_recorded(modules_dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(modules_dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join(PID_FILE)).ok())
        .filter_map(|text| PidRecord::parse(&text))
        .filter(PidRecord::is_ours_and_alive)
        .filter(|rec| signal_group(rec.pid, libc::SIGKILL).is_ok())
        .map(|rec| rec.pid)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = "4242 (my prog) x) S 1 4242 4242 0 -1 4194560 98 0 0 0 0 0 0 0 20 0 1 0 123456 2400000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        let st = parse_stat(LINE).unwrap();
        assert_eq!(
            st,
            ProcStat {
                state: 'S',
                pgid: 4242,
                starttime: 123456
            }
        );
        assert!(st.is_live());
        let zombie = LINE.replace(") S 1", ") Z 1");
        assert!(!parse_stat(&zombie).unwrap().is_live());
        assert_eq!(parse_stat("4242 (short) S 1 2"), None);
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat(""), None);
    }

    #[test]
    fn our_own_stat_is_readable() {
        let me = std::process::id();
        let st = read_stat(me).unwrap();
        assert!(st.is_live());
        assert!(st.starttime > 0);
        assert_eq!(PidRecord::of(me).unwrap().starttime, st.starttime);
    }

    #[test]
    fn a_record_round_trips_and_rejects_what_must_never_be_signalled() {
        let rec = PidRecord {
            pid: 77,
            starttime: 9001,
        };
        assert_eq!(PidRecord::parse(&rec.format()), Some(rec));
        for bad in [
            "",
            "77",
            "77 x",
            "0 5",
            "1 5",
            "-5 5",
            "4294967295 5",
            "77 5 6",
            "🙂",
        ] {
            assert_eq!(PidRecord::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn group_zero_and_one_are_never_signalled() {
        for pgid in [0, 1, u32::MAX] {
            let err = signal_group(pgid, 0).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{pgid}");
        }
    }

    #[test]
    fn a_record_is_written_whole_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let rec = PidRecord {
            pid: 1234,
            starttime: 5,
        };
        rec.write(dir.path()).unwrap();
        let text = std::fs::read_to_string(dir.path().join(PID_FILE)).unwrap();
        assert_eq!(PidRecord::parse(&text), Some(rec));
        assert!(!dir.path().join("pid.tmp").exists());
        remove_record(dir.path()).unwrap();
        remove_record(dir.path()).unwrap();
        assert!(!dir.path().join(PID_FILE).exists());
    }
}

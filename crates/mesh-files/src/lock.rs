//! One process per state directory: an exclusive `flock(2)` on
//! `<dir>/mesh.lock`, held for the life of the process. The kernel drops
//! the lock when the process ends, however it ends (SIGKILL included), so a
//! file a dead process left never blocks the next start; the pid and the
//! command written into it only name the holder in a refusal.
//!
//! A lock belongs to one open file description: a process that takes it
//! twice (two opens) refuses itself. `mesh up`, which runs a controller and
//! a host in one process, takes each directory's lock once.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

/// The lock file's name in the directory it guards.
pub const LOCK_FILE: &str = "mesh.lock";

/// Who takes a lock, and how a refusal words it.
#[derive(Debug, Clone, Copy)]
pub struct Claim {
    /// The command taking it, written into the file: `mesh up`.
    pub holder: &'static str,
    /// What the directory is to a person: `the mesh`, `the host state`.
    pub what: &'static str,
    /// The option that names another directory: `--dir`, `--state`.
    pub option: &'static str,
}

/// The holder a refusal names, as its lock file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: Option<u32>,
    pub command: Option<String>,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let command = self.command.as_deref().unwrap_or("another process");
        match self.pid {
            Some(pid) => write!(f, "{command} (pid {pid})"),
            None => write!(f, "{command} (its pid not written yet)"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{what} in {dir} is in use by {holder}; stop it first, or give another {option}", what = claim.what, option = claim.option)]
    Held {
        dir: PathBuf,
        holder: Holder,
        claim: Claim,
    },
    #[error("could not {action} {path}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Held until dropped (or the process ends).
#[derive(Debug)]
pub struct DirLock {
    // Only kept open: closing the last descriptor releases the lock.
    _file: File,
    dir: PathBuf,
}

impl DirLock {
    /// Takes the lock of `dir` (created 0700 if missing) at once, or
    /// refuses naming its holder; never waits.
    pub fn acquire(dir: &Path, claim: Claim) -> Result<DirLock, LockError> {
        let io = |action, path: &Path| {
            let path = path.to_path_buf();
            move |source| LockError::Io {
                action,
                path,
                source,
            }
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io("create", dir))?;
        Self::acquire_file(&dir.join(LOCK_FILE), dir, claim)
    }

    /// Takes the lock of the file at `path` (created 0600 if missing) at
    /// once, or refuses naming its holder; `guards` is what a refusal names
    /// (a directory, or the file a lock beside it guards).
    pub fn acquire_file(path: &Path, guards: &Path, claim: Claim) -> Result<DirLock, LockError> {
        let io = |action, path: &Path| {
            let path = path.to_path_buf();
            move |source| LockError::Io {
                action,
                path,
                source,
            }
        };
        let dir = guards;
        // Not truncated on open: until the lock is ours, the text names the
        // holder. Opened close-on-exec (std's default), so no child of
        // ours (the broker, a module) inherits the lock and outlives us
        // holding it.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(io("open", path))?;
        loop {
            // SAFETY: flock(2) on a descriptor this function owns.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                break;
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EWOULDBLOCK) => {
                    return Err(LockError::Held {
                        dir: dir.to_path_buf(),
                        holder: read_holder(path),
                        claim,
                    });
                }
                _ => return Err(io("lock", path)(e)),
            }
        }
        let text = format!("{} {}\n", std::process::id(), claim.holder);
        file.set_len(0)
            .and_then(|()| file.write_all(text.as_bytes()))
            .map_err(io("write", path))?;
        Ok(DirLock {
            _file: file,
            dir: dir.to_path_buf(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// `<pid> <command>` as the holder wrote it; what cannot be read is unknown.
fn read_holder(path: &Path) -> Holder {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let (pid, command) = text.trim().split_once(' ').unwrap_or((text.trim(), ""));
    Holder {
        pid: pid.parse().ok(),
        command: Some(command.trim())
            .filter(|c| !c.is_empty())
            .map(str::to_string),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UP: Claim = Claim {
        holder: "mesh up",
        what: "the mesh",
        option: "--dir",
    };

    #[test]
    fn a_second_claim_is_refused_naming_the_holder_and_a_drop_releases_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("m");
        let first = DirLock::acquire(&dir, UP).unwrap();
        let e = DirLock::acquire(&dir, UP).unwrap_err();
        let text = e.to_string();
        let me = std::process::id();
        assert_eq!(
            text,
            format!(
                "the mesh in {} is in use by mesh up (pid {me}); stop it first, or give another --dir",
                dir.display()
            )
        );
        drop(first);
        DirLock::acquire(&dir, UP).unwrap();
    }

    #[test]
    fn a_file_left_by_a_dead_holder_does_not_block() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(LOCK_FILE), "999999999 mesh up\n").unwrap();
        let _held = DirLock::acquire(tmp.path(), UP).unwrap();
        let text = std::fs::read_to_string(tmp.path().join(LOCK_FILE)).unwrap();
        assert_eq!(text, format!("{} mesh up\n", std::process::id()));
    }

    #[test]
    fn an_unreadable_holder_is_named_as_unknown() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(LOCK_FILE);
        std::fs::write(&path, "").unwrap();
        assert_eq!(
            read_holder(&path).to_string(),
            "another process (its pid not written yet)"
        );
    }
}

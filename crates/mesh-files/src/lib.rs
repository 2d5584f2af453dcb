//! mesh-files: replacing a file whole, mode 0600 — the users file the
//! broker reads, a host's keys and records — so a reader or a crash only
//! ever sees the old file or the new one; and [`lock`]: one process per
//! state directory.

pub mod lock;

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
#[error("could not {action} {path}")]
pub struct WriteError {
    pub action: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Writes `contents` to `path` with mode 0600: a temporary file in the same
/// directory (a rename across file systems would not be atomic), synced,
/// then renamed over `path`, then the directory synced so the rename itself
/// survives a crash. A broker reloading meanwhile reads the old file or the
/// new one, never half of either.
pub fn write_private(path: &Path, contents: &[u8]) -> Result<(), WriteError> {
    let err = |action, path: &Path| {
        let path = path.to_path_buf();
        move |source| WriteError {
            action,
            path,
            source,
        }
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().ok_or_else(|| WriteError {
        action: "write",
        path: path.to_path_buf(),
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    })?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp.{}", std::process::id()));
    let tmp = dir.join(tmp_name);
    // A leftover from a crashed write is ours to replace.
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        // create_new with 0600: the text is never readable by others, not
        // even for the moment before a chmod.
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(err("create", &tmp))?;
        // The umask cannot widen 0600, but an inherited ACL default could.
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(err("set the mode of", &tmp))?;
        f.write_all(contents).map_err(err("write", &tmp))?;
        f.sync_all().map_err(err("sync", &tmp))?;
        std::fs::rename(&tmp, path).map_err(err("replace", path))?;
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(err("sync", dir))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_whole_with_mode_0600_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users.conf");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&path, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("users.conf")]);
    }

    #[test]
    fn a_missing_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent/users.conf");
        let e = write_private(&path, b"x").unwrap_err();
        assert_eq!(e.action, "create");
        assert!(e.to_string().contains("absent"), "{e}");
    }
}

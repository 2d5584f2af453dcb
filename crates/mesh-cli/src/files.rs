//! Files only their owner may read: the users file (every user's hash) and
//! minted secrets.

use std::fs::Permissions;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context;

/// Creates `dir` (and its parents) readable by its owner only. The mode is set
/// again on a directory that already exists: `mode()` applies only at creation.
pub fn private_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(dir, Permissions::from_mode(0o700))
        .with_context(|| format!("restricting {} to its owner", dir.display()))
}

/// Writes `bytes` to `path`, mode 0600, renamed into place so a watcher never
/// reads a half-written file.
pub fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let tmp = tmp_beside(path);
    // A stale temp file from an interrupted run keeps its old mode when opened
    // again; start from nothing so the mode below is the one it gets.
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("removing {}", tmp.display()));
        }
        _ => {}
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

/// `users.conf` → `users.conf.tmp`: the extension is kept, so two files that
/// differ only in extension never share a temp file.
fn tmp_beside(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn an_existing_file_and_dir_are_narrowed_to_their_owner() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("secrets");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, Permissions::from_mode(0o755)).unwrap();
        let path = dir.join("host_n1");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, Permissions::from_mode(0o644)).unwrap();
        // A leftover temp file, readable by all, from an interrupted run.
        std::fs::write(tmp_beside(&path), "stale").unwrap();
        std::fs::set_permissions(tmp_beside(&path), Permissions::from_mode(0o644)).unwrap();

        private_dir(&dir).unwrap();
        write_private(&path, b"new").unwrap();

        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert!(!tmp_beside(&path).exists());
    }

    #[test]
    fn the_temp_file_keeps_the_extension() {
        assert_eq!(
            tmp_beside(Path::new("/b/users.conf")),
            Path::new("/b/users.conf.tmp")
        );
    }
}

//! The SQLite file and its directory, made readable by their owner only: the
//! file holds every credential's hash.

use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// Creates `path`'s missing parent directories (mode 0700) and, if absent,
/// `path` itself as an empty file (mode 0600), before SQLite opens it:
/// SQLite would create it with the process umask (0644 usually), and gives
/// its `-wal` and `-shm` files the main file's mode.
pub(crate) fn create_private(path: &Path) -> io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)?;
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

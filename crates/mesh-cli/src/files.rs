//! Every file the CLI writes goes through here: the users file (every user's
//! hash), minted secrets, and the SQLite store's files. Each is readable by
//! its owner only, and written so that bad input loses nothing:
//!
//! - only a regular file is ever replaced: a device, FIFO, socket, directory
//!   or symbolic link where the file should go is refused and left as it is
//!   (a rename onto `/dev/full` replaces the device node; onto a symlink, the
//!   link);
//! - the bytes go to a temporary file beside the target (mode 0600), are
//!   synced, and renamed into place, so a reader never sees half a file;
//! - the temporary file is removed on any failure: it holds what the target
//!   would, hashes and secrets included;
//! - directories mesh creates for them are 0700.

use std::ffi::OsStr;
use std::fmt;
use std::fs::{File, Permissions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context;

/// Where a command's output goes: `--out FILE`, or `--out -` for standard
/// output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutPath {
    Stdout,
    File(PathBuf),
}

impl From<&OsStr> for OutPath {
    fn from(s: &OsStr) -> Self {
        // A file really named `-` is still reachable as `./-`.
        if s == "-" {
            OutPath::Stdout
        } else {
            OutPath::File(PathBuf::from(s))
        }
    }
}

/// Something other than a regular file is where a file should be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotRegular {
    pub path: PathBuf,
    pub kind: &'static str,
}

impl fmt::Display for NotRegular {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is a {}, not a regular file: mesh replaces only regular files, so it was left as it is",
            self.path.display(),
            self.kind
        )
    }
}

impl std::error::Error for NotRegular {}

/// What is at `path` when it is not a regular file.
fn special_kind(ty: std::fs::FileType) -> Option<&'static str> {
    Some(if ty.is_file() {
        return None;
    } else if ty.is_dir() {
        "directory"
    } else if ty.is_symlink() {
        "symbolic link"
    } else if ty.is_fifo() {
        "FIFO (named pipe)"
    } else if ty.is_socket() {
        "socket"
    } else if ty.is_char_device() {
        "character device"
    } else if ty.is_block_device() {
        "block device"
    } else {
        "special file"
    })
}

/// Refuses `path` when something other than a regular file is there; a
/// path with nothing at it is fine.
pub fn refuse_special(path: &Path) -> anyhow::Result<()> {
    // symlink_metadata: a link is judged itself, not what it points at.
    match std::fs::symlink_metadata(path) {
        Ok(meta) => match special_kind(meta.file_type()) {
            None => Ok(()),
            Some(kind) => Err(NotRegular {
                path: path.to_path_buf(),
                kind,
            }
            .into()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("checking {}", path.display())),
    }
}

/// Creates `dir` (and its parents) readable by its owner only. The mode is set
/// again on a directory that already exists: `mode()` applies only at creation.
/// A symbolic link is refused rather than followed: narrowing what it points
/// at could close someone else's directory.
pub fn private_dir(dir: &Path) -> anyhow::Result<()> {
    if let Ok(meta) = std::fs::symlink_metadata(dir) {
        let ty = meta.file_type();
        if !ty.is_dir() {
            anyhow::bail!(
                "{} is a {}, not a directory; give the path of a directory, or of none yet",
                dir.display(),
                special_kind(ty).unwrap_or("regular file")
            );
        }
    }
    create_private_dirs(dir)?;
    std::fs::set_permissions(dir, Permissions::from_mode(0o700))
        .with_context(|| format!("restricting {} to its owner", dir.display()))
}

/// Creates whatever of `dir` and its parents is missing, mode 0700; what
/// exists is left as it is (a parent such as /etc is not mesh's to narrow).
pub fn create_private_dirs(dir: &Path) -> anyhow::Result<()> {
    if dir.as_os_str().is_empty() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))
}

/// Writes `bytes` to `path`, mode 0600, renamed into place so a watcher never
/// reads a half-written file. Refuses a target that is not a regular file.
pub fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    write_with(path, |f| f.write_all(bytes))
}

/// [`write_private`] with the writing done by `fill`: the temp file is
/// removed whenever `fill` or anything after it fails.
fn write_with(
    path: &Path,
    fill: impl FnOnce(&mut File) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    refuse_special(path)?;
    let dir = path.parent().unwrap_or(Path::new(""));
    create_private_dirs(dir)?;
    let mut tmp = TempFile::create(tmp_beside(path))?;
    fill(&mut tmp.file)
        .and_then(|()| tmp.file.sync_all())
        .with_context(|| format!("writing {}", tmp.path.display()))?;
    // Checked again just before the rename: what is there now is what the
    // rename would replace.
    refuse_special(path)?;
    std::fs::rename(&tmp.path, path).with_context(|| format!("writing {}", path.display()))?;
    tmp.renamed = true;
    // The rename is durable only once the directory is synced.
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))
}

/// A temp file that removes itself unless it was renamed into place.
struct TempFile {
    path: PathBuf,
    file: File,
    renamed: bool,
}

impl TempFile {
    fn create(path: PathBuf) -> anyhow::Result<TempFile> {
        // A stale temp file from an interrupted run keeps its old mode when
        // opened again; start from nothing so the mode below is the one it gets.
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("removing {}", path.display()));
            }
            _ => {}
        }
        // create_new: never through a link or onto a file someone else made.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(TempFile {
            path,
            file,
            renamed: false,
        })
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.renamed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
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
    fn missing_parents_are_made_private_and_existing_ones_left_alone() {
        let root = tempfile::tempdir().unwrap();
        std::fs::set_permissions(root.path(), Permissions::from_mode(0o755)).unwrap();
        let path = root.path().join("a/b/users.conf");
        write_private(&path, b"x").unwrap();
        for d in ["a", "a/b"] {
            let mode = std::fs::metadata(root.path().join(d)).unwrap().mode() & 0o777;
            assert_eq!(mode, 0o700, "{d}");
        }
        assert_eq!(
            std::fs::metadata(root.path()).unwrap().mode() & 0o777,
            0o755
        );
    }

    #[test]
    fn a_failed_write_leaves_no_temp_file_and_the_old_file_whole() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("users.conf");
        std::fs::write(&path, "old").unwrap();
        let e = write_with(&path, |f| {
            f.write_all(b"$2a$11$half a hash")?;
            Err(std::io::Error::from_raw_os_error(28))
        })
        .unwrap_err();
        assert!(format!("{e:#}").contains("users.conf.tmp"), "{e:#}");
        assert!(!tmp_beside(&path).exists(), "the temp file was left behind");
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
    }

    #[test]
    fn only_a_regular_file_is_replaced() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("dir");
        std::fs::create_dir(&dir).unwrap();
        let link = root.path().join("link");
        std::os::unix::fs::symlink(root.path().join("elsewhere"), &link).unwrap();
        let fifo = root.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for (path, kind) in [
            (&dir, "directory"),
            (&link, "symbolic link"),
            (&fifo, "FIFO (named pipe)"),
        ] {
            let e = write_private(path, b"$2a$11$x").unwrap_err();
            let n = e
                .downcast_ref::<NotRegular>()
                .expect("a NotRegular refusal");
            assert_eq!(n.kind, kind);
            assert!(!tmp_beside(path).exists(), "{kind}: temp file left");
        }
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
        assert!(std::fs::read_dir(&dir).unwrap().next().is_none());
        // A symlinked directory is not narrowed through the link.
        let e = private_dir(&link).unwrap_err();
        assert!(format!("{e:#}").contains("symbolic link"), "{e:#}");
    }

    #[test]
    fn dash_is_standard_output() {
        assert_eq!(OutPath::from(OsStr::new("-")), OutPath::Stdout);
        assert_eq!(
            OutPath::from(OsStr::new("./-")),
            OutPath::File(PathBuf::from("./-"))
        );
    }
}

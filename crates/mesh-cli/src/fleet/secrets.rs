//! The secrets directory of one store: minted secrets staged as temporary
//! files, placed only once the store has recorded their public keys or
//! hashes, and a marker saying which store the directory belongs to.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use mesh_store::Secret;

/// The file naming the store whose secrets a directory holds.
pub const MARKER: &str = ".mesh-store";

/// Refuses a secrets directory marked for another store than `store_id`
/// (`None`: a store not made yet): its secrets would be overwritten by this
/// store's, and the other store's principals locked out. Returns whether the
/// directory still needs its marker.
pub fn check_marker(dir: &Path, store_id: Option<&str>) -> anyhow::Result<bool> {
    let path = dir.join(MARKER);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut lines = text.lines();
    let marked = lines.next().unwrap_or("").trim();
    if Some(marked) == store_id {
        return Ok(false);
    }
    let url = lines.next().unwrap_or("an unnamed store").trim();
    let this = match store_id {
        Some(id) => format!("this store {id}"),
        None => "this store (not created yet)".to_string(),
    };
    bail!(
        "{} holds the secrets of store {marked} ({url}), not of {this}; \
         give this store a --secrets-dir of its own",
        dir.display()
    )
}

/// The marker's text: the id, then the (redacted) URL for the message a
/// second store gets.
pub fn marker_text(store_id: &str, store_url: &str) -> String {
    format!("{store_id}\n{store_url}\n")
}

/// Where `principal`'s secret is placed.
pub fn target(dir: &Path, principal: &str) -> PathBuf {
    dir.join(principal)
}

/// Refuses, before anything is minted, a secret path that cannot take a
/// file: once the store records a key or hash, a secret that cannot be
/// placed is lost.
pub fn check_target(path: &Path, principal: &str) -> anyhow::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        Ok(m) if m.file_type().is_file() => Ok(()),
        Ok(m) => {
            let what = if m.is_dir() {
                "a directory"
            } else {
                "not a regular file"
            };
            bail!(
                "{} is {what}, where the secret of {principal} goes; move it away and load again",
                path.display()
            )
        }
    }
}

/// Files written but not yet placed; dropped without [`Staged::place`], it
/// removes every one, so a failed load leaves the directory as it was.
#[derive(Default)]
pub struct Staged {
    files: Vec<(PathBuf, PathBuf, String)>,
}

impl Staged {
    /// Writes `secret` (mode 0600) to a temporary file beside its target.
    pub fn stage(&mut self, dir: &Path, principal: &str, secret: &Secret) -> anyhow::Result<()> {
        self.stage_bytes(dir, principal, secret.expose().as_bytes())
    }

    pub fn stage_bytes(&mut self, dir: &Path, name: &str, bytes: &[u8]) -> anyhow::Result<()> {
        let tmp = dir.join(format!(".{name}.pending"));
        // A leftover from an interrupted run keeps its old mode if reopened.
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
        self.files
            .push((tmp.clone(), target(dir, name), name.to_string()));
        f.write_all(bytes)
            .and_then(|()| f.sync_all())
            .with_context(|| format!("writing {}", tmp.display()))
    }

    /// Renames every file into place. Returns the names whose file could not
    /// be placed (the store holds only their public keys or hashes: they must be re-minted).
    pub fn place(mut self) -> Vec<(String, anyhow::Error)> {
        let mut failed = Vec::new();
        for (tmp, target, name) in std::mem::take(&mut self.files) {
            if let Err(e) = std::fs::rename(&tmp, &target) {
                let _ = std::fs::remove_file(&tmp);
                failed.push((
                    name,
                    anyhow::Error::new(e).context(format!("placing {}", target.display())),
                ));
            }
        }
        failed
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        for (tmp, _, _) in &self.files {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

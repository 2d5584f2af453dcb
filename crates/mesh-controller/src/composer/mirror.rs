//! A clustered bus over machines: each server must serve the same users
//! file, but the active controller writes only its own machine's. Every
//! controller (standing by or active) keeps its machine's file at the
//! revision the store shares ([`Share`](super::Share)) and signals the
//! servers running here; the active one's canary then finds every server
//! serving the composition. A machine whose controller is gone keeps its
//! last file, and the canary names its server.

use std::fs::File;
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mesh_core::users_file;
use mesh_store::Store;
use tracing::{info, warn};

use super::publish::{self, PublishError, Reloader};
use crate::safe_write::{WriteError, write_private};

/// Why this machine's file was not brought to the store's revision.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error("could not read the shared users file from the store")]
    Store(#[from] mesh_store::StoreError),
    #[error("could not write this machine's users file")]
    Write(#[from] WriteError),
    #[error("could not signal this machine's servers to reload")]
    Signal(#[from] PublishError),
}

/// Holds `<users file>.lock` (flock) until dropped: the composer's write
/// and a mirror's look-then-write never interleave, so a mirror that read
/// the store before a composition was shared never writes over it.
pub(crate) fn lock(users_file: &Path) -> Result<File, WriteError> {
    let mut name = users_file.as_os_str().to_owned();
    name.push(".lock");
    let path = PathBuf::from(name);
    let err = |action| {
        let path = path.clone();
        move |source| WriteError {
            action,
            path,
            source,
        }
    };
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(err("open"))?;
    use std::os::fd::AsRawFd as _;
    // SAFETY: flock(2) on a descriptor this frame owns.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(err("lock")(std::io::Error::last_os_error()));
    }
    Ok(f)
}

/// The shared revision this machine's file is at (its first line).
fn local_revision(users_file: &Path) -> Option<i64> {
    let f = File::open(users_file).ok()?;
    let mut first = String::new();
    std::io::BufReader::new(f).read_line(&mut first).ok()?;
    users_file::shared_revision(first.trim_end())
}

/// Brings `users_file` to the store's shared revision if it is older:
/// the revision written, if one was.
pub async fn mirror_once(
    store: &Store,
    users_file: &Path,
    reloader: &Reloader,
) -> Result<Option<i64>, MirrorError> {
    let shared = store.shared_users_file_revision().await?;
    if !users_file::mirror_due(local_revision(users_file), shared) {
        return Ok(None);
    }
    let Some(shared) = store.shared_users_file().await? else {
        return Ok(None);
    };
    let path = users_file.to_path_buf();
    let revision = shared.revision;
    let written = tokio::task::spawn_blocking(move || {
        let _held = lock(&path)?;
        // Looked at again under the lock: the composer may have written
        // a newer one since.
        if !users_file::mirror_due(local_revision(&path), Some(shared.revision)) {
            return Ok(false);
        }
        let text = users_file::with_shared_revision(shared.revision, &shared.text);
        write_private(&path, text.as_bytes()).map(|()| true)
    })
    .await
    .expect("the writer does not panic")?;
    if !written {
        return Ok(None);
    }
    publish::signal(reloader).await?;
    Ok(Some(revision))
}

/// Keeps `users_file` at the store's shared revision, looking every
/// `every`, until the task is dropped.
pub async fn mirror(store: Store, users_file: PathBuf, reloader: Reloader, every: Duration) {
    let mut said: Option<String> = None;
    loop {
        match mirror_once(&store, &users_file, &reloader).await {
            Ok(Some(revision)) => {
                said = None;
                info!(
                    revision,
                    "users file written from the store: this machine's servers reloaded"
                );
            }
            Ok(None) => said = None,
            Err(e) => {
                let text = crate::chain::error_chain(&e);
                // Once per kind of failure, not once a second.
                if said.as_ref() != Some(&text) {
                    warn!(error = %text, "could not bring this machine's users file to the store's");
                    said = Some(text);
                }
            }
        }
        tokio::time::sleep(every).await;
    }
}

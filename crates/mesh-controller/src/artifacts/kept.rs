//! Artifacts the controller keeps itself, where the bus keeps none (a mesh
//! on RabbitMQ): each file under its SHA-256 in the state directory's
//! `artifacts/`, recorded as [`super::put_file`] records one, and handed to
//! hosts piece by piece (`daemon/artifact_fetches.rs`).

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};

use mesh_core::names::Name;
use mesh_store::Store;

use super::{ArtifactError, Put, digest_file};

/// Where the controller of the state directory `dir` keeps artifacts.
pub const KEPT_DIR: &str = "artifacts";

/// The file of the artifact `sha256` (64 hex digits, checked by the
/// caller) under the state directory `dir`.
pub fn kept_path(dir: &Path, sha256: &str) -> PathBuf {
    dir.join(KEPT_DIR).join(sha256)
}

/// Keeps `file` under its digest (written aside, then renamed: a reader
/// never sees half of it) and records it as version `version` (its
/// digest's first 12 hex digits when none) of `module`'s `name`.
pub async fn keep_file(
    store: &Store,
    dir: &Path,
    module: &Name,
    name: &Name,
    file: &Path,
    version: Option<&str>,
) -> Result<Put, ArtifactError> {
    let (size, sha256) = digest_file(file)?;
    let (version, reference) = super::checked(store, module, name, file, &sha256, version).await?;
    let kept = kept_path(dir, &sha256);
    let existed = digest_file(&kept).is_ok_and(|(s, d)| s == size && d == sha256);
    if !existed {
        let io = |source| ArtifactError::Read {
            path: kept.clone(),
            source,
        };
        std::fs::create_dir_all(dir.join(KEPT_DIR)).map_err(io)?;
        let partial = kept.with_extension(format!("partial-{}", std::process::id()));
        std::fs::copy(file, &partial).map_err(io)?;
        std::fs::rename(&partial, &kept).map_err(io)?;
    }
    if digest_file(&kept)? != (size, sha256.clone()) {
        return Err(ArtifactError::Refused(format!(
            "{} changed while it was being kept; nothing was recorded",
            file.display()
        )));
    }
    // No object store: the id names the copy kept here.
    let nuid = hex::encode(rand::random::<[u8; 11]>());
    super::record(store, reference, size, version, nuid, existed).await
}

/// `len` bytes of the kept artifact `sha256` from `offset`.
pub fn read_piece(dir: &Path, sha256: &str, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
    let mut f = std::fs::File::open(kept_path(dir, sha256))?;
    f.seek(SeekFrom::Start(offset))?;
    let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    f.take(len).read_to_end(&mut out)?;
    Ok(out)
}

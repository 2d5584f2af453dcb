//! Putting an artifact, one path for `mesh artifact put` and `mesh up` on
//! the controller's machine and the controller putting a person's upload:
//! the file stored in the bus's object store under its content's digest,
//! then recorded under a version of its registered module.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mesh_core::artifact::Reference;
use mesh_core::names::Name;
use mesh_store::{Store, StoreError};
use sha2::{Digest as _, Sha256};

/// How long a put may take: a 64 MiB artifact over loopback takes a
/// second or two; a stalled broker must not hang the command.
pub const TRANSFER_WITHIN: Duration = Duration::from_secs(600);

/// Why an artifact was not put.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// It cannot be put as asked; the text says what to do.
    #[error("{0}")]
    Refused(String),
    #[error("reading {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("reaching the bus")]
    Connect(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("the artifact store")]
    Bucket(#[from] mesh_bus::artifacts::BucketError),
    #[error(transparent)]
    Put(#[from] mesh_bus::artifacts::PutError),
    #[error("recording the artifact")]
    Store(#[from] StoreError),
}

mod kept;
pub use kept::{KEPT_DIR, keep_file, kept_path, read_piece};

/// The version an artifact is recorded under (`version`, or its digest's
/// first 12 hex digits) and its reference; refused before any byte is
/// stored when the version is no version or the module is not registered
/// (an artifact of a module the mesh does not know would never run).
async fn checked(
    store: &Store,
    module: &Name,
    name: &Name,
    file: &Path,
    sha256: &str,
    version: Option<&str>,
) -> Result<(String, Reference), ArtifactError> {
    if !file.is_file() {
        return Err(ArtifactError::Refused(format!(
            "{} is not a file",
            file.display()
        )));
    }
    let version = match version {
        Some(v) if !mesh_store::version_ok(v) => {
            return Err(ArtifactError::Refused(format!(
                "--version {v:?}: use letters, digits, `.`, `-` and `_`, at most 64 characters"
            )));
        }
        Some(v) => v.to_string(),
        None => sha256[..12].to_string(),
    };
    if store.module(module).await?.is_none() {
        return Err(ArtifactError::Refused(format!(
            "module {module} is not registered; register its manifest with `mesh catalogue register` first"
        )));
    }
    let reference = Reference {
        module: module.clone(),
        artifact: name.clone(),
        sha256: sha256.to_string(),
    };
    Ok((version, reference))
}

/// What [`put_file`] did.
#[derive(Debug)]
pub struct Put {
    pub reference: Reference,
    pub size: u64,
    pub sha256: String,
    pub version: String,
    /// The bytes were in the object store already.
    pub existed: bool,
    /// The version's record was written now (not there before).
    pub recorded: bool,
}

/// Size and SHA-256 (lowercase hex) of `path`, read in blocks.
pub fn digest_file(path: &Path) -> Result<(u64, String), ArtifactError> {
    let read = |source| ArtifactError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(read)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(read)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok((size, hex::encode(hasher.finalize())))
}

/// Stores `file` as artifact `name` of the registered `module` through the
/// bus `connect` reaches (awaited only once the records allow the put) and
/// records it under `version`, else the first 12 hex digits of its
/// SHA-256. A missing bucket is made with `replicas` copies (the genesis's
/// servers); an existing one keeps the copies it has.
pub async fn put_file<E>(
    store: &Store,
    connect: impl Future<Output = Result<async_nats::jetstream::Context, E>>,
    module: &Name,
    name: &Name,
    file: &Path,
    version: Option<&str>,
    replicas: usize,
) -> Result<Put, ArtifactError>
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if !file.is_file() {
        // Before reading it: a directory has no digest.
        return Err(ArtifactError::Refused(format!(
            "{} is not a file",
            file.display()
        )));
    }
    let (size, sha256) = digest_file(file)?;
    let (version, reference) = checked(store, module, name, file, &sha256, version).await?;
    let js = connect
        .await
        .map_err(|e| ArtifactError::Connect(e.into()))?;
    mesh_bus::artifacts::ensure_bucket_made_with(&js, replicas).await?;
    let stored = tokio::time::timeout(
        TRANSFER_WITHIN,
        mesh_bus::artifacts::put(&js, &reference.object_name(), file),
    )
    .await
    .map_err(|_| {
        ArtifactError::Refused(format!(
            "storing {} took over {TRANSFER_WITHIN:?}",
            file.display()
        ))
    })??;
    if stored.sha256 != sha256 || stored.size != size {
        return Err(ArtifactError::Refused(format!(
            "{} changed while it was being stored; nothing was recorded",
            file.display()
        )));
    }
    record(store, reference, size, version, stored.nuid, stored.existed).await
}

/// Records the artifact stored (or kept) under `nuid` as `version` of its
/// module: what [`put_file`] and [`keep_file`] did.
async fn record(
    store: &Store,
    reference: Reference,
    size: u64,
    version: String,
    nuid: String,
    existed: bool,
) -> Result<Put, ArtifactError> {
    let recorded = store
        .record_upload(&mesh_store::Upload {
            module: reference.module.clone(),
            version: version.clone(),
            name: reference.artifact.clone(),
            sha256: reference.sha256.clone(),
            size,
            nuid,
        })
        .await?;
    Ok(Put {
        sha256: reference.sha256.clone(),
        reference,
        size,
        version,
        existed,
        recorded,
    })
}

//! The host's side of artifacts (DESIGN §6 "Artifacts", "Run from an
//! artifact"): each artifact a declaration names is fetched through the
//! reads the host is granted for it alone, checked against the signed
//! declaration's size and SHA-256, kept in a content-addressed cache (0700)
//! and checked again before every start — a cache file altered on disk is
//! fetched again, never run. The command's `${artifact:NAME}` becomes the
//! cached file's path.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mesh_bus::Refusals;
use mesh_bus::seam::Bus;
use mesh_core::declaration::ArtifactDecl;
use mesh_core::names::Name;
use mesh_core::placeholders::{self, Placeholder};
use sha2::{Digest as _, Sha256};

/// The cache, under the host's state directory.
pub const CACHE_DIR: &str = "artifacts";

/// How long one artifact's fetch may take before it counts as failed (and
/// is tried again with backoff).
const FETCH_WITHIN: Duration = Duration::from_secs(300);

/// Where the host keeps what it fetched.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    pub fn new(state_dir: &Path) -> Cache {
        Cache {
            dir: state_dir.join(CACHE_DIR),
        }
    }

    /// The cached file of content `sha256`: named by its digest, so two
    /// modules (or versions) with the same bytes share it.
    pub fn path(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("sha256-{sha256}"))
    }

    /// Each of `artifacts` as a checked file in the cache, fetched when it
    /// is missing or no longer what the declaration says. The error names
    /// the artifact and why.
    pub async fn ensure_all(
        &self,
        client: &Bus,
        node: &mesh_core::names::Name,
        refusals: &Refusals,
        artifacts: &[ArtifactDecl],
    ) -> Result<BTreeMap<Name, PathBuf>, String> {
        let mut out = BTreeMap::new();
        for a in artifacts {
            let path = self
                .ensure(client, node, refusals, a)
                .await
                .map_err(|why| format!("artifact {} ({}): {why}", a.name, a.reference))?;
            out.insert(a.name.clone(), path);
        }
        Ok(out)
    }

    async fn ensure(
        &self,
        client: &Bus,
        node: &mesh_core::names::Name,
        refusals: &Refusals,
        a: &ArtifactDecl,
    ) -> Result<PathBuf, String> {
        if !mesh_core::digest::is_sha256_hex(&a.sha256) {
            return Err("the declared SHA-256 is not 64 lowercase hex digits".into());
        }
        let path = self.path(&a.sha256);
        match check(&path, a.size, &a.sha256) {
            Ok(true) => return Ok(path),
            Ok(false) => {
                tracing::warn!(artifact = %a.name, path = %path.display(), "the cached file is not what the declaration says; fetching it again");
                let _ = std::fs::remove_file(&path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("reading the cached {}: {e}", path.display())),
        }
        make_private_dir(&self.dir).map_err(|e| format!("creating {}: {e}", self.dir.display()))?;
        let name = a.object_name().map_err(|e| e.to_string())?;
        let want = mesh_bus::artifacts::Wanted {
            name: &name,
            nuid: &a.nuid,
            size: a.size,
            sha256: &a.sha256,
        };
        match client.nats() {
            Some(nats) => {
                mesh_bus::artifacts::fetch(nats.client(), refusals, &want, &path, FETCH_WITHIN)
                    .await
                    .map_err(|e| error_chain(&e))?;
            }
            // No object store: the controller hands it over piece by piece.
            None => tokio::time::timeout(FETCH_WITHIN, fetch_pieces(client, node, a, &path))
                .await
                .map_err(|_| format!("not fetched within {FETCH_WITHIN:?}"))??,
        };
        // Executable, inside a directory only the host user enters.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("making {} executable: {e}", path.display()))?;
        tracing::info!(artifact = %a.name, size = a.size, "artifact fetched and checked");
        Ok(path)
    }
}

/// The artifact `a`, asked of the controller piece by piece as node
/// `node`'s host, written aside, checked (size and SHA-256), then renamed
/// to `path`.
async fn fetch_pieces(
    bus: &Bus,
    node: &mesh_core::names::Name,
    a: &ArtifactDecl,
    path: &Path,
) -> Result<(), String> {
    use base64::Engine as _;
    use mesh_core::artifact_fetch::{FetchRequest, Piece};
    use std::io::Write as _;
    let subject = mesh_core::subjects::artifact_fetch(node);
    let partial = path.with_extension("partial");
    let mut out = std::fs::File::create(&partial)
        .map_err(|e| format!("creating {}: {e}", partial.display()))?;
    let mut offset = 0;
    while offset < a.size {
        let req = FetchRequest {
            sha256: a.sha256.clone(),
            offset,
        };
        let body = serde_json::to_vec(&req).expect("a request serializes");
        let answer = bus
            .request(&subject, &body, PIECE_WITHIN)
            .await
            .map_err(|e| format!("asking the controller: {}", error_chain(&e)))?;
        let piece: Piece = match mesh_core::tool::parse_reply(&answer) {
            Ok(mesh_core::tool::ToolReply::Ok(v)) => {
                serde_json::from_value(v).map_err(|e| format!("the controller's piece: {e}"))?
            }
            Ok(mesh_core::tool::ToolReply::Error(why)) => {
                return Err(format!("the controller refused: {why}"));
            }
            Err(e) => return Err(format!("the controller's answer: {e}")),
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(piece.data)
            .map_err(|e| format!("the controller's piece: {e}"))?;
        if bytes.is_empty() || piece.size != a.size {
            return Err(format!(
                "the controller holds {} bytes where the declaration says {}",
                piece.size, a.size
            ));
        }
        out.write_all(&bytes)
            .map_err(|e| format!("writing {}: {e}", partial.display()))?;
        offset += bytes.len() as u64;
    }
    out.sync_all()
        .map_err(|e| format!("writing {}: {e}", partial.display()))?;
    drop(out);
    if !check(&partial, a.size, &a.sha256).map_err(|e| e.to_string())? {
        let _ = std::fs::remove_file(&partial);
        return Err(
            "what the controller handed over is not what the declaration says (size or SHA-256)"
                .into(),
        );
    }
    std::fs::rename(&partial, path).map_err(|e| format!("keeping {}: {e}", path.display()))
}

/// How long one piece may take to come.
const PIECE_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// Whether `path` holds `size` bytes whose SHA-256 is `sha256`.
fn check(path: &Path, size: u64, sha256: &str) -> std::io::Result<bool> {
    let mut file = std::fs::File::open(path)?;
    if file.metadata()?.len() != size {
        return Ok(false);
    }
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()) == sha256)
}

fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// `value` with each `${artifact:NAME}` replaced by its cached file and
/// each `$${` read as a literal `${` (the controller wrote it so). Any
/// other placeholder was the controller's to fill: one left here is
/// refused, never run as text.
pub fn fill(value: &str, paths: &BTreeMap<Name, PathBuf>) -> Result<String, String> {
    let template = placeholders::parse(value).map_err(|errors| {
        errors
            .first()
            .map(|e| e.message.clone())
            .unwrap_or_else(|| "a placeholder does not read".into())
    })?;
    template
        .fill(|p| match p {
            Placeholder::Artifact { name } => paths.get(name).map(|p| p.display().to_string()),
            _ => None,
        })
        .map_err(|p| format!("{p} is not an artifact this declaration names"))
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_cached_paths_and_escapes_literals() {
        let paths = BTreeMap::from([(
            Name::new("bin").unwrap(),
            PathBuf::from("/s/artifacts/sha256-ab"),
        )]);
        assert_eq!(
            fill("${artifact:bin}", &paths).unwrap(),
            "/s/artifacts/sha256-ab"
        );
        assert_eq!(
            fill("--x=${artifact:bin} $${HOME} $5", &paths).unwrap(),
            "--x=/s/artifacts/sha256-ab ${HOME} $5"
        );
        let e = fill("${artifact:other}", &paths).unwrap_err();
        assert!(e.contains("${artifact:other} is not an artifact"), "{e}");
        // Another kind left for the host is refused, not run as text.
        let e = fill("${secret:db}", &paths).unwrap_err();
        assert!(e.contains("${secret:db}"), "{e}");
        assert!(fill("${artifact:bin", &paths).is_err());
    }

    #[test]
    fn a_cached_file_checks_only_with_its_size_and_digest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"hello").unwrap();
        let sha = hex::encode(Sha256::digest(b"hello"));
        assert!(check(&path, 5, &sha).unwrap());
        assert!(!check(&path, 6, &sha).unwrap());
        std::fs::write(&path, b"hellp").unwrap();
        assert!(!check(&path, 5, &sha).unwrap());
        assert!(check(&dir.path().join("none"), 5, &sha).is_err());
    }
}

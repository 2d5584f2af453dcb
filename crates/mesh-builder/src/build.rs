//! One build, start to end: the request read, the repository fetched and
//! checked out, the manifest's `[build]` run, its artifacts put, its inputs
//! read. Whatever goes wrong becomes a failure with its reason and the log's
//! tail — never a panic, never a silent drop.

use std::path::{Path, PathBuf};

use mesh_bus::seam::{Bus, NatsSide};
use mesh_core::artifact::Reference;
use mesh_core::build::{BuildRequest, Built, BuiltArtifact, log_tail, rev_ok};
use mesh_core::manifest::{self, Manifest};
use mesh_core::names::Name;
use mesh_sdk::Module;

use crate::Options;
use crate::{git, inputs, run};

/// `build` work as read from its envelope, its fields checked.
pub type Request = BuildRequest;

/// Why work is not a build request: it is terminated.
/// The artifact store is NATS's object store (`ARTIFACTS`); a mesh on
/// RabbitMQ has none the build machine writes to yet.
#[derive(Debug, thiserror::Error)]
#[error(
    "artifacts on an AMQP mesh are not stored by the build machine yet: {what} needs the artifact store, which this build machine reaches on NATS only"
)]
pub struct NoArtifactStore {
    pub what: String,
}

/// The NATS connection the artifact store is reached through.
fn artifact_store<'m>(module: &'m Module, what: &str) -> Result<&'m NatsSide, NoArtifactStore> {
    match module.bus() {
        Bus::Nats(n) => Ok(n),
        Bus::Amqp(_) => Err(NoArtifactStore {
            what: what.to_string(),
        }),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Failure {
    #[error("not build work: {0}")]
    Malformed(#[from] serde_json::Error),
    #[error("build work with id {0:?}: an id is 1 to 128 printable characters")]
    BadId(String),
    #[error("build {id}: rev {rev:?} cannot be handed to git (empty, a space, or a leading `-`)")]
    BadRev { id: String, rev: String },
    #[error("build {id}: repository {repository:?} {why}")]
    BadRepository {
        id: String,
        repository: String,
        why: String,
    },
}

/// Reads `build` work's payload, refusing what could never be built.
pub fn read_request(payload: &serde_json::Value) -> Result<Request, Failure> {
    let r: Request = serde_json::from_value(payload.clone())?;
    if !mesh_core::build::id_ok(&r.id) {
        return Err(Failure::BadId(r.id));
    }
    if !rev_ok(&r.rev) {
        return Err(Failure::BadRev {
            id: r.id,
            rev: r.rev,
        });
    }
    if let Err(why) = manifest::repository_ok(&r.repository) {
        return Err(Failure::BadRepository {
            id: r.id,
            repository: r.repository,
            why,
        });
    }
    Ok(r)
}

/// Where repositories and builds live: `repos/` (one mirror per URL),
/// `builds/` (one clean directory per build, removed after), `home/` (the
/// builds' HOME, kept: a toolchain's caches survive between builds).
#[derive(Debug, Clone)]
pub struct Cache {
    pub root: PathBuf,
}

impl Cache {
    pub fn prepare(root: &Path) -> std::io::Result<Cache> {
        use std::os::unix::fs::DirBuilderExt;
        for sub in ["repos", "home", "tmp"] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(root.join(sub))?;
        }
        // What a build machine killed mid-build left: nobody finishes it.
        let builds = root.join("builds");
        if builds.exists() {
            std::fs::remove_dir_all(&builds)?;
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&builds)?;
        Ok(Cache {
            root: root.to_path_buf(),
        })
    }

    fn build_dir(&self, id: &str) -> PathBuf {
        // An id is printable ASCII; a file name from it must not climb.
        let safe: String = id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let tag = hex::encode(&<sha2::Sha256 as sha2::Digest>::digest(id.as_bytes())[..4]);
        self.root.join("builds").join(format!("{safe}-{tag}"))
    }
}

/// A failure as announced: no module, the reason, the log's tail.
fn failed(id: &str, reason: String, log: &str) -> Built {
    Built {
        id: id.to_string(),
        module: None,
        version: None,
        artifacts: vec![],
        inputs: vec![],
        failure: Some(reason),
        log_tail: log_tail(log),
    }
}

/// Builds `request` and says how it went.
pub async fn build(module: &Module, cache: &Cache, options: &Options, request: &Request) -> Built {
    let dir = cache.build_dir(&request.id);
    let built = match build_in(module, cache, options, request, &dir).await {
        Ok(b) => b,
        Err((reason, log)) => failed(&request.id, reason, &log),
    };
    let _ = std::fs::remove_dir_all(&dir);
    built
}

type Failed = (String, String);

async fn build_in(
    module: &Module,
    cache: &Cache,
    options: &Options,
    request: &Request,
    dir: &Path,
) -> Result<Built, Failed> {
    let no_log = |reason: String| (reason, String::new());
    // Said before anything is fetched or run: the build's artifacts could
    // not be put anyway.
    artifact_store(module, &format!("build {}", request.id)).map_err(|e| no_log(e.to_string()))?;
    let mirror = git::fetch(&cache.root.join("repos"), &request.repository)
        .await
        .map_err(|e| no_log(e.to_string()))?;
    let commit = git::resolve(&mirror, &request.rev)
        .await
        .map_err(|e| no_log(e.to_string()))?;
    let checkout = dir.join("src");
    git::checkout(&mirror, &commit, &checkout)
        .await
        .map_err(|e| no_log(e.to_string()))?;
    let manifest = read_manifest(&checkout, &request.module, &commit).map_err(no_log)?;
    let Some(spec) = manifest.build.as_ref() else {
        return Err(no_log(format!(
            "{} at {commit} has no [build] section; add `[build] command = [...]` and `artifacts = {{ NAME = \"path\" }}`",
            request.module
        )));
    };
    // Inputs are read from the files as checked out, before the build
    // writes anything: what the module's source names, not what it made.
    let found = inputs::read(&checkout).map_err(no_log)?;
    for (reference, path) in &found {
        let store = artifact_store(module, &format!("input {reference} (named in {path})"))
            .map_err(|e| no_log(e.to_string()))?;
        match mesh_bus::artifacts::stat(store.client(), &reference.object_name()).await {
            Ok(Some(stored)) if stored.sha256.as_deref() == Some(reference.sha256.as_str()) => {}
            Ok(_) => {
                return Err(no_log(format!(
                    "input {reference} (named in {path}) is not in the artifact store; put or build it first"
                )));
            }
            Err(e) => {
                return Err(no_log(format!(
                    "could not confirm input {reference} (named in {path}): {e}"
                )));
            }
        }
    }
    let command: Vec<String> = spec.command.iter().map(|c| c.value.clone()).collect();
    let ran = run::run(
        &command,
        &checkout,
        &dir.join("build.log"),
        &run::environment(&cache.root, &request.module, &commit),
        options.time_limit,
    )
    .await;
    let log = ran.log;
    if let Some(reason) = ran.failure {
        return Err((reason, log));
    }
    let mut artifacts = Vec::with_capacity(spec.artifacts.len());
    for a in &spec.artifacts {
        let built = put(
            module,
            &request.module,
            &a.name.value,
            &checkout,
            &a.path.value,
        )
        .await
        .map_err(|reason| (reason, log.clone()))?;
        artifacts.push(built);
    }
    Ok(Built {
        id: request.id.clone(),
        module: Some(request.module.clone()),
        version: Some(commit),
        artifacts,
        inputs: found.iter().map(|(r, _)| r.to_string()).collect(),
        failure: None,
        log_tail: log_tail(&log),
    })
}

fn read_manifest(checkout: &Path, module: &Name, commit: &str) -> Result<Manifest, String> {
    let path = checkout.join("mesh.toml");
    let bytes = std::fs::read(&path)
        .map_err(|e| format!("{module} at {commit} has no readable mesh.toml at its root: {e}"))?;
    let manifest = manifest::parse_bytes("mesh.toml", &bytes).map_err(|errors| {
        let first = errors.first().map(|d| d.to_string()).unwrap_or_default();
        format!(
            "{module} at {commit}: mesh.toml does not parse ({} errors; first: {first})",
            errors.len()
        )
    })?;
    if manifest.name.value != *module {
        return Err(format!(
            "the repository's mesh.toml at {commit} is module {}, not {module}",
            manifest.name.value
        ));
    }
    Ok(manifest)
}

/// Hashes the artifact at `relative` (a regular file inside the checkout)
/// and puts it under its content's name. Already stored with these bytes:
/// success.
async fn put(
    module: &Module,
    of: &Name,
    name: &Name,
    checkout: &Path,
    relative: &str,
) -> Result<BuiltArtifact, String> {
    let path = checkout.join(relative);
    let real = std::fs::canonicalize(&path)
        .map_err(|e| format!("artifact {name}: the build made no {relative} ({e})"))?;
    let root = std::fs::canonicalize(checkout).map_err(|e| e.to_string())?;
    if !real.starts_with(&root) || !real.is_file() {
        return Err(format!(
            "artifact {name}: {relative} is not a file inside the build (a link out of it, or a directory)"
        ));
    }
    let sha256 = run::sha256_file(&real).map_err(|e| format!("artifact {name}: {e}"))?;
    let reference = Reference {
        module: of.clone(),
        artifact: name.clone(),
        sha256,
    };
    let store = artifact_store(module, &format!("artifact {name}")).map_err(|e| e.to_string())?;
    let stored = mesh_bus::artifacts::put(store.js(), &reference.object_name(), &real)
        .await
        .map_err(|e| format!("artifact {name}: could not put it: {}", chain(&e)))?;
    Ok(BuiltArtifact {
        name: name.clone(),
        reference: reference.to_string(),
        size: stored.size,
        sha256: stored.sha256,
    })
}

pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(c) = source {
        s.push_str(": ");
        s.push_str(&c.to_string());
        source = c.source();
    }
    s
}

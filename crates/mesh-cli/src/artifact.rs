//! `mesh artifact put|list|get`: the code a module runs, kept in the bus's
//! object store `ARTIFACTS` under its content's digest and recorded under
//! a version of its module (DESIGN §6 "Artifacts"). Put and get go through
//! the broker as the controller; the records say which versions exist and
//! what a host is granted to read.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use mesh_controller::Genesis;
use mesh_core::artifact::Reference;
use mesh_core::names::Name;
use serde::Serialize;
use sha2::{Digest as _, Sha256};

use crate::authority::{open_existing_store, open_store_to_write};
use crate::output::{self, ListFormat};
use crate::state::MeshArgs;

#[derive(Debug, Args)]
pub struct ArtifactArgs {
    #[command(subcommand)]
    pub command: ArtifactCommand,
}

#[derive(Debug, Subcommand)]
pub enum ArtifactCommand {
    /// Store a file as an artifact of a module and record it under a
    /// version (`--version`, else the first 12 hex digits of its SHA-256).
    /// The same bytes put again are the same artifact, not an error.
    #[command(after_help = "Examples:
  mesh artifact put target/release/audit-log --module audit --name audit-log
  mesh artifact put image.oci --module web --name image --version 1.4.0")]
    Put(PutArgs),
    /// Every recorded artifact: module, version, name, size, digest.
    #[command(
        after_help = "Examples:\n  mesh artifact list\n  mesh artifact list --module audit --output json"
    )]
    List(ListArgs),
    /// Fetch an artifact into a file, checking its size and SHA-256.
    #[command(
        after_help = "Example:\n  mesh artifact get artifact-store://audit/audit-log@sha256:9f86… -o audit-log"
    )]
    Get(GetArgs),
}

#[derive(Debug, Args)]
pub struct PutArgs {
    pub file: PathBuf,
    /// The module it belongs to (registered).
    #[arg(long)]
    pub module: String,
    /// Its name, as the module's `${artifact:NAME}` says it.
    #[arg(long)]
    pub name: String,
    /// The version to record it under (letters, digits, `.`, `-`, `_`).
    #[arg(long)]
    pub version: Option<String>,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[arg(long)]
    pub module: Option<String>,
    #[arg(long, value_enum, default_value_t = ListFormat::Text)]
    pub output: ListFormat,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    /// `artifact-store://MODULE/ARTIFACT@sha256:HEX`.
    pub reference: String,
    /// Where to write it (replaced only once the whole file checks).
    #[arg(short = 'o', long = "output-file", value_name = "FILE")]
    pub output: PathBuf,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

/// An artifact as `mesh artifact list` shows it.
#[derive(Debug, Serialize)]
pub struct ArtifactView {
    pub module: String,
    pub version: String,
    pub name: String,
    pub reference: String,
    pub size: u64,
    pub sha256: String,
    /// Unix milliseconds.
    pub recorded_at: i64,
}

pub fn run(args: &ArtifactArgs) -> anyhow::Result<ExitCode> {
    match &args.command {
        ArtifactCommand::Put(a) => put(a),
        ArtifactCommand::List(a) => list(a),
        ArtifactCommand::Get(a) => get(a),
    }
}

/// How long a put or a get may take: a 64 MiB artifact over loopback takes
/// a second or two; a stalled broker must not hang the command.
const TRANSFER_WITHIN: Duration = Duration::from_secs(600);

/// Size and SHA-256 (lowercase hex) of `path`, read in blocks.
fn digest_file(path: &Path) -> anyhow::Result<(u64, String)> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = file
            .read(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok((size, hex::encode(hasher.finalize())))
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

/// Stores `file` as artifact `name` of the registered `module` through the
/// bus `connect` reaches (as the controller; awaited only once the records
/// allow the put) and records it under `version`, else the first 12 hex
/// digits of its SHA-256. A missing bucket is made with `replicas` copies
/// (the genesis's servers); an existing one keeps the copies it has.
pub async fn put_file(
    store: &mesh_store::Store,
    connect: impl Future<Output = anyhow::Result<async_nats::jetstream::Context>>,
    module: &Name,
    name: &Name,
    file: &Path,
    version: Option<&str>,
    replicas: usize,
) -> anyhow::Result<Put> {
    if !file.is_file() {
        bail!("{} is not a file", file.display());
    }
    let (size, sha256) = digest_file(file)?;
    let version = match version {
        Some(v) if !mesh_store::version_ok(v) => {
            bail!("--version {v:?}: use letters, digits, `.`, `-` and `_`, at most 64 characters")
        }
        Some(v) => v.to_string(),
        None => sha256[..12].to_string(),
    };
    let reference = Reference {
        module: module.clone(),
        artifact: name.clone(),
        sha256: sha256.clone(),
    };
    // Refused before any byte is sent: an artifact of a module the mesh
    // does not know would be stored and never run.
    if store.module(module).await?.is_none() {
        bail!(
            "module {module} is not registered; register its manifest with `mesh catalogue register` first"
        );
    }
    let js = connect.await?;
    mesh_bus::artifacts::ensure_bucket_made_with(&js, replicas)
        .await
        .context("the artifact store")?;
    let stored = tokio::time::timeout(
        TRANSFER_WITHIN,
        mesh_bus::artifacts::put(&js, &reference.object_name(), file),
    )
    .await
    .map_err(|_| anyhow::anyhow!("storing {} took over {TRANSFER_WITHIN:?}", file.display()))??;
    if stored.sha256 != sha256 || stored.size != size {
        bail!(
            "{} changed while it was being stored; nothing was recorded",
            file.display()
        );
    }
    let recorded = store
        .record_upload(&mesh_store::Upload {
            module: module.clone(),
            version: version.clone(),
            name: name.clone(),
            sha256: sha256.clone(),
            size,
            nuid: stored.nuid.clone(),
        })
        .await?;
    Ok(Put {
        reference,
        size,
        sha256,
        version,
        existed: stored.existed,
        recorded,
    })
}

fn put(args: &PutArgs) -> anyhow::Result<ExitCode> {
    let module = Name::new(&args.module)
        .with_context(|| format!("{:?} is not a module name", args.module))?;
    let name = Name::new(&args.name)
        .with_context(|| format!("{:?} is not an artifact name", args.name))?;
    if !args.file.is_file() {
        bail!("{} is not a file", args.file.display());
    }
    let genesis = Genesis::open(&args.mesh.dir()?)?;
    let url = args.mesh.store_url()?;
    let put = crate::block_on(async {
        let store = open_store_to_write(&url).await?;
        let connect = async {
            let client = crate::bus::controller_client(&genesis).await?;
            anyhow::Ok(async_nats::jetstream::new(client))
        };
        let put = put_file(
            &store,
            connect,
            &module,
            &name,
            &args.file,
            args.version.as_deref(),
            usize::from(genesis.replicas),
        )
        .await;
        store.close().await;
        put
    })??;
    let how = match (put.existed, put.recorded) {
        (false, _) => "stored",
        (true, true) => "already stored; recorded",
        (true, false) => "already stored and recorded",
    };
    let Put {
        reference,
        size,
        sha256,
        version,
        ..
    } = put;
    output::print(&format!(
        "{reference}\n  {how}: {size} bytes, sha256 {sha256}, version {version} of {module}\n  run it: `${{artifact:{name}}}` in the module's [run]; `mesh assign {module} NODE --version {version}`\n"
    ))?;
    Ok(ExitCode::SUCCESS)
}

fn list(args: &ListArgs) -> anyhow::Result<ExitCode> {
    let module = crate::authority::module_filter(args.module.as_deref())?;
    let rows =
        crate::authority::read_store(&args.mesh, async |s| s.artifacts(module.as_ref()).await)?;
    let views: Vec<ArtifactView> = rows
        .iter()
        .map(|r| ArtifactView {
            module: r.module.to_string(),
            version: r.version.clone(),
            name: r.name.to_string(),
            reference: r.reference().to_string(),
            size: r.size,
            sha256: r.sha256.clone(),
            recorded_at: r.recorded_at,
        })
        .collect();
    match args.output {
        ListFormat::Json => output::print_json(&views)?,
        ListFormat::Text => {
            let mut out = output::Stdout::lock();
            if views.is_empty() {
                out.line("no artifacts; `mesh artifact put FILE --module M --name A` stores one")?;
            } else {
                let w = |f: fn(&ArtifactView) -> usize, min: usize| {
                    views.iter().map(f).max().unwrap_or(min).max(min)
                };
                let (wm, wv, wn) = (
                    w(|v| v.module.len(), 6),
                    w(|v| v.version.len(), 7),
                    w(|v| v.name.len(), 8),
                );
                out.line(format_args!(
                    "{:<wm$}  {:<wv$}  {:<wn$}  {:>12}  SHA256",
                    "MODULE", "VERSION", "ARTIFACT", "SIZE"
                ))?;
                for v in &views {
                    out.line(format_args!(
                        "{:<wm$}  {:<wv$}  {:<wn$}  {:>12}  {}",
                        v.module, v.version, v.name, v.size, v.sha256
                    ))?;
                }
            }
            out.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn get(args: &GetArgs) -> anyhow::Result<ExitCode> {
    let reference: Reference = args.reference.parse()?;
    let genesis = Genesis::open(&args.mesh.dir()?)?;
    let url = args.mesh.store_url()?;
    let fetched = crate::block_on(async {
        let store = open_existing_store(&url).await?;
        let rows = store.artifacts(Some(&reference.module)).await;
        store.close().await;
        let row = rows?
            .into_iter()
            .find(|r| r.name == reference.artifact && r.sha256 == reference.sha256)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "{reference} is not recorded; `mesh artifact list --module {}` shows what is",
                    reference.module
                )
            })?;
        let nuid = row.nuid.clone().ok_or_else(|| {
            anyhow::anyhow!("{reference} is recorded without its place in the store")
        })?;
        let (client, refusals) = crate::bus::controller_client_hearing(&genesis).await?;
        let name = reference.object_name();
        let want = mesh_bus::artifacts::Wanted {
            name: &name,
            nuid: &nuid,
            size: row.size,
            sha256: &row.sha256,
        };
        anyhow::Ok(
            mesh_bus::artifacts::fetch(&client, &refusals, &want, &args.output, TRANSFER_WITHIN)
                .await?,
        )
    })??;
    output::print(&format!(
        "{}: {} bytes, sha256 {} (checked)\n",
        args.output.display(),
        fetched.size,
        fetched.sha256
    ))?;
    Ok(ExitCode::SUCCESS)
}

//! `mesh artifact put|list|get`: the code a module runs, kept in the bus's
//! object store `ARTIFACTS` under its content's digest and recorded under
//! a version of its module (DESIGN §6 "Artifacts"). Put and get go through
//! the broker as the controller; the records say which versions exist and
//! what a host is granted to read.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use mesh_controller::Genesis;
use mesh_core::artifact::Reference;
use mesh_core::names::Name;
use serde::Serialize;

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
const TRANSFER_WITHIN: Duration = mesh_controller::artifacts::TRANSFER_WITHIN;

pub use mesh_controller::artifacts::{Put, put_file};

fn put(args: &PutArgs) -> anyhow::Result<ExitCode> {
    let module = Name::new(&args.module)
        .with_context(|| format!("{:?} is not a module name", args.module))?;
    let name = Name::new(&args.name)
        .with_context(|| format!("{:?} is not an artifact name", args.name))?;
    if !args.file.is_file() {
        bail!("{} is not a file", args.file.display());
    }
    if let Some(ctx) = args.mesh.remote()? {
        let said = crate::block_on(crate::upload::put(
            ctx,
            &module,
            &name,
            &args.file,
            args.version.as_deref(),
        ))??;
        output::print(&format!("{said}\n"))?;
        return Ok(ExitCode::SUCCESS);
    }
    let genesis = Genesis::open(&args.mesh.dir()?)?;
    let url = args.mesh.store_url()?;
    let put = crate::block_on(async {
        let store = open_store_to_write(&url).await?;
        let connect = async {
            let client = crate::bus::controller_client(&genesis, &url).await?;
            anyhow::Ok(async_nats::jetstream::new(client))
        };
        let put = async {
            let put = put_file(
                &store,
                connect,
                &module,
                &name,
                &args.file,
                args.version.as_deref(),
                usize::from(genesis.replicas),
            )
            .await?;
            crate::audit::record_local(
                &store,
                mesh_core::operation::Operation::ArtifactPut,
                serde_json::json!({
                    "module": module.as_str(),
                    "name": name.as_str(),
                    "version": put.version,
                    "sha256": put.sha256,
                    "size": put.size,
                }),
            )
            .await?;
            anyhow::Ok(put)
        }
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
        let (client, refusals) = crate::bus::controller_client_hearing(&genesis, &url).await?;
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

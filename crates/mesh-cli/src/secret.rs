//! `mesh secret set|list|remove`: the values a real service needs and no
//! log, URL or command line may hold. A value is read from standard input
//! or a file (never an argument: `/proc/<pid>/cmdline` is world-readable),
//! sealed at once to the controller's XKey by a key made for it, and
//! recorded sealed; the controller seals it again to each node that uses
//! it, and only that node's host opens it.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use mesh_controller::Genesis;
use mesh_core::names::Name;
use mesh_core::secret::Secret;
use serde::Serialize;

use crate::authority::{open_existing_store, open_store_to_write};
use crate::output;
use crate::output::ListFormat;
use crate::state::MeshArgs;

#[derive(Debug, Args)]
pub struct SecretArgs {
    #[command(subcommand)]
    pub command: SecretCommand,
}

#[derive(Debug, Subcommand)]
pub enum SecretCommand {
    /// Record a secret's value, read from standard input (one trailing
    /// newline dropped) or `--from-file` (byte for byte). The modules that
    /// use it are declared again and restart with the new value.
    #[command(after_help = "Examples:
  mesh secret set db-password < db-password.txt
  mesh secret set signing-key --from-file signing.pem")]
    Set(SetArgs),
    /// Every secret: its name, when it was set, which modules use it. Never
    /// a value.
    #[command(after_help = "Example:\n  mesh secret list --output json")]
    List(ListArgs),
    /// Forget a secret; refused while a registered module uses it.
    #[command(after_help = "Example:\n  mesh secret remove db-password")]
    Remove(RemoveArgs),
}

#[derive(Debug, Args)]
pub struct SetArgs {
    pub name: String,
    /// Read the value from this file instead of standard input.
    #[arg(long, value_name = "FILE")]
    pub from_file: Option<PathBuf>,
    /// Wait until every node running a module that uses it reports the
    /// declaration carrying the new value (the module restarted with it).
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits.
    #[arg(long, default_value = "5m", value_parser = crate::node::parse_ttl, requires = "wait")]
    pub timeout: std::time::Duration,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[arg(long, value_enum, default_value_t = ListFormat::Text)]
    pub output: ListFormat,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

#[derive(Debug, Args)]
pub struct RemoveArgs {
    pub name: String,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

/// A secret as `mesh secret list` shows it.
#[derive(Debug, Serialize)]
pub struct SecretView {
    pub name: String,
    /// Unix milliseconds.
    pub set_at: i64,
    /// Registered modules whose manifests name it.
    pub used_by: Vec<String>,
}

pub fn run(args: &SecretArgs) -> anyhow::Result<ExitCode> {
    match &args.command {
        SecretCommand::Set(a) => set(a),
        SecretCommand::List(a) => list(a),
        SecretCommand::Remove(a) => remove(a),
    }
}

fn secret_name(s: &str) -> anyhow::Result<Name> {
    Name::new(s).with_context(|| format!("{s:?} is not a secret name"))
}

fn set(args: &SetArgs) -> anyhow::Result<ExitCode> {
    let name = secret_name(&args.name)?;
    let value = match &args.from_file {
        Some(path) => {
            let bytes =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            String::from_utf8(bytes)
                .map_err(|_| anyhow::anyhow!("{} is not UTF-8 text", path.display()))?
        }
        None => {
            use std::io::IsTerminal as _;
            if std::io::stdin().is_terminal() {
                bail!(
                    "give the value on standard input (`mesh secret set {name} < FILE`) or with --from-file FILE: typed at a terminal it would show"
                );
            }
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading the value from standard input")?;
            let trimmed = text
                .strip_suffix("\r\n")
                .or_else(|| text.strip_suffix('\n'))
                .unwrap_or(&text);
            trimmed.to_string()
        }
    };
    let value = Secret::new(value);
    if value.expose().is_empty() {
        bail!("the value of secret {name} is empty; nothing was recorded");
    }
    let dir = args.mesh.dir()?;
    let genesis =
        Genesis::open(&dir).with_context(|| format!("reading the genesis in {}", dir.display()))?;
    // A key made for this value alone: its seed is dropped with this frame.
    let sender = nkeys::XKey::new();
    let sender_seed = Secret::new(sender.seed().context("a new XKey has a seed")?);
    let sealed = mesh_core::sealed::seal(&sender_seed, &genesis.xkey, value.expose())?;
    crate::block_on(async {
        let store = open_store_to_write(&args.mesh.store_url()?).await?;
        let result = async {
            store
                .set_secret(&name, &sealed, &sender.public_key())
                .await?;
            output::print(&format!("set secret {name}\n"))?;
            if !args.wait {
                return Ok(ExitCode::SUCCESS);
            }
            let users = assigned_users(&store, &name).await?;
            let wanted: Vec<crate::wait::Wanted<'_>> = users
                .iter()
                .map(|(node, module)| crate::wait::Wanted {
                    module,
                    node,
                    assigned: true,
                })
                .collect();
            crate::wait::all_answered(&store, &args.mesh, &wanted, args.timeout).await
        }
        .await;
        store.close().await;
        result
    })?
}

/// Each (node, module) assigned whose module uses secret `name`.
async fn assigned_users(
    store: &mesh_store::Store,
    name: &Name,
) -> anyhow::Result<Vec<(Name, Name)>> {
    let catalogue = mesh_state::registered::catalogue(store).await?;
    Ok(store
        .assignments()
        .await?
        .into_iter()
        .filter(|a| {
            catalogue
                .module(&a.module)
                .is_some_and(|m| m.secrets_used().contains(name))
        })
        .map(|a| (a.node, a.module))
        .collect())
}

/// Every secret with the registered modules that use it.
async fn views(store: &mesh_store::Store) -> anyhow::Result<Vec<SecretView>> {
    let catalogue = mesh_state::registered::catalogue(store).await?;
    Ok(store
        .secrets()
        .await?
        .into_iter()
        .map(|s| SecretView {
            used_by: catalogue
                .manifests()
                .iter()
                .filter(|m| m.secrets_used().contains(&s.name))
                .map(|m| m.name.value.to_string())
                .collect(),
            name: s.name.to_string(),
            set_at: s.set_at,
        })
        .collect())
}

fn list(args: &ListArgs) -> anyhow::Result<ExitCode> {
    let rows = crate::block_on(async {
        let store = open_existing_store(&args.mesh.store_url()?).await?;
        let rows = views(&store).await;
        store.close().await;
        rows
    })??;
    match args.output {
        ListFormat::Json => crate::output::print_json(&rows)?,
        ListFormat::Text => {
            let mut out = output::Stdout::lock();
            if rows.is_empty() {
                out.line("no secrets; `mesh secret set NAME < FILE` records one")?;
            } else {
                let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(6).max(6);
                out.line(format_args!("{:<width$}  {:<20}  USED BY", "SECRET", "SET"))?;
                let now = mesh_store::now_ms();
                for r in &rows {
                    let ago = std::time::Duration::from_millis((now - r.set_at).max(0) as u64);
                    out.line(format_args!(
                        "{:<width$}  {:<20}  {}",
                        r.name,
                        format!("{} ago", crate::node::humane(ago)),
                        if r.used_by.is_empty() {
                            "-".to_string()
                        } else {
                            r.used_by.join(", ")
                        }
                    ))?;
                }
            }
            out.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn remove(args: &RemoveArgs) -> anyhow::Result<ExitCode> {
    let name = secret_name(&args.name)?;
    crate::block_on(async {
        let store = open_store_to_write(&args.mesh.store_url()?).await?;
        let result = async {
            let rows = views(&store).await?;
            let Some(row) = rows.iter().find(|r| r.name == name.as_str()) else {
                bail!("no secret {name} is recorded (`mesh secret list` shows those that are)");
            };
            if !row.used_by.is_empty() {
                bail!(
                    "secret {name} is used by {}: register their manifests without it first, then remove it",
                    row.used_by.join(", ")
                );
            }
            store.remove_secret(&name).await?;
            anyhow::Ok(())
        }
        .await;
        store.close().await;
        result
    })??;
    output::print(&format!("removed secret {name}\n"))?;
    Ok(ExitCode::SUCCESS)
}

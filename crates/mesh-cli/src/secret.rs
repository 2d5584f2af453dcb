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
use mesh_core::operation::Operation;
use mesh_core::operation::wire::{self, NameArgs, Reply};
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
    /// Give a recorded secret a new value, as `set` does; refused for a
    /// name not recorded (a misspelt name is not a new secret).
    #[command(after_help = "Example:\n  mesh secret rotate db-password < new-password.txt")]
    Rotate(SetArgs),
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
        SecretCommand::Set(a) => set(a, false),
        SecretCommand::Rotate(a) => set(a, true),
        SecretCommand::List(a) => list(a),
        SecretCommand::Remove(a) => remove(a),
    }
}

fn secret_name(s: &str) -> anyhow::Result<Name> {
    Name::new(s).with_context(|| format!("{s:?} is not a secret name"))
}

fn set(args: &SetArgs, rotate: bool) -> anyhow::Result<ExitCode> {
    let name = secret_name(&args.name)?;
    let value = read_value(&name, args.from_file.as_deref())?;
    let op = if rotate {
        Operation::SecretRotate
    } else {
        Operation::SecretSet
    };
    if let Some(ctx) = args.mesh.remote()? {
        if args.wait {
            bail!(
                "--wait is not served over the bus yet: `mesh modules` shows when they restarted"
            );
        }
        return crate::block_on(async {
            let asker = crate::remote::Asker::connect(ctx).await?;
            // Sealed here, to the key the active controller answers with
            // (over the pinned connection): the value never travels.
            let status = match asker
                .ask(Operation::Status, serde_json::Value::Null)
                .await?
            {
                Reply::Done { data, .. } => data,
                Reply::Refused { reason } => bail!("refused: {reason}"),
            };
            let xkey = status
                .get("xkey")
                .and_then(|k| k.as_str())
                .context("the controller's status names no XKey to seal the value to")?;
            let request = sealed(&name, xkey, &value)?;
            match asker.ask(op, serde_json::to_value(&request)?).await? {
                Reply::Done { said, .. } => output::print(&format!("{said}\n"))?,
                Reply::Refused { reason } => bail!("refused: {reason}"),
            }
            anyhow::Ok(ExitCode::SUCCESS)
        })?;
    }
    let dir = args.mesh.dir()?;
    let genesis =
        Genesis::open(&dir).with_context(|| format!("reading the genesis in {}", dir.display()))?;
    let request = sealed(&name, &genesis.xkey, &value)?;
    crate::block_on(async {
        let store = open_store_to_write(&args.mesh.store_url()?).await?;
        let result = async {
            let said = mesh_state::operations::secret_set(&store, &request, rotate, None).await?;
            crate::audit::record_local(
                &store,
                op,
                wire::audited(op, &serde_json::to_value(&request)?),
            )
            .await?;
            output::print(&format!("{said}\n"))?;
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

/// The value sealed to `xkey` by a key made for it alone (its seed is
/// dropped with this frame).
fn sealed(name: &Name, xkey: &str, value: &Secret) -> anyhow::Result<wire::SecretArgs> {
    let sender = nkeys::XKey::new();
    let sender_seed = Secret::new(sender.seed().context("a new XKey has a seed")?);
    Ok(wire::SecretArgs {
        name: name.clone(),
        sealed: mesh_core::sealed::seal(&sender_seed, xkey, value.expose())?,
        sender: sender.public_key(),
    })
}

/// The value from `file` (byte for byte) or standard input (one trailing
/// newline dropped); never empty.
fn read_value(name: &Name, file: Option<&std::path::Path>) -> anyhow::Result<Secret> {
    let value = match file {
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
    Ok(value)
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
    let value = serde_json::to_value(NameArgs { name: name.clone() })?;
    let said = crate::block_on(crate::operate::change(
        &args.mesh,
        Operation::SecretRemove,
        value,
        |store| async move {
            let r = mesh_state::operations::secret_remove(&store, &name).await;
            (store, r)
        },
    ))??;
    output::print(&format!("{said}\n"))?;
    Ok(ExitCode::SUCCESS)
}

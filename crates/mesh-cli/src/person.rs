//! `mesh person key|add|remove`: operators. A person's key is made on the
//! person's own machine (`mesh person key`); only its public half is
//! recorded, and authority (the tools they may call) is derived from the
//! record like every other principal's.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use mesh_core::names::Name;
use mesh_core::operation::Operation;
use mesh_core::operation::wire::{NameArgs, PersonAddArgs};
use mesh_store::Store;

use crate::authority::open_store_to_write;
use crate::output;
use crate::state::MeshArgs;
use crate::wait::Live;

#[derive(Debug, Args)]
pub struct PersonArgs {
    #[command(subcommand)]
    pub command: PersonCommand,
}

#[derive(Debug, Subcommand)]
pub enum PersonCommand {
    /// Make a person's NKey: the seed goes to a new file (mode 0600), the
    /// public key to stdout (give it to `mesh person add --nkey`).
    #[command(after_help = "Example:\n  mesh person key --out ~/.mesh-person.seed")]
    Key(KeyArgs),
    /// Record a person, the tools they may call (`*`: every tool) and
    /// their role as an operator; returns once the broker admits them (at
    /// most --timeout).
    #[command(after_help = "Examples:
  mesh person add ada --tools '*' --nkey UAB3…
  mesh person add bob --tools greeter.greet,seat:git.clone --nkey UCD4…
  mesh person add dan --role viewer --nkey UGH6…
  mesh person add carol --tools '*' --nkey UEF5… --no-wait")]
    Add(AddArgs),
    /// Forget a person; returns once the broker refuses their key (at most
    /// --timeout).
    #[command(after_help = "Examples:
  mesh person remove bob
  mesh person remove bob --timeout 30s")]
    Remove(RemoveArgs),
}

#[derive(Debug, Args)]
pub struct KeyArgs {
    /// Where the seed is written; an existing file is never replaced.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

#[derive(Debug, Args)]
pub struct AddArgs {
    pub name: String,
    /// The tools they may call, comma-separated as a manifest writes them
    /// (`module.tool`, `seat:seat.tool`), or `*` for every tool.
    #[arg(long, value_delimiter = ',', required_unless_present = "role")]
    pub tools: Vec<String>,
    /// Their role as an operator: `viewer` (reads the mesh), `operator`
    /// (plus assignments, deploys, secrets, artifacts, builds) or `admin`
    /// (plus persons, nodes, the catalogue, the broker, the audit trail).
    #[arg(long, value_name = "ROLE")]
    pub role: Option<mesh_core::operation::Role>,
    /// Their NKey public key (`U…`, from `mesh person key`).
    #[arg(long, value_name = "U…")]
    pub nkey: Option<String>,
    #[command(flatten)]
    pub live: LiveArgs,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

#[derive(Debug, Args)]
pub struct RemoveArgs {
    pub name: String,
    #[command(flatten)]
    pub live: LiveArgs,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

/// Waiting for a change to be in force: the controller composes the users
/// file within a poll of the change and the broker reloads it; until then
/// the broker answers as before.
#[derive(Debug, Args)]
pub struct LiveArgs {
    /// Return once recorded, before the broker serves the change.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait for the broker to serve the change.
    #[arg(long, default_value = "10s", value_parser = crate::node::parse_ttl, conflicts_with = "no_wait")]
    pub timeout: Duration,
}

/// After a write: the revision it produced, then (unless --no-wait)
/// whether the broker serves it.
async fn after_write(
    store: &Store,
    mesh: &MeshArgs,
    live: &LiveArgs,
) -> anyhow::Result<Option<Live>> {
    if live.no_wait {
        return Ok(None);
    }
    let revision = store.records_revision().await?;
    crate::wait::live(store, mesh, revision, live.timeout)
        .await
        .map(Some)
}

pub fn run(args: &PersonArgs) -> anyhow::Result<ExitCode> {
    match &args.command {
        PersonCommand::Key(a) => key(&a.out),
        PersonCommand::Add(a) => add(a),
        PersonCommand::Remove(a) => remove(a),
    }
}

fn key(out: &Path) -> anyhow::Result<ExitCode> {
    let kp = nkeys::KeyPair::new_user();
    let seed = kp.seed().context("encoding the new seed")?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .with_context(|| {
            format!(
                "writing the seed to {} (an existing file is never replaced: choose another --out)",
                out.display()
            )
        })?;
    f.write_all(format!("{seed}\n").as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing the seed to {}", out.display()))?;
    output::print(&format!("{}\n", kp.public_key()))?;
    Ok(ExitCode::SUCCESS)
}

fn person_name(s: &str) -> anyhow::Result<Name> {
    Name::new(s).with_context(|| format!("{s:?} is not a person name"))
}

fn add(a: &AddArgs) -> anyhow::Result<ExitCode> {
    let request = PersonAddArgs {
        person: person_name(&a.name)?,
        role: a.role,
        tools: a.tools.clone(),
        nkey: a.nkey.clone(),
    };
    if let Some(ctx) = a.mesh.remote()? {
        let (urls, pin) = (ctx.urls.join(","), ctx.pin.clone());
        let (said, data) = crate::block_on(crate::remote::ask_current(
            ctx,
            Operation::PersonAdd,
            serde_json::to_value(&request)?,
        ))??;
        if let Some(token) = data.get("token").and_then(|t| t.as_str()) {
            return print_login(&said, token);
        }
        output::print(&format!("{said}\n"))?;
        if a.role.is_some() && a.nkey.is_some() {
            output::print(&format!(
                "on their machine: mesh login --person {} --key SEED_FILE --bus {urls} --pin {pin}\n",
                a.name
            ))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let (said, live, login, moved) = crate::block_on(async {
        let store = open_store_to_write(&a.mesh.store_url()?).await?;
        let result = async {
            let (said, login) = mesh_state::operations::person_add(&store, &request).await?;
            crate::audit::record_local(
                &store,
                Operation::PersonAdd,
                serde_json::to_value(&request)?,
            )
            .await?;
            let live = after_write(&store, &a.mesh, &a.live).await?;
            // Where the person dials: the bus the mesh moved onto, if it did.
            let moved = store.moved_bus_urls().await?;
            anyhow::Ok((said, live, login, moved))
        }
        .await;
        store.close().await;
        result
    })??;
    if let Some(login) = login {
        let genesis = mesh_controller::Genesis::open(&a.mesh.dir()?)?;
        return print_login(&said, genesis.person_token(login, moved).expose());
    }
    let line = match (&a.nkey, live) {
        (Some(_), Some(Live::Confirmed)) => format!("{said}; the broker admits them now"),
        (Some(_), Some(Live::Unconfirmed(why))) => {
            output::note(format!(
                "not confirmed live: {why}; person {} is recorded and is admitted once the controller composes",
                a.name
            ));
            said
        }
        _ => said,
    };
    output::print(&format!("{line}\n"))?;
    // How the person reaches the mesh from their own machine.
    if a.role.is_some()
        && a.nkey.is_some()
        && let Ok(genesis) = a
            .mesh
            .find()
            .map_err(anyhow::Error::from)
            .and_then(|d| Ok(mesh_controller::Genesis::open(&d)?))
    {
        output::print(&format!(
            "on their machine: mesh login --person {} --key SEED_FILE --bus {} --pin {}\n",
            a.name,
            moved.unwrap_or_else(|| genesis.bus_urls()).join(","),
            genesis.cert_sha256
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A login token alone on stdout (so `> ada.token` carries nothing else),
/// what to do with it on stderr.
fn print_login(said: &str, token: &str) -> anyhow::Result<ExitCode> {
    output::print(&format!("{token}\n"))?;
    output::note(format_args!(
        "{said}; the token is a secret usable once: give it to them as a file, never in a command line"
    ));
    Ok(ExitCode::SUCCESS)
}

fn remove(a: &RemoveArgs) -> anyhow::Result<ExitCode> {
    let name = person_name(&a.name)?;
    if let Some(ctx) = a.mesh.remote()? {
        let said = crate::remote::change(ctx, Operation::PersonRemove, &NameArgs { name })?;
        output::print(&format!("{said}\n"))?;
        return Ok(ExitCode::SUCCESS);
    }
    let (said, live) = crate::block_on(async {
        let store = open_store_to_write(&a.mesh.store_url()?).await?;
        let result = async {
            let said = mesh_state::operations::person_remove(&store, &name).await?;
            crate::audit::record_local(
                &store,
                Operation::PersonRemove,
                serde_json::json!({ "name": name.as_str() }),
            )
            .await?;
            let live = after_write(&store, &a.mesh, &a.live).await?;
            anyhow::Ok((said, live))
        }
        .await;
        store.close().await;
        result
    })??;
    let line = match live {
        None => said,
        Some(Live::Confirmed) => format!("{said}; the broker refuses their key now"),
        Some(Live::Unconfirmed(why)) => {
            output::note(format!(
                "not confirmed live: {why}; person {name} is removed from the records and refused once the controller composes"
            ));
            said
        }
    };
    output::print(&format!("{line}\n"))?;
    Ok(ExitCode::SUCCESS)
}

pub fn read_seed(path: &Path) -> anyhow::Result<nkeys::KeyPair> {
    use std::os::unix::fs::PermissionsExt as _;
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        bail!(
            "{} may be read by others (mode {mode:03o}); a seed file must be mode 0600 (chmod 600 {})",
            path.display(),
            path.display()
        );
    }
    if meta.len() > 4096 {
        bail!("{} is too large to be an NKey seed", path.display());
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let kp = nkeys::KeyPair::from_seed(text.trim())
        .ok()
        .filter(|kp| matches!(kp.key_pair_type(), nkeys::KeyPairType::User));
    kp.with_context(|| {
        format!(
            "{} does not hold an NKey user seed (SU…); `mesh person key --out FILE` makes one",
            path.display()
        )
    })
}

//! `mesh plan` (and `mesh assign|unassign --dry-run`): what a pending change
//! would do before it is made. The records are read as the controller reads
//! them, the change is applied to a copy in memory, and `mesh_core::change`
//! compares the two; nothing is written.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use mesh_core::names::Name;
pub use mesh_state::plan::{Pending, Plan, render, unaddressed_text};

use crate::authority::open_existing_store;
use crate::output;
use crate::output::ListFormat;
use crate::state::MeshArgs;

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(subcommand)]
    pub change: PlanCommand,
}

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// What assigning a module to a node would change.
    #[command(after_help = "Examples:
  mesh plan assign notifier n1
  mesh plan assign notifier n1 --output json
  mesh plan assign audit n1 --version 1.4.0
  mesh plan assign db n2 --move-from n1")]
    Assign(PlanAssignArgs),
    /// What unassigning a module from a node would change.
    #[command(after_help = "Example:\n  mesh plan unassign notifier n1")]
    Unassign(PlanAssignArgs),
    /// What registering a catalogue (new or changed manifests) would change.
    #[command(after_help = "Example:\n  mesh plan register examples/catalogue")]
    Register(PlanRegisterArgs),
    /// A deployment's batches, and what it changes once every node is
    /// moved (declarations, the hosts' grants on the version's artifacts).
    #[command(after_help = "Examples:
  mesh plan deploy web --version v2
  mesh plan deploy web --version v2 --canary 1 --batch 25% --output json")]
    Deploy(PlanDeployArgs),
}

#[derive(Debug, Args)]
pub struct PlanDeployArgs {
    #[command(flatten)]
    pub target: crate::deploy::DeployTarget,
    #[command(flatten)]
    pub opts: PlanOpts,
}

#[derive(Debug, Args)]
pub struct PlanAssignArgs {
    pub module: String,
    pub node: String,
    /// With assign: the version to pin (`mesh assign --version`).
    #[arg(long)]
    pub version: Option<String>,
    /// With assign: move the module from this node in one step (`mesh
    /// assign --move-from`).
    #[arg(long, value_name = "NODE")]
    pub move_from: Option<String>,
    #[command(flatten)]
    pub opts: PlanOpts,
}

#[derive(Debug, Args)]
pub struct PlanRegisterArgs {
    /// Catalogue directories or manifest files, as for `mesh check`.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    #[command(flatten)]
    pub opts: PlanOpts,
}

#[derive(Debug, Clone, Args)]
pub struct PlanOpts {
    #[arg(long, value_enum, default_value_t = ListFormat::Text)]
    pub output: ListFormat,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

pub fn name(what: &str, s: &str) -> anyhow::Result<Name> {
    Name::new(s).with_context(|| format!("{s:?} is not a {what} name"))
}

pub fn run(args: &PlanArgs) -> anyhow::Result<ExitCode> {
    let (pending, opts) = match &args.change {
        PlanCommand::Assign(a) => (
            Pending::Assign {
                module: name("module", &a.module)?,
                node: name("node", &a.node)?,
                version: a.version.clone(),
                from: a
                    .move_from
                    .as_deref()
                    .map(|n| name("node", n))
                    .transpose()?,
            },
            &a.opts,
        ),
        PlanCommand::Unassign(a) if a.move_from.is_some() || a.version.is_some() => {
            bail!("--move-from and --version are for `mesh plan assign`")
        }
        PlanCommand::Unassign(a) => (
            Pending::Unassign {
                module: name("module", &a.module)?,
                node: name("node", &a.node)?,
            },
            &a.opts,
        ),
        PlanCommand::Deploy(a) => return plan_deploy(a),
        PlanCommand::Register(a) if a.opts.mesh.remote()?.is_some() => {
            (read_for_remote(&a.paths)?, &a.opts)
        }
        PlanCommand::Register(a) => (register(&a.paths, &a.opts.mesh)?, &a.opts),
    };
    if let Some(ctx) = opts.mesh.remote()? {
        // Planned by the active controller, against the records it keeps.
        let (_, data) = crate::block_on(crate::remote::ask_current(
            ctx,
            mesh_core::operation::Operation::Plan,
            serde_json::to_value(&pending)?,
        ))??;
        match opts.output {
            ListFormat::Json => output::print_json(&data["plan"])?,
            ListFormat::Text => output::print(data["text"].as_str().unwrap_or_default())?,
        }
        return Ok(ExitCode::SUCCESS);
    }
    print_plan(&pending, &opts.mesh, opts.output)
}

/// `mesh plan deploy`: the batches (from the assignments read here), then
/// the plan of the deployment's end. JSON: `{"batches": [[node..]..],
/// "plan": ..}`.
fn plan_deploy(a: &PlanDeployArgs) -> anyhow::Result<ExitCode> {
    let (module, nodes) = a.target.names()?;
    let pending = Pending::Deploy {
        module: module.clone(),
        version: a.target.version.clone(),
        nodes: nodes.clone(),
    };
    if let Some(ctx) = a.opts.mesh.remote()? {
        // Planned by the active controller; the batches need the
        // assignments, which are its to read: `mesh deploy` says them.
        let (_, data) = crate::block_on(crate::remote::ask_current(
            ctx,
            mesh_core::operation::Operation::Plan,
            serde_json::to_value(&pending)?,
        ))??;
        match a.opts.output {
            ListFormat::Json => output::print_json(&data["plan"])?,
            ListFormat::Text => output::print(data["text"].as_str().unwrap_or_default())?,
        }
        return Ok(ExitCode::SUCCESS);
    }
    let (plan, assigned) = crate::block_on(async {
        let store = open_existing_store(&a.opts.mesh.store_url()?).await?;
        let plan = mesh_state::plan::compute(&pending, &store).await;
        let assignments = store.assignments().await;
        store.close().await;
        let assigned: Vec<Name> = assignments?
            .into_iter()
            .filter(|x| x.module == module)
            .map(|x| x.node)
            .collect();
        anyhow::Ok((plan?, assigned))
    })??;
    let spec = mesh_core::deploy::Spec {
        module: module.clone(),
        version: a.target.version.clone(),
        nodes: if nodes.is_empty() {
            assigned.clone()
        } else {
            nodes
        },
        canary: a.target.canary,
        batch: a.target.batch,
        healthy_for_ms: 0,
        deadline_ms: 0,
        auto_revert: true,
    };
    spec.check(&assigned)?;
    match a.opts.output {
        ListFormat::Json => output::print(&format!(
            "{}\n",
            serde_json::to_string_pretty(
                &serde_json::json!({ "batches": spec.batches(), "plan": plan })
            )?
        ))?,
        ListFormat::Text => output::print(&format!(
            "batches: {}\n{}",
            crate::deploy::batches_line(&spec),
            render(&plan)
        ))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The manifests of `paths` read here, for the controller to plan their
/// registration (a file's own errors said here, each where it is).
fn read_for_remote(paths: &[PathBuf]) -> anyhow::Result<Pending> {
    let report = mesh_state::catalogue::read(paths)?;
    crate::authority::refuse_errors(&report, paths, "nothing is planned")?;
    sources_of(&report)
}

/// Each parsed manifest's text by its module's name.
fn sources_of(report: &mesh_state::CatalogueCheck) -> anyhow::Result<Pending> {
    let mut sources = BTreeMap::new();
    for m in report.catalogue.manifests() {
        let text = report
            .sources
            .get(&m.path)
            .with_context(|| format!("the text of {} was not kept", m.path))?;
        sources.insert(m.name.value.clone(), text.clone());
    }
    Ok(Pending::Register { sources })
}

/// The manifests of `paths`, checked as `mesh catalogue register` checks
/// them: with the registered catalogue in view.
fn register(paths: &[PathBuf], mesh: &MeshArgs) -> anyhow::Result<Pending> {
    let registered = crate::block_on(async {
        let store = open_existing_store(&mesh.store_url()?).await?;
        let read = crate::registering::InView::read(&store).await;
        store.close().await;
        anyhow::Ok(read?)
    })??;
    let report = crate::registering::checked(paths, &registered, "nothing is planned")?.report;
    sources_of(&report)
}

/// Reads the mesh as the controller does and plans `pending` against it.
pub async fn compute(pending: &Pending, mesh: &MeshArgs) -> anyhow::Result<Plan> {
    let store = open_existing_store(&mesh.store_url()?).await?;
    let plan = mesh_state::plan::compute(pending, &store).await;
    store.close().await;
    Ok(plan?)
}

/// Computes and prints the plan for `pending` (also `--dry-run`).
pub fn print_plan(
    pending: &Pending,
    mesh: &MeshArgs,
    format: ListFormat,
) -> anyhow::Result<ExitCode> {
    let plan = crate::block_on(compute(pending, mesh))??;
    match format {
        ListFormat::Json => output::print(&format!("{}\n", serde_json::to_string_pretty(&plan)?))?,
        ListFormat::Text => output::print(&render(&plan))?,
    }
    Ok(ExitCode::SUCCESS)
}

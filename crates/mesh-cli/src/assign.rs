//! `mesh catalogue register`, `mesh assign` and `mesh unassign`: what the
//! mesh knows how to run, and where it runs. The controller follows the
//! records and declares each change to the nodes it touches.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use clap::{Args, Subcommand};
use mesh_core::declaration::seat_address::{self, Unaddressed};
use mesh_core::diagnostic::suggest;
use mesh_core::names::Name;
use mesh_core::records::{Assignment, Records};
use mesh_store::Store;

use crate::authority::open_store_to_write;
use crate::output;
use crate::output::ListFormat;
use crate::plan::{Pending, name};
use crate::state::MeshArgs;

#[derive(Debug, Args)]
pub struct CatalogueArgs {
    #[command(subcommand)]
    pub command: CatalogueCommand,
}

#[derive(Debug, Subcommand)]
pub enum CatalogueCommand {
    /// Register every manifest of a catalogue (checked first: one error and
    /// nothing is registered).
    #[command(after_help = "Example:\n  mesh catalogue register examples/catalogue")]
    Register(RegisterArgs),
    /// Draw the catalogue: modules, seats, who consumes whose events, who
    /// uses which seat or tool; dangling consumers marked.
    #[command(after_help = "Examples:
  mesh catalogue graph
  mesh catalogue graph --format svg > catalogue.svg
  mesh catalogue graph --catalogue examples/catalogue --format dot | dot -Tpng > catalogue.png")]
    Graph(crate::graph::GraphArgs),
}

#[derive(Debug, Args)]
pub struct RegisterArgs {
    /// Catalogue directories or manifest files, as for `mesh check`.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

#[derive(Debug, Args)]
pub struct AssignArgs {
    /// The module (registered with `mesh catalogue register`).
    pub module: String,
    /// The node it runs on.
    pub node: String,
    /// Show what would change (declarations, authority, bus objects) and
    /// change nothing: `mesh plan assign|unassign`.
    #[arg(long, conflicts_with = "wait")]
    pub dry_run: bool,
    /// With --dry-run: text or JSON.
    #[arg(long, value_enum, default_value_t = ListFormat::Text, requires = "dry_run")]
    pub output: ListFormat,
    /// Wait until the node's report answers the new declaration: the module
    /// running or failed (exit 1), or gone.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits.
    #[arg(long, default_value = "5m", value_parser = crate::node::parse_ttl, requires = "wait")]
    pub timeout: Duration,
    /// The version of the module's artifacts to run (`mesh artifact list`);
    /// by default the newest recorded when it is first assigned there.
    /// Assigning again with another version moves it.
    #[arg(long)]
    pub version: Option<String>,
    /// Move the module here from this node, in one step (assign only): its
    /// assignment there goes as this one is made, so a seat it holds is
    /// never held by nobody, and the modules addressing the seat keep an
    /// address. It runs the version it ran there unless --version says.
    #[arg(long, value_name = "NODE")]
    pub move_from: Option<String>,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

pub fn run_catalogue(args: &CatalogueArgs) -> anyhow::Result<ExitCode> {
    let args = match &args.command {
        CatalogueCommand::Register(a) => a,
        CatalogueCommand::Graph(a) => return crate::graph::run(a),
    };
    if let Some(ctx) = args.mesh.remote()? {
        // Read and parsed here (a file's own errors said here, each where
        // it is); checked against the registered catalogue and recorded by
        // the controller.
        let report = mesh_state::catalogue::read(&args.paths)?;
        crate::authority::refuse_errors(&report, &args.paths, "nothing was registered")?;
        let mut request = mesh_core::operation::wire::RegisterArgs {
            manifests: Vec::new(),
            aliases: Vec::new(),
        };
        for (name, text) in report.sources {
            let is_aliases = std::path::Path::new(&name)
                .file_name()
                .is_some_and(|f| f == mesh_state::ALIASES_FILE);
            match is_aliases {
                true => request.aliases.push((name, text)),
                false => request.manifests.push((name, text)),
            }
        }
        let said = crate::remote::change(ctx, mesh_core::operation::Operation::Register, &request)?;
        output::print(&format!("{said}\n"))?;
        return Ok(ExitCode::SUCCESS);
    }
    crate::block_on(async {
        let store = open_store_to_write(&args.mesh.store_url()?).await?;
        let result = async {
            let r =
                crate::registering::register(&store, &args.paths, "nothing was registered").await?;
            let names: Vec<String> = r.report.sources.keys().cloned().collect();
            crate::audit::record_local(
                &store,
                mesh_core::operation::Operation::Register,
                serde_json::json!({ "files": names }),
            )
            .await?;
            anyhow::Ok(r)
        }
        .await;
        store.close().await;
        let done = result?.registration.modules;
        output::print(&format!(
            "registered {} module(s): {}\n",
            done.len(),
            done.iter()
                .map(|(m, _)| m.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))?;
        Ok(ExitCode::SUCCESS)
    })?
}

/// `mesh assign|unassign` from a person's own machine: asked of the
/// active controller, which writes it and audits it in the person's name.
fn remote_assign(
    ctx: crate::context::Context,
    args: &AssignArgs,
    module: &Name,
    node: &Name,
    moving: bool,
    assign: bool,
) -> anyhow::Result<ExitCode> {
    if moving || args.wait {
        bail!(
            "{} is not served over the bus yet: run it on the controller's machine",
            if moving { "--move-from" } else { "--wait" }
        );
    }
    let op = if assign {
        mesh_core::operation::Operation::Assign
    } else {
        mesh_core::operation::Operation::Unassign
    };
    let request = mesh_core::operation::wire::AssignArgs {
        module: module.clone(),
        node: node.clone(),
        version: args.version.clone(),
    };
    let (said, _) = crate::block_on(crate::remote::ask_current(
        ctx,
        op,
        serde_json::to_value(request)?,
    ))??;
    output::print(&format!("{said}\n"))?;
    Ok(ExitCode::SUCCESS)
}

pub fn run_assign(args: &AssignArgs, assign: bool) -> anyhow::Result<ExitCode> {
    let module = name("module", &args.module)?;
    let node = name("node", &args.node)?;
    if !assign && args.version.is_some() {
        bail!("--version is for assigning: an unassigned module runs no version");
    }
    let from = moved_from(args.move_from.as_deref(), &node, assign)?;
    if args.dry_run {
        let pending = if assign {
            Pending::Assign {
                module,
                node,
                version: args.version.clone(),
                from,
            }
        } else {
            Pending::Unassign { module, node }
        };
        return crate::plan::print_plan(&pending, &args.mesh, args.output);
    }
    if let Some(ctx) = args.mesh.remote()? {
        return remote_assign(ctx, args, &module, &node, from.is_some(), assign);
    }
    crate::block_on(async {
        let store = open_store_to_write(&args.mesh.store_url()?).await?;
        let result = async {
            // Who the change leaves without an address, read before it is
            // made: said, not refused (an operator may mean it).
            let unaddressed = match (&from, assign) {
                (None, true) => Vec::new(),
                (Some(from), _) => {
                    left_without_address(&store, |a| {
                        a.retain(|x| (&x.node, &x.module) != (from, &module));
                        a.push(Assignment::new(node.clone(), module.clone()));
                    })
                    .await?
                }
                (None, false) => {
                    left_without_address(&store, |a| {
                        a.retain(|x| (&x.node, &x.module) != (&node, &module));
                    })
                    .await?
                }
            };
            let line = if assign {
                let pinned = match from.as_ref() {
                    Some(from) => store.move_assignment(from, &node, &module, args.version.as_deref()).await,
                    None => store.assign_version(&node, &module, args.version.as_deref()).await,
                };
                let pinned = match pinned {
                    Err(mesh_store::StoreError::NotFound { what: "module", .. }) => {
                        bail!(unregistered(&store, &module).await?)
                    }
                    Err(mesh_store::StoreError::NotFound { what: "node", .. }) => {
                        bail!(unrecorded(&store, &node).await?)
                    }
                    Err(mesh_store::StoreError::NotFound { what: "assignment", .. }) => {
                        let from = from.as_ref().unwrap_or(&node);
                        bail!(not_assigned(&store, &module, from).await?)
                    }
                    Err(mesh_store::StoreError::NotFound { what: "version", .. }) => bail!(
                        "module {module} has no version {}; `mesh artifact list --module {module}` lists its versions",
                        args.version.as_deref().unwrap_or_default()
                    ),
                    other => other?,
                };
                let done = match &from {
                    Some(from) => format!("moved {module} from {from} to {node}"),
                    None => format!("assigned {module} to {node}"),
                };
                match pinned {
                    Some(v) => format!("{done} (version {v})\n"),
                    None => format!("{done}\n"),
                }
            } else if store.unassign(&node, &module).await? {
                format!("unassigned {module} from {node}\n")
            } else {
                bail!(not_assigned(&store, &module, &node).await?)
            };
            let op = if assign {
                mesh_core::operation::Operation::Assign
            } else {
                mesh_core::operation::Operation::Unassign
            };
            let mut arguments =
                serde_json::json!({ "module": module.as_str(), "node": node.as_str() });
            if let Some(v) = &args.version {
                arguments["version"] = v.as_str().into();
            }
            if let Some(from) = &from {
                arguments["from"] = from.as_str().into();
            }
            crate::audit::record_local(&store, op, arguments).await?;
            Ok((line, unaddressed))
        }
        .await;
        let done = match result {
            Ok((line, unaddressed)) => {
                let printed = output::print(&line).map_err(anyhow::Error::from);
                if !unaddressed.is_empty() {
                    output::note(crate::plan::unaddressed_text(
                        &unaddressed,
                        "warning: ",
                        "  = help: ",
                    ));
                }
                printed
            }
            Err(e) => Err(e),
        };
        let code = match done {
            Ok(()) if args.wait => {
                let wanted = crate::wait::Wanted {
                    module: &module,
                    node: &node,
                    assigned: assign,
                };
                crate::wait::answered(&store, &args.mesh, &wanted, args.timeout).await
            }
            Ok(()) => Ok(ExitCode::SUCCESS),
            Err(e) => Err(e),
        };
        store.close().await;
        code
    })?
}

/// `--move-from`'s node: for assigning only, and another node than the
/// one assigned to.
fn moved_from(from: Option<&str>, node: &Name, assign: bool) -> anyhow::Result<Option<Name>> {
    let Some(from) = from else { return Ok(None) };
    if !assign {
        bail!(
            "--move-from is for assigning: `mesh assign MODULE NODE --move-from {from}` moves the module from {from} to NODE"
        );
    }
    let from = name("node", from)?;
    if from == *node {
        bail!("--move-from {from} names the node it is assigned to; give the node it runs on now");
    }
    Ok(Some(from))
}

/// The modules that `change`, applied to the recorded assignments, leaves
/// without an address for a seat they fill in.
async fn left_without_address(
    store: &Store,
    change: impl FnOnce(&mut Vec<Assignment>),
) -> anyhow::Result<Vec<Unaddressed>> {
    let catalogue = mesh_state::registered::catalogue(store).await?;
    let before = Records {
        assignments: store
            .assignments()
            .await?
            .into_iter()
            .map(|a| Assignment::new(a.node, a.module))
            .collect(),
        ..Records::default()
    };
    let mut after = before.clone();
    change(&mut after.assignments);
    Ok(seat_address::left_without_address(
        (&catalogue, &before),
        (&catalogue, &after),
    ))
}

/// A module that is not registered, with the closest that is.
async fn unregistered(store: &Store, module: &Name) -> anyhow::Result<String> {
    let modules = store.modules().await?;
    let names = modules.iter().map(|m| m.name.as_str());
    Ok(match suggest(module.as_str(), names) {
        Some(close) => format!("no module \"{module}\" registered; did you mean {close}?"),
        None => format!(
            "no module \"{module}\" registered; register its catalogue first with `mesh catalogue register DIR`"
        ),
    })
}

/// A node that is not recorded, with the closest that is.
async fn unrecorded(store: &Store, node: &Name) -> anyhow::Result<String> {
    let nodes = store.nodes().await?;
    let names = nodes.iter().map(|n| n.name.as_str());
    Ok(match suggest(node.as_str(), names) {
        Some(close) => format!("no node \"{node}\" recorded; did you mean {close}?"),
        None => format!("no node \"{node}\" recorded; add it with `mesh node add {node}`"),
    })
}

/// Why `module` could not be unassigned from `node`: a name that names
/// nothing, or what does run there.
async fn not_assigned(store: &Store, module: &Name, node: &Name) -> anyhow::Result<String> {
    if store.node(node).await?.is_none() {
        return unrecorded(store, node).await;
    }
    if store.module(module).await?.is_none() {
        return unregistered(store, module).await;
    }
    let on_node: Vec<String> = store
        .assignments()
        .await?
        .into_iter()
        .filter(|a| a.node == *node)
        .map(|a| a.module.to_string())
        .collect();
    let there = match on_node.as_slice() {
        [] => format!("nothing is assigned to {node}"),
        some => format!("{node} runs {}", some.join(", ")),
    };
    Ok(format!(
        "{module} is not assigned to {node}; {there} (`mesh modules` lists every assignment)"
    ))
}

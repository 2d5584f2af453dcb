//! `mesh catalogue register`, `mesh assign` and `mesh unassign`: what the
//! mesh knows how to run, and where it runs. The controller follows the
//! records and declares each change to the nodes it touches.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use mesh_core::diagnostic::suggest;
use mesh_core::names::Name;
use mesh_store::Store;

use crate::authority::{checked_catalogue, open_store_to_write};
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
    #[command(flatten)]
    pub mesh: MeshArgs,
}

pub fn run_catalogue(args: &CatalogueArgs) -> anyhow::Result<ExitCode> {
    let args = match &args.command {
        CatalogueCommand::Register(a) => a,
        CatalogueCommand::Graph(a) => return crate::graph::run(a),
    };
    let report = checked_catalogue(&args.paths, "nothing was registered")?;
    crate::block_on(async {
        let store = open_store_to_write(&args.mesh.store_url()?).await?;
        let result = register(&store, &report, &args.paths).await;
        store.close().await;
        let done = result?;
        output::print(&format!(
            "registered {} module(s): {}\n",
            done.len(),
            done.join(", ")
        ))?;
        Ok(ExitCode::SUCCESS)
    })?
}

/// Checks the catalogue as it would be once `report` is registered, and
/// records the manifests, their seats and the renames in one transaction;
/// returns the modules registered.
pub(crate) async fn register(
    store: &Store,
    report: &mesh_state::CatalogueCheck,
    paths: &[PathBuf],
) -> anyhow::Result<Vec<String>> {
    let registered = mesh_state::registered::read(store).await?;
    let after = registered.catalogue.registering(&report.catalogue);
    let broken = mesh_core::catalogue::broken_by(&registered.catalogue, &after);
    if !broken.is_empty() {
        let mut sources = report.sources.clone();
        for m in store.modules().await? {
            sources.insert(
                mesh_state::registered::source_name(m.name.as_str()),
                m.manifest_source,
            );
        }
        let n = broken.len();
        crate::check::print_text(&mesh_state::CatalogueCheck {
            manifests: after.manifests().len(),
            diagnostics: broken,
            sources,
            catalogue: after,
        })?;
        bail!(
            "registering {} would break the registered catalogue: {} error{} (printed above, each where it breaks); nothing was registered",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" "),
            mesh_core::diagnostic::thousands(n),
            crate::check::plural(n),
        );
    }
    let mut registration = mesh_store::Registration::default();
    for m in report.catalogue.manifests() {
        let source = report
            .sources
            .get(&m.path)
            .with_context(|| format!("the text of {} was not kept", m.path))?;
        registration
            .modules
            .push((m.name.value.clone(), source.clone()));
    }
    // Every seat of the catalogue after, roles included: an alias names a
    // recorded seat, and a catalogue registered before seats were recorded
    // gets them now.
    for entry in after.seats() {
        registration.seats.push(mesh_store::Seat {
            name: entry.decl.name.value.clone(),
            declared_by: entry.module.clone(),
            scope: entry.decl.scope.value,
            protocol: entry.decl.protocol.value.clone(),
        });
    }
    // A rename is a row: the controller's catalogue resolves it from the
    // store, never from a file it cannot see.
    for a in report.catalogue.aliases().entries() {
        registration
            .aliases
            .push((a.old.value.clone(), after.resolve_seat(&a.old.value)));
    }
    store.register_catalogue(&registration).await?;
    Ok(registration
        .modules
        .iter()
        .map(|(m, _)| m.to_string())
        .collect())
}

pub fn run_assign(args: &AssignArgs, assign: bool) -> anyhow::Result<ExitCode> {
    let module = name("module", &args.module)?;
    let node = name("node", &args.node)?;
    if !assign && args.version.is_some() {
        bail!("--version is for assigning: an unassigned module runs no version");
    }
    if args.dry_run {
        let pending = if assign {
            Pending::Assign {
                module,
                node,
                version: args.version.clone(),
            }
        } else {
            Pending::Unassign { module, node }
        };
        return crate::plan::print_plan(&pending, &args.mesh, args.output);
    }
    crate::block_on(async {
        let store = open_store_to_write(&args.mesh.store_url()?).await?;
        let result = async {
            if assign {
                let pinned = match store
                    .assign_version(&node, &module, args.version.as_deref())
                    .await
                {
                    Err(mesh_store::StoreError::NotFound { what: "module", .. }) => {
                        bail!(unregistered(&store, &module).await?)
                    }
                    Err(mesh_store::StoreError::NotFound { what: "node", .. }) => {
                        bail!(unrecorded(&store, &node).await?)
                    }
                    Err(mesh_store::StoreError::NotFound { what: "version", .. }) => bail!(
                        "module {module} has no version {}; `mesh artifact list --module {module}` lists its versions",
                        args.version.as_deref().unwrap_or_default()
                    ),
                    other => other?,
                };
                Ok(match pinned {
                    Some(v) => format!("assigned {module} to {node} (version {v})\n"),
                    None => format!("assigned {module} to {node}\n"),
                })
            } else if store.unassign(&node, &module).await? {
                Ok(format!("unassigned {module} from {node}\n"))
            } else {
                bail!(not_assigned(&store, &module, &node).await?)
            }
        }
        .await;
        let done = match result {
            Ok(line) => output::print(&line).map_err(anyhow::Error::from),
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

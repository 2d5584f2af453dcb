//! `mesh catalogue register`, `mesh assign` and `mesh unassign`: what the
//! mesh knows how to run, and where it runs. The controller follows the
//! records and declares each change to the nodes it touches.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use mesh_core::names::Name;

use crate::authority::{checked_catalogue, open_store};
use crate::output;
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
    #[command(flatten)]
    pub mesh: MeshArgs,
}

fn name(what: &str, s: &str) -> anyhow::Result<Name> {
    Name::new(s).with_context(|| format!("{s:?} is not a {what} name"))
}

pub fn run_catalogue(args: &CatalogueArgs) -> anyhow::Result<ExitCode> {
    let CatalogueCommand::Register(args) = &args.command;
    let report = checked_catalogue(&args.paths, "nothing was registered")?;
    crate::block_on(async {
        let store = open_store(&args.mesh.store_url()).await?;
        let mut done = Vec::new();
        let result = async {
            for m in report.catalogue.manifests() {
                let source = report
                    .sources
                    .get(&m.path)
                    .with_context(|| format!("the text of {} was not kept", m.path))?;
                store.register_module(&m.name.value, source).await?;
                done.push(m.name.value.to_string());
            }
            anyhow::Ok(())
        }
        .await;
        store.close().await;
        result?;
        output::print(&format!(
            "registered {} module(s): {}\n",
            done.len(),
            done.join(", ")
        ))?;
        Ok(ExitCode::SUCCESS)
    })?
}

pub fn run_assign(args: &AssignArgs, assign: bool) -> anyhow::Result<ExitCode> {
    let module = name("module", &args.module)?;
    let node = name("node", &args.node)?;
    crate::block_on(async {
        let store = open_store(&args.mesh.store_url()).await?;
        let result = async {
            if assign {
                match store.assign(&node, &module).await {
                    Err(mesh_store::StoreError::NotFound { what: "module", .. }) => bail!(
                        "module {module} is not registered; register its catalogue first with `mesh catalogue register DIR`"
                    ),
                    Err(mesh_store::StoreError::NotFound { what: "node", .. }) => bail!(
                        "node {node} is not recorded; add it with `mesh node add {node}`"
                    ),
                    other => other?,
                }
                Ok(format!("assigned {module} to {node}\n"))
            } else if store.unassign(&node, &module).await? {
                Ok(format!("unassigned {module} from {node}\n"))
            } else {
                bail!("{module} is not assigned to {node}; `mesh nodes` lists the nodes")
            }
        }
        .await;
        store.close().await;
        output::print(&result?)?;
        Ok(ExitCode::SUCCESS)
    })?
}

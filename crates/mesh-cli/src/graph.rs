//! `mesh catalogue graph`: the catalogue drawn as Graphviz DOT or SVG —
//! modules, seats, who consumes whose events, who uses which seat or tool,
//! dangling consumers marked. The registered catalogue by default, or one
//! on disk with `--catalogue DIR`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use std::collections::BTreeMap;

use mesh_core::artifact::Reference;
use mesh_core::catalogue::graph::{self, VersionInputs};
use mesh_core::names::Name;

use crate::authority::open_existing_store;
use crate::output;
use crate::state::MeshArgs;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GraphFormat {
    Dot,
    Svg,
    Json,
}

#[derive(Debug, Args)]
pub struct GraphArgs {
    #[arg(long, value_enum, default_value_t = GraphFormat::Dot)]
    pub format: GraphFormat,
    /// Draw this catalogue (directories or manifest files) instead of the
    /// registered one.
    #[arg(long = "catalogue")]
    pub catalogue: Vec<PathBuf>,
    /// Draw each recorded version too, pointing at its module and at the
    /// versions its build's inputs came from.
    #[arg(long)]
    pub versions: bool,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

pub fn run(args: &GraphArgs) -> anyhow::Result<ExitCode> {
    let catalogue = if args.catalogue.is_empty() {
        crate::block_on(async {
            let store = open_existing_store(&args.mesh.store_url()?).await?;
            let c = mesh_state::registered::catalogue(&store).await;
            store.close().await;
            anyhow::Ok(c?)
        })??
    } else {
        // A catalogue with errors still draws: the dangling edges are what
        // an operator looks at it for. Only one that does not load is refused.
        let report = mesh_state::load(&args.catalogue)?;
        report.catalogue
    };
    let mut g = graph::graph(&catalogue);
    if args.versions {
        let (versions, published) = crate::block_on(async {
            let store = open_existing_store(&args.mesh.store_url()?).await?;
            let read = recorded_versions(&store).await;
            store.close().await;
            read
        })??;
        g.add_versions(&versions, &published);
    }
    let text = match args.format {
        GraphFormat::Dot => g.dot(),
        GraphFormat::Svg => g.svg(),
        GraphFormat::Json => format!("{}\n", serde_json::to_string_pretty(&g)?),
    };
    output::print(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// Every recorded version with the inputs its build read, and which
/// version published each recorded artifact.
async fn recorded_versions(
    store: &mesh_store::Store,
) -> anyhow::Result<(Vec<VersionInputs>, BTreeMap<Reference, (Name, String)>)> {
    let mut versions = Vec::new();
    for b in store.builds(None).await? {
        let (Some(module), Some(version), mesh_store::BuildState::Succeeded) =
            (b.module, b.rev, b.state)
        else {
            continue;
        };
        versions.push(VersionInputs {
            module,
            version,
            // Recorded as read and checked; one that no longer reads is
            // not drawn rather than failing the drawing.
            inputs: b.inputs.iter().filter_map(|i| i.parse().ok()).collect(),
        });
    }
    // Oldest first: an artifact published twice belongs to its first.
    let mut rows = store.artifacts(None).await?;
    rows.reverse();
    let published = graph::published_by(
        rows.into_iter()
            .map(|r| (r.reference(), r.module.clone(), r.version.clone())),
    );
    Ok((versions, published))
}

//! `mesh catalogue graph`: the catalogue drawn as Graphviz DOT or SVG —
//! modules, seats, who consumes whose events, who uses which seat or tool,
//! dangling consumers marked. The registered catalogue by default, or one
//! on disk with `--catalogue DIR`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use mesh_core::catalogue::graph;

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
    let g = graph::graph(&catalogue);
    let text = match args.format {
        GraphFormat::Dot => g.dot(),
        GraphFormat::Svg => g.svg(),
        GraphFormat::Json => format!("{}\n", serde_json::to_string_pretty(&g)?),
    };
    output::print(&text)?;
    Ok(ExitCode::SUCCESS)
}

//! `mesh controller`: runs the controller daemon until SIGTERM or SIGINT.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use mesh_controller::ControllerOptions;

use crate::logging;
use crate::state::MeshArgs;

#[derive(Debug, Args)]
pub struct ControllerArgs {
    #[command(flatten)]
    pub mesh: MeshArgs,
    /// How long a report may wait in CONTROL for an unavailable store
    /// before it is let go (and logged with its node and sequence).
    #[arg(long, default_value = "1h", value_parser = crate::node::parse_ttl)]
    pub store_window: std::time::Duration,
}

pub fn run(args: &ControllerArgs) -> anyhow::Result<ExitCode> {
    logging::init();
    let mut opts = ControllerOptions::new(args.mesh.dir.clone(), args.mesh.store_url());
    opts.store_window = args.store_window;
    let rt = logging::daemon_runtime()?;
    rt.block_on(mesh_controller::daemon::run(opts, logging::stop_signal()))
        .with_context(|| format!("starting the controller of {}", args.mesh.dir.display()))?;
    Ok(ExitCode::SUCCESS)
}

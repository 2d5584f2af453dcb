//! `mesh controller`: runs the controller daemon until SIGTERM or SIGINT.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use mesh_controller::ControllerOptions;
use mesh_controller::http::HttpListen;

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
    /// Where to serve /healthz, /readyz, /metrics, the JSON API and the
    /// dashboard [default: 127.0.0.1:7420, or a free port on 127.0.0.1 when
    /// that is taken, logged]. Given explicitly, an address that cannot be
    /// bound stops the start. The address bound is written to
    /// `controller/http.addr` in the mesh's directory, where `mesh status`
    /// reads it.
    #[arg(long, value_name = "ADDR", conflicts_with = "no_http")]
    pub http: Option<std::net::SocketAddr>,
    /// Serve no HTTP at all.
    #[arg(long)]
    pub no_http: bool,
}

pub fn run(args: &ControllerArgs) -> anyhow::Result<ExitCode> {
    logging::init();
    let dir = args.mesh.dir()?;
    let mut opts = ControllerOptions::new(dir.clone(), args.mesh.store_url()?);
    opts.store_window = args.store_window;
    opts.http = match (args.no_http, args.http) {
        (true, _) => None,
        (false, Some(addr)) => Some(HttpListen {
            addr,
            required: true,
        }),
        (false, None) => Some(HttpListen::default()),
    };
    let rt = logging::daemon_runtime()?;
    rt.block_on(mesh_controller::daemon::run(opts, logging::stop_signal()))
        .with_context(|| format!("starting the controller of {}", dir.display()))?;
    Ok(ExitCode::SUCCESS)
}

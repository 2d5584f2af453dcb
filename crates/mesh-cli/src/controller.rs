//! `mesh controller`: runs the controller daemon until SIGTERM or SIGINT.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use mesh_controller::ControllerOptions;
use mesh_controller::http::HttpListen;

use mesh_files::lock::{Claim, DirLock};

use crate::logging;
use crate::shutdown::{self, Signals};
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
    /// dashboard [default: 127.0.0.1:7420; when another process holds it, a
    /// free port on 127.0.0.1, with a warning naming it; the address bound
    /// is written to controller/http.addr]. Given explicitly, an address
    /// that cannot be bound stops the start.
    #[arg(long, value_name = "ADDR", conflicts_with = "no_http")]
    pub http: Option<std::net::SocketAddr>,
    /// Serve no HTTP at all.
    #[arg(long)]
    pub no_http: bool,
    /// How long the store waits for a word from the active controller
    /// before a standby may take over (PostgreSQL: any number of
    /// controllers may run against one store, one of them active).
    #[arg(long, default_value = "5s", value_parser = crate::node::parse_ttl)]
    pub lease: std::time::Duration,
    /// How long a confirmed move onto NATS (`mesh rollout --confirm`) waits
    /// for every node to take the new bus before the controller moves
    /// without the ones that did not (`mesh status` names each).
    #[arg(long, default_value = "60s", value_parser = crate::node::parse_ttl)]
    pub move_within: std::time::Duration,
}

/// One mesh per directory: the controller's lock on `--dir`.
pub const CLAIM: Claim = Claim {
    holder: "mesh controller",
    what: "the mesh",
    option: "--dir",
};

/// How long the controller may take to stop once asked (its last flush of
/// last-seen times, the bus connection's flush, the store's close).
pub const STOP_LIMIT: Duration = Duration::from_secs(3);

pub fn run(args: &ControllerArgs) -> anyhow::Result<ExitCode> {
    logging::init();
    // Before anything in the directory is read: a second controller on it
    // would fight the first over the users file and the broker. A missing
    // directory is not made here: the genesis's absence is the error.
    let dir = args.mesh.dir()?;
    let store_url = args.mesh.store_url()?;
    // On PostgreSQL the store's lease decides which controller writes, so
    // a standby may share the directory (and the broker's users file).
    let standby_possible = matches!(
        mesh_store::url_kind(&store_url),
        Ok(mesh_store::BackendKind::Postgres)
    );
    let _lock = match dir.is_dir() && !standby_possible {
        true => Some(DirLock::acquire(&dir, CLAIM)?),
        false => None,
    };
    let mut opts = ControllerOptions::new(dir.clone(), store_url);
    opts.store_window = args.store_window;
    opts.lease_ttl = args.lease;
    opts.move_within = args.move_within;
    opts.http = http_listen(args.no_http, args.http);
    shutdown::block_on(controller(opts))?
        .with_context(|| format!("starting the controller of {}", dir.display()))?;
    Ok(ExitCode::SUCCESS)
}

async fn controller(opts: ControllerOptions) -> anyhow::Result<()> {
    let signals = Signals::install()?;
    // Nothing of its own to kill: it only exits.
    signals.force_on_second(|| {});
    let ran = shutdown::bounded_after(
        signals.first(),
        STOP_LIMIT,
        mesh_controller::daemon::run(opts, signals.first()),
    )
    .await;
    match ran {
        Some(r) => {
            r?;
        }
        None => tracing::warn!(limit = ?STOP_LIMIT, "the controller did not stop in time; exiting"),
    }
    Ok(())
}

/// `--http ADDR` / `--no-http` as the controller takes them: nothing given
/// serves on the default address (a free port on its interface when that
/// is taken); an address given must be bound.
pub fn http_listen(no_http: bool, http: Option<std::net::SocketAddr>) -> Option<HttpListen> {
    match (no_http, http) {
        (true, _) => None,
        (false, Some(addr)) => Some(HttpListen {
            addr,
            required: true,
        }),
        (false, None) => Some(HttpListen::default()),
    }
}

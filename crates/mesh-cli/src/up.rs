//! `mesh up`: the whole mesh on this machine, the way `nomad agent -dev`
//! and `wash up` do it. Genesis in `--dir` (reused on the next run), the
//! broker started and supervised, the controller, one local host enrolled
//! through a token, the example catalogue registered and its runnable
//! modules assigned to it. SIGTERM or Ctrl-C stops everything it started,
//! each step bounded: the modules (the host's driver stops them), the
//! host, the controller, then the broker (in a process group of its own,
//! so a terminal's Ctrl-C reaches it only through `mesh up`). A second
//! signal kills what is left and exits 130 at once. One `mesh up` per
//! directory: a second is refused, naming the first.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use mesh_controller::genesis::BusKind;
use mesh_controller::{ControllerOptions, Genesis};
use mesh_files::lock::{Claim, DirLock};
use tokio::sync::watch;

use crate::progress::Progress;
use crate::shutdown::{self, Signals};
use crate::{controller, host, init, logging, output};

mod broker;
mod children;
mod first_start;
mod foundation;
mod local;
mod postgres;
mod programs;
mod rabbitmq;
mod records;
mod standby;

use broker::Broker;
use children::PidCell;
use first_start::FirstStart;
use foundation::Foundation;
use local::Local;
use postgres::Postgres;
use programs::put_programs;
use records::prepare_records;
use standby::Standby;

/// The local host's node name.
pub const LOCAL_NODE: &str = "local";

/// One mesh per directory: `mesh up` holds the mesh's lock, and the lock of
/// its host's state directory (a `mesh host --state DIR/host` beside it
/// would kill its modules as leftovers).
const CLAIM: Claim = Claim {
    holder: "mesh up",
    ..controller::CLAIM
};
const HOST_CLAIM: Claim = Claim {
    holder: "mesh up",
    option: "--dir",
    ..host::CLAIM
};

#[derive(Debug, Args)]
pub struct UpArgs {
    /// The mesh's directory: genesis, store, broker, the local host
    /// [default: `MESH_DIR`, else `.mesh` in the working directory;
    /// `.mesh-ha` with `--ha`].
    #[arg(long, env = "MESH_DIR", hide_env = true)]
    pub dir: Option<PathBuf>,
    /// The catalogue to register; its modules whose command is found are
    /// assigned to the local node.
    #[arg(long, default_value = "examples/catalogue")]
    pub catalogue: PathBuf,
    /// The broker's client port (a new genesis only) [default: 4222 on
    /// NATS, 5671 on AMQP].
    #[arg(long)]
    pub port: Option<u16>,
    /// The bus of a new genesis: NATS with JetStream, or AMQP (RabbitMQ).
    /// A mesh made before keeps its own; naming another is refused.
    #[arg(long, value_parser = parse_bus)]
    pub bus: Option<BusKind>,
    /// The nats-server binary (default: `MESH_NATS_SERVER`, then PATH).
    #[arg(long, env = "MESH_NATS_SERVER")]
    pub nats_server: Option<PathBuf>,
    /// Where the controller serves /healthz, /readyz, /metrics, the JSON
    /// API and the dashboard [default: 127.0.0.1:7420; when another process
    /// holds it, a free port on 127.0.0.1, with a warning; the summary
    /// names the address bound]. Given explicitly, an address that cannot
    /// be bound stops the start.
    #[arg(long, value_name = "ADDR", conflicts_with = "no_http")]
    pub http: Option<std::net::SocketAddr>,
    /// Serve no HTTP at all.
    #[arg(long)]
    pub no_http: bool,
    /// The whole failover picture on this machine: three broker servers
    /// (every stream on each), a PostgreSQL of its own for the store, and
    /// two controllers, one active and one standing by.
    #[arg(long)]
    pub ha: bool,
}

fn parse_bus(s: &str) -> Result<BusKind, String> {
    s.parse()
}

/// The servers of `mesh up --ha`'s bus.
const HA_REPLICAS: u8 = 3;

pub fn run(args: &UpArgs) -> anyhow::Result<ExitCode> {
    logging::init();
    // Modules built beside this binary (examples/modules) are found by name.
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
    {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs = vec![dir];
        dirs.extend(std::env::split_paths(&path));
        if let Ok(joined) = std::env::join_paths(dirs) {
            // SAFETY: no other thread exists yet; the runtime starts below.
            unsafe { std::env::set_var("PATH", joined) };
        }
    }
    shutdown::block_on(up(args))?
}

fn store_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("mesh.db").display())
}

async fn up(args: &UpArgs) -> anyhow::Result<ExitCode> {
    // First: a Ctrl-C from here on stops in order, never half-way.
    let signals = Signals::install()?;
    // Absolute once: every path handed on (a module's key file and working
    // directory, the broker's files) then names the same place from any
    // working directory.
    let given = args.dir.clone().unwrap_or_else(|| match args.ha {
        true => PathBuf::from(".mesh-ha"),
        false => PathBuf::from(crate::state::DIR_NAME),
    });
    let dir =
        std::path::absolute(&given).with_context(|| format!("resolving {}", given.display()))?;
    let host_dir = dir.join("host");
    // Noted before anything is made: what a failed first start removes.
    let first = FirstStart::note(&dir, args.ha);
    // Before anything in the directory is touched; held until the process
    // ends (the kernel drops them however it ends).
    let _lock = DirLock::acquire(&dir, CLAIM)?;
    let _host_lock = DirLock::acquire(&host_dir, HOST_CLAIM)?;
    let ran = run_mesh(args, &signals, &dir).await;
    if let (Err(_), Some(first)) = (&ran, first) {
        first.undo(&host_dir);
    }
    ran
}

/// The mesh in `dir` started, run until a signal, and stopped.
async fn run_mesh(args: &UpArgs, signals: &Signals, dir: &Path) -> anyhow::Result<ExitCode> {
    let host_dir = dir.join("host");
    check_kind(dir, args.ha, args.bus)?;
    // A mesh on RabbitMQ runs no nats-server, and needs none installed.
    let on_amqp =
        args.bus == Some(BusKind::Amqp) || Genesis::open(dir).is_ok_and(|g| g.bus == BusKind::Amqp);
    let nats = match on_amqp {
        true => PathBuf::new(),
        false => nats_server(args)?,
    };
    // Every process started from here on is in `pids` while it runs: a
    // second Ctrl-C ends the modules and each of them, at once.
    let pids = PidCell::default();
    {
        let (pids, host_dir) = (pids.clone(), host_dir.clone());
        signals.force_on_second(move || {
            host::kill_modules(&host_dir);
            children::force_stop(&pids);
        });
    }
    // The store first: genesis records the controller's key in it.
    let mut postgres = None;
    let url = match args.ha {
        false => store_url(dir),
        true => {
            let (mut pg, url) = Postgres::prepare(dir, pids.clone()).await?;
            let starting = Progress::start("up: starting PostgreSQL");
            let started = or_signal(signals, pg.start(&url)).await;
            drop(starting);
            if let Err(why) = step(started) {
                pg.stop().await;
                return cut_short(why);
            }
            postgres = Some(pg);
            url
        }
    };
    let genesis = match open_or_make(dir, args, &url).await {
        Ok(g) => g,
        Err(e) => {
            if let Some(pg) = &mut postgres {
                pg.stop().await;
            }
            return Err(e);
        }
    };
    let mut broker = Foundation {
        broker: Broker::new(&nats, &genesis, pids)?,
        postgres,
        standby: None,
    };
    // The records first, before the controller opens the store: SQLite
    // has one writer, and a controller starting beside a burst of writes
    // may find the database locked.
    let prepared = or_signal(signals, prepare_records(&url, &args.catalogue)).await;
    let mut prepared = match step(prepared) {
        Ok(p) => p,
        Err(why) => return broker.cut_short(why).await,
    };
    let starting = Progress::start("up: starting the broker");
    let started = or_signal(signals, broker.start()).await;
    match step(started) {
        Ok(()) => starting.finish(Some(&format!(
            "up: broker on {}",
            genesis.local_urls().join(", ")
        ))),
        Err(why) => {
            drop(starting);
            return broker.cut_short(why).await;
        }
    }
    // The programs built here go into the artifact store before the
    // controller opens the records (SQLite has one writer).
    let put = or_signal(
        signals,
        put_programs(dir, &genesis, &url, &prepared.programs),
    )
    .await;
    match step(put) {
        Ok(assigned) => prepared.assigned.extend(assigned),
        Err(why) => return broker.cut_short(why).await,
    }
    if args.ha {
        // Started beside this one: whichever takes the lease is active.
        match Standby::start(dir, args.no_http, &broker.pid_cell()) {
            Ok(s) => broker.standby = Some(s),
            Err(e) => return broker.cut_short(Some(e)).await,
        }
    }
    let (stop_tx, stop) = watch::channel(false);
    let mut opts = ControllerOptions::new(dir.to_path_buf(), url.clone());
    opts.http = controller::http_listen(args.no_http, args.http);
    let (http_tx, http_bound) = tokio::sync::mpsc::unbounded_channel();
    opts.http_bound = Some(http_tx);
    // Polled here rather than spawned: the store's futures are not `Send`
    // for every lifetime the spawn demands.
    let controller = async {
        let r = shutdown::bounded_after(
            stopped(stop.clone()),
            controller::STOP_LIMIT,
            mesh_controller::daemon::run(opts, stopped(stop.clone())),
        )
        .await;
        // A controller that could not start ends the whole mesh.
        let _ = stop_tx.send(true);
        r
    };
    let rest = async {
        let local = Local {
            dir,
            genesis: &genesis,
            url: &url,
            signals,
            stop_tx: &stop_tx,
        };
        let result = local.run(&mut broker, prepared, http_bound).await;
        // Whatever ended it: the controller stops too.
        let _ = stop_tx.send(true);
        result
    };
    let (controlled, rest) = tokio::join!(controller, rest);
    // Last: the host and the controller were using it.
    broker.stop().await;
    tracing::info!("broker stopped");
    output::note("up: stopped");
    rest?;
    match controlled {
        Some(r) => {
            r.context("the controller")?;
        }
        None => {
            tracing::warn!(limit = ?controller::STOP_LIMIT, "the controller did not stop in time")
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `work`, unless a signal comes first (`None`).
async fn or_signal<T>(signals: &Signals, work: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        r = work => Some(r),
        () = signals.first() => None,
    }
}

/// A start step's value, or why the start ends there: its error, or none
/// (a signal came first).
fn step<T>(done: Option<anyhow::Result<T>>) -> Result<T, Option<anyhow::Error>> {
    match done {
        Some(Ok(v)) => Ok(v),
        Some(Err(e)) => Err(Some(e)),
        None => Err(None),
    }
}

/// How `mesh up` ends once a start was cut short and what it started is
/// stopped: the error, or, stopped by a signal, a clean exit.
fn cut_short(why: Option<anyhow::Error>) -> anyhow::Result<ExitCode> {
    match why {
        Some(e) => Err(e),
        None => {
            output::note("up: stopped");
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A mesh made by `mesh up --ha` starts only with `--ha`, and the other
/// way round: refused before anything is made or started.
fn check_kind(dir: &Path, ha: bool, bus: Option<BusKind>) -> anyhow::Result<()> {
    if ha && bus == Some(BusKind::Amqp) {
        anyhow::bail!(
            "`mesh up --ha` runs a NATS cluster of three; a mesh on RabbitMQ has one broker server: leave out --ha or --bus amqp"
        );
    }
    let Ok(genesis) = Genesis::open(dir) else {
        return Ok(());
    };
    if let Some(bus) = bus
        && genesis.bus != bus
    {
        anyhow::bail!(
            "{} holds a mesh on {} and --bus {bus} names the other: a mesh's bus is chosen at genesis; leave out --bus, or make a mesh on {bus} in another --dir",
            dir.display(),
            genesis.bus
        );
    }
    match (ha, genesis.replicas) {
        (true, 1) => anyhow::bail!(
            "{} holds a mesh of one broker server; `mesh up --ha` makes a mesh of its own with three: run it with another --dir (without one it uses .mesh-ha)",
            dir.display()
        ),
        (false, n) if n > 1 => anyhow::bail!(
            "{} holds a mesh of {n} broker servers, and `mesh up` runs one: start it with `mesh up --ha --dir {}`",
            dir.display(),
            dir.display()
        ),
        _ => Ok(()),
    }
}

/// The genesis in `dir`, made now if there is none.
async fn open_or_make(dir: &Path, args: &UpArgs, url: &str) -> anyhow::Result<Genesis> {
    match Genesis::open(dir) {
        Ok(g) => Ok(g),
        Err(_) if !dir.join(mesh_controller::genesis::SIGNING_SEED).exists() => {
            let opts = mesh_controller::genesis::GenesisOptions {
                port: args.port.unwrap_or(match args.bus {
                    Some(BusKind::Amqp) => 5671,
                    _ => 4222,
                }),
                replicas: if args.ha { HA_REPLICAS } else { 1 },
                bus: args.bus.unwrap_or_default(),
                amqp_ports: None,
            };
            Ok(init::make_with(dir, &[], &opts, url).await?.0)
        }
        Err(e) => Err(e).context(format!("reading the genesis in {}", dir.display())),
    }
}

/// Resolves once `stop` turns true.
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

fn nats_server(args: &UpArgs) -> anyhow::Result<PathBuf> {
    nats_server_path(args.nats_server.as_deref())
}

/// `given`, or the first `nats-server` on PATH.
pub fn nats_server_path(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    // A `mesh` run from a checkout's target/ finds the broker scripts/setup
    // installed into that checkout's .tools/bin, without `. .tools/env`.
    let checkout = std::env::current_exe().ok().and_then(|exe| {
        exe.ancestors()
            .map(|d| d.join(".tools/bin/nats-server"))
            .find(|p| p.is_file())
    });
    std::env::split_paths(&path)
        .map(|d| d.join("nats-server"))
        .find(|p| p.is_file())
        .or(checkout)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no nats-server found: run `scripts/setup` and `. .tools/env` (it sets MESH_NATS_SERVER), or give --nats-server PATH"
            )
        })
}

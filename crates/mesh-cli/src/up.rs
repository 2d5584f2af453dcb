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
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use mesh_controller::{ControllerOptions, Genesis};
use mesh_core::names::Name;
use mesh_core::token::Token;
use mesh_files::lock::{Claim, DirLock};
use tokio::sync::watch;

use crate::progress::Progress;
use crate::shutdown::{self, Signals};
use crate::{authority, controller, host, init, logging, output};

mod broker;
mod children;
mod foundation;
mod postgres;
mod programs;
mod standby;

use broker::Broker;
use foundation::Foundation;
use postgres::Postgres;
use programs::{
    Container, LocalProgram, container_ready, local_program, names_artifacts, put_programs,
};
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
    /// The broker's client port (a new genesis only).
    #[arg(long, default_value_t = 4222)]
    pub port: u16,
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
    // Before anything in the directory is touched; held until the process
    // ends (the kernel drops them however it ends).
    let _lock = DirLock::acquire(&dir, CLAIM)?;
    let _host_lock = DirLock::acquire(&host_dir, HOST_CLAIM)?;
    check_kind(&dir, args.ha)?;
    // The store first: genesis records the controller's key in it.
    let mut postgres = None;
    let url = match args.ha {
        false => store_url(&dir),
        true => {
            let (mut pg, url) = Postgres::prepare(&dir).await?;
            let starting = Progress::start("up: starting PostgreSQL");
            let started = tokio::select! {
                r = pg.start(&url) => Some(r),
                () = signals.first() => None,
            };
            drop(starting);
            match started {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    pg.stop().await;
                    return Err(e);
                }
                None => {
                    pg.stop().await;
                    output::note("up: stopped");
                    return Ok(ExitCode::SUCCESS);
                }
            }
            postgres = Some(pg);
            url
        }
    };
    let genesis = match open_or_make(&dir, args, &url).await {
        Ok(g) => g,
        Err(e) => {
            if let Some(pg) = &mut postgres {
                pg.stop().await;
            }
            return Err(e);
        }
    };
    let nats = nats_server(args)?;
    let mut broker = Foundation {
        broker: Broker::new(&nats, &genesis),
        postgres,
        standby: None,
    };
    {
        // A second Ctrl-C: the modules and the broker are killed, now.
        let (pid, host_dir) = (broker.pid_cell(), host_dir.clone());
        signals.force_on_second(move || {
            host::kill_modules(&host_dir);
            for pid in children::running(&pid) {
                shutdown::kill_and_reap(pid);
            }
        });
    }
    // The records first, before the controller opens the store: SQLite
    // has one writer, and a controller starting beside a burst of writes
    // may find the database locked.
    let prepared = tokio::select! {
        r = prepare_records(&url, &args.catalogue) => r?,
        () = signals.first() => return Ok(ExitCode::SUCCESS),
    };
    let starting = Progress::start("up: starting the broker");
    let started = tokio::select! {
        r = broker.start() => Some(r),
        () = signals.first() => None,
    };
    match started {
        Some(Ok(())) => starting.finish(Some(&format!(
            "up: broker on {}",
            genesis.local_urls().join(", ")
        ))),
        Some(Err(e)) => {
            broker.stop().await;
            return Err(e);
        }
        None => {
            drop(starting);
            broker.stop().await;
            output::note("up: stopped");
            return Ok(ExitCode::SUCCESS);
        }
    }

    // The programs built here go into the artifact store before the
    // controller opens the records (SQLite has one writer).
    let mut prepared = prepared;
    let put = tokio::select! {
        r = put_programs(&dir, &genesis, &url, &prepared.programs) => Some(r),
        () = signals.first() => None,
    };
    match put {
        Some(Ok(assigned)) => prepared.assigned.extend(assigned),
        Some(Err(e)) => {
            broker.stop().await;
            return Err(e);
        }
        None => {
            broker.stop().await;
            output::note("up: stopped");
            return Ok(ExitCode::SUCCESS);
        }
    }

    if args.ha {
        // Started beside this one: whichever takes the lease is active.
        match Standby::start(&dir, args.no_http, &broker.pid_cell()) {
            Ok(s) => broker.standby = Some(s),
            Err(e) => {
                broker.stop().await;
                return Err(e);
            }
        }
    }
    let (stop_tx, stop) = watch::channel(false);
    let mut opts = ControllerOptions::new(dir.clone(), url.clone());
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
            dir: &dir,
            genesis: &genesis,
            url: &url,
            signals: &signals,
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

/// A mesh made by `mesh up --ha` starts only with `--ha`, and the other
/// way round: refused before anything is made or started.
fn check_kind(dir: &Path, ha: bool) -> anyhow::Result<()> {
    let Ok(genesis) = Genesis::open(dir) else {
        return Ok(());
    };
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
                port: args.port,
                replicas: if args.ha { HA_REPLICAS } else { 1 },
            };
            Ok(init::make_with(dir, &[], &opts, url).await?.0)
        }
        Err(e) => Err(e).context(format!("reading the genesis in {}", dir.display())),
    }
}

/// What the local part of `mesh up` works with.
struct Local<'a> {
    dir: &'a Path,
    genesis: &'a Genesis,
    url: &'a str,
    signals: &'a Signals,
    stop_tx: &'a watch::Sender<bool>,
}

impl Local<'_> {
    /// The local host, the catalogue, and the wait for a signal (keeping
    /// the broker up meanwhile); returns once everything should stop, the
    /// host stopped.
    async fn run(
        &self,
        broker: &mut Foundation,
        prepared: Prepared,
        mut http_bound: tokio::sync::mpsc::UnboundedReceiver<Option<std::net::SocketAddr>>,
    ) -> anyhow::Result<()> {
        let Prepared { assigned, seen, .. } = prepared;
        let host_dir = self.dir.join("host");
        // The controller could not start.
        let ended = stopped(self.stop_tx.subscribe());
        tokio::pin!(ended);
        // Nothing of this needs stopping: a signal drops it where it is.
        let host = tokio::select! {
            r = self.host(&host_dir) => r?,
            () = self.signals.first() => return Ok(()),
            () = &mut ended => return Ok(()),
        };
        let mut host_task = {
            let stop = stopped(self.stop_tx.subscribe());
            tokio::spawn(async move {
                // The local node is reached where everything else here is.
                let opts = mesh_host::HostOptions {
                    advertise: Some("127.0.0.1".into()),
                    ..mesh_host::HostOptions::default()
                };
                mesh_host::run(&host, &opts, stop).await
            })
        };
        // Where the controller bound HTTP (decided early in its start; none
        // if it ended before).
        let http = http_bound.recv().await.flatten();
        output::daemon_line(print_summary(
            self.dir,
            self.genesis,
            &assigned,
            http,
            broker,
        ));
        let reported = reported(self.url, &assigned, seen);
        tokio::pin!(reported);
        let mut waiting = !assigned.is_empty();
        let mut failure = None;
        loop {
            tokio::select! {
                () = self.signals.first() => break,
                () = &mut ended => break,
                r = &mut reported, if waiting => {
                    waiting = false;
                    if let Err(e) = r {
                        tracing::warn!(error = %format!("{e:#}"), "could not read the local node's reports");
                    }
                }
                (what, status, log) = broker.exited() => {
                    tracing::warn!(?status, log = %log.display(), "{what} exited; starting it again");
                    let restarted = tokio::select! {
                        r = async {
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            broker.start().await
                        } => r,
                        () = self.signals.first() => break,
                    };
                    if let Err(e) = restarted {
                        failure = Some(e);
                        break;
                    }
                }
            }
        }
        output::note("up: stopping");
        // The host stops its modules while the broker is still up.
        let _ = self.stop_tx.send(true);
        broker.stop_standby().await;
        match tokio::time::timeout(host::STOP_LIMIT, &mut host_task).await {
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "the host stopped with an error"),
            Ok(Err(e)) => tracing::warn!(error = %e, "the host task failed"),
            Ok(Ok(Ok(()))) => tracing::info!("host stopped"),
            Err(_) => {
                tracing::warn!(limit = ?host::STOP_LIMIT, "the host did not stop in time; killing its modules");
                host_task.abort();
                host::kill_modules(&host_dir);
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// The enrolled local host, enrolled now if it is not.
    async fn host(&self, host_dir: &Path) -> anyhow::Result<mesh_host::HostState> {
        if let Ok(s) = mesh_host::HostState::open(host_dir) {
            return Ok(s);
        }
        let enrolling = Progress::start(format!("up: enrolling node {LOCAL_NODE}"));
        let host = enrol_local(self.genesis, self.url, host_dir).await?;
        enrolling.finish(Some(&format!("up: node {LOCAL_NODE} enrolled")));
        Ok(host)
    }
}

/// What the records say before the local host starts.
struct Prepared {
    /// The modules assigned to the local node.
    assigned: Vec<Name>,
    /// The modules that run a program built here, put and assigned once
    /// the broker is up.
    programs: Vec<LocalProgram>,
    /// The id of its newest report so far: the wait for this run's report
    /// skips the previous run's.
    seen: Option<i64>,
}

/// The local node recorded, the catalogue registered and its runnable
/// modules assigned to it.
async fn prepare_records(url: &str, catalogue: &Path) -> anyhow::Result<Prepared> {
    let registering = Progress::start(format!(
        "up: registering {} and assigning its runnable modules",
        catalogue.display()
    ));
    let (assigned, programs) = register_and_assign(url, catalogue).await?;
    registering.finish(None);
    let seen = latest_report_id(url).await?;
    Ok(Prepared {
        assigned,
        programs,
        seen,
    })
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

/// A token for the local node, spent by an enrolment in this process.
async fn enrol_local(
    genesis: &Genesis,
    url: &str,
    host_dir: &Path,
) -> anyhow::Result<mesh_host::HostState> {
    let node = Name::new(LOCAL_NODE).expect("a valid name");
    let store = authority::open_store(url).await?;
    if store.node(&node).await?.is_none() {
        store.add_node(&node, &[]).await?;
    }
    let issued = store.issue_token(&node, Duration::from_secs(600)).await;
    store.close().await;
    let issued = issued?;
    let token = Token {
        // Every server: the host fails over among them.
        bus_urls: genesis.local_urls(),
        cert_sha256: genesis.cert_sha256.clone(),
        controller_key: genesis.signing_key.clone(),
        node,
        enrolment_seed: issued.secret,
        expires_at: u64::try_from(issued.expires_at).unwrap_or(0),
    };
    Ok(mesh_host::enrol(&token, host_dir, &mesh_host::EnrolOptions::default()).await?)
}

/// Registers the catalogue and assigns to the local node each module whose
/// command is on PATH (the others describe programs this machine lacks);
/// returns those assigned and those that run a program built here (see
/// [`local_program`]), to put into the artifact store first.
async fn register_and_assign(
    url: &str,
    catalogue: &Path,
) -> anyhow::Result<(Vec<Name>, Vec<LocalProgram>)> {
    if !catalogue.exists() {
        output::note(format_args!(
            "up: no catalogue at {}; nothing assigned",
            catalogue.display()
        ));
        return Ok((Vec::new(), Vec::new()));
    }
    let report =
        authority::checked_catalogue(&[catalogue.to_path_buf()], "nothing was registered")?;
    let node = Name::new(LOCAL_NODE).expect("a valid name");
    let store = authority::open_store(url).await?;
    let mut assigned = Vec::new();
    let mut programs = Vec::new();
    let mut left = Vec::new();
    let result = async {
        if store.node(&node).await?.is_none() {
            store.add_node(&node, &[]).await?;
        }
        crate::assign::register(&store, &report, &[catalogue.to_path_buf()]).await?;
        for m in report.catalogue.manifests() {
            // The foundation (broker, store) is what `mesh up` runs itself:
            // a module holding it would be a second broker, started without
            // the configuration it needs, failing for good.
            let foundation = m.holds_seat(mesh_core::manifest::BROKER_ROLE)
                || m.holds_seat(mesh_core::catalogue::STORE_ROLE);
            if foundation {
                continue;
            }
            if m.run
                .as_ref()
                .is_some_and(|r| r.driver.value == mesh_core::manifest::Driver::Container)
            {
                match container_ready(&store, m).await? {
                    Container::Ready => {
                        store.assign_version(&node, &m.name.value, None).await?;
                        assigned.push(m.name.value.clone());
                    }
                    Container::Build(program) => programs.push(program),
                    Container::Left(why) => left.push((m.name.value.clone(), why)),
                }
                continue;
            }
            // A module the mesh builds from its repository runs what its
            // build made, never a program of the same name found here.
            if let (Some(repository), Some(_)) = (&m.repository, &m.build)
                && m.run.as_ref().is_some_and(names_artifacts)
            {
                let module = &m.name.value;
                if store.newest_version(module).await?.is_some() {
                    store.assign_version(&node, module, None).await?;
                    assigned.push(module.clone());
                } else {
                    left.push((
                        module.clone(),
                        format!(
                            "it is built from its repository ({}): `mesh build {module}`, then `mesh assign {module} {LOCAL_NODE}`",
                            repository.value
                        ),
                    ));
                }
                continue;
            }
            if let Some(program) = local_program(m) {
                programs.push(program);
                continue;
            }
            let runnable = m.run.as_ref().is_some_and(|r| {
                !names_artifacts(r) && r.command.first().is_some_and(|a| on_path(&a.text))
            });
            if runnable {
                store.assign(&node, &m.name.value).await?;
                assigned.push(m.name.value.clone());
            }
        }
        anyhow::Ok(())
    }
    .await;
    store.close().await;
    result?;
    for (module, why) in &left {
        output::note(format_args!("up: {module} left unassigned: {why}"));
    }
    Ok((assigned, programs))
}

/// The id of the local node's newest report, if it has one.
async fn latest_report_id(url: &str) -> anyhow::Result<Option<i64>> {
    let node = Name::new(LOCAL_NODE).expect("a valid name");
    let store = authority::open_existing_store(url).await?;
    let latest = store.latest_report(&node).await;
    store.close().await;
    Ok(latest?.map(|r| r.id))
}

/// Waits until a report of the local node newer than `seen` (the newest
/// before this run: it may say `running` of processes a previous run
/// stopped) says how each assigned module came out (running or failed),
/// showing progress meanwhile.
async fn reported(url: &str, assigned: &[Name], seen: Option<i64>) -> anyhow::Result<()> {
    use mesh_store::ModuleState;
    let node = Name::new(LOCAL_NODE).expect("a valid name");
    let mut progress = Progress::start(format!("up: waiting for node {LOCAL_NODE} to report"));
    let store = authority::open_existing_store(url).await?;
    let result = async {
        loop {
            let latest = store
                .latest_report(&node)
                .await?
                .filter(|r| seen.is_none_or(|s| r.id > s));
            let states: Vec<(&Name, Option<&ModuleState>)> = assigned
                .iter()
                .map(|m| {
                    let o = latest
                        .as_ref()
                        .and_then(|r| r.report.outcomes.iter().find(|o| o.module == *m));
                    (m, o.map(|o| &o.state))
                })
                .collect();
            let settled = |s: &Option<&ModuleState>| {
                matches!(s, Some(ModuleState::Running | ModuleState::Failed { .. }))
            };
            let pending: Vec<&str> = states
                .iter()
                .filter(|(_, s)| !settled(s))
                .map(|(m, _)| m.as_str())
                .collect();
            if pending.is_empty() {
                break anyhow::Ok(
                    states
                        .iter()
                        .map(|(m, s)| match s {
                            Some(ModuleState::Running) => format!("{m} running"),
                            _ => format!("{m} failed (`mesh reports {LOCAL_NODE}` says why)"),
                        })
                        .collect::<Vec<_>>()
                        .join(", "),
                );
            }
            progress.set(format!(
                "up: waiting for node {LOCAL_NODE} to report {}",
                pending.join(", ")
            ));
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    .await;
    store.close().await;
    let outcome = result?;
    progress.finish(Some(&format!("up: node {LOCAL_NODE} reports {outcome}")));
    Ok(())
}

fn on_path(program: &str) -> bool {
    if program.contains('/') {
        return Path::new(program).is_file();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|d| d.join(program).is_file())
}

fn print_summary(
    dir: &Path,
    genesis: &Genesis,
    assigned: &[Name],
    http: Option<std::net::SocketAddr>,
    foundation: &Foundation,
) -> Result<(), output::StdoutError> {
    let mut out = output::Stdout::lock();
    out.line(format_args!("mesh up: {}", dir.display()))?;
    match genesis.replicas {
        1 => out.line(format_args!("  broker      {}", genesis.local_url()))?,
        n => out.line(format_args!(
            "  broker      {n} servers, every stream on each: {}",
            genesis.local_urls().join(", ")
        ))?,
    }
    if let Some(pg) = &foundation.postgres {
        out.line(format_args!(
            "  store       PostgreSQL (pid {}), data in {}, its URL in {}",
            pg.pid().map_or("?".into(), |p| p.to_string()),
            pg.data().display(),
            dir.join(postgres::STORE_URL_FILE).display()
        ))?;
    }
    if let Some(s) = &foundation.standby {
        out.line(format_args!(
            "  controllers this process and pid {} ({}log {}): one active, one standing by",
            s.pid().map_or("?".into(), |p| p.to_string()),
            s.http.map_or(String::new(), |a| format!("http://{a}/, ")),
            s.log.display()
        ))?;
    }
    out.line(format_args!(
        "  node        {LOCAL_NODE} (state in {})",
        dir.join("host").display()
    ))?;
    if assigned.is_empty() {
        out.line("  modules     none runnable here (build examples/modules to get mesh-echo)")?;
    }
    for m in assigned {
        let module_dir = dir.join("host/modules").join(m.as_str());
        out.line(format_args!(
            "  module      {m} on {LOCAL_NODE}: log {}, files in {}",
            module_dir.join("log").display(),
            module_dir.join("work").display()
        ))?;
    }
    match http {
        Some(addr) => out.line(format_args!(
            "  dashboard   http://{addr}/ (/metrics, /api/status)"
        ))?,
        None => out.line("  dashboard   none: the controller serves no HTTP (see its log)")?,
    }
    out.line(format_args!(
        "look with: mesh status --dir {0}; stop with Ctrl-C",
        dir.display()
    ))?;
    out.flush()
}

//! `mesh build MODULE[@REV]`, `mesh builds`, and `mesh build-machine`: a
//! module's revision built by whichever build machine takes the work
//! (DESIGN §6 "Builds"), the builds the controller recorded, and the build
//! machine itself — a module holding the `mesh-build-machine` role, run by
//! its host like any other.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use futures::StreamExt as _;
use mesh_controller::Genesis;
use mesh_core::build::{BUILT_EVENT, Built, build_machines};
use mesh_core::catalogue::BUILD_MACHINE_ROLE;
use mesh_core::event;
use mesh_core::names::Name;
use mesh_core::operation::Operation;
use mesh_core::subjects::{self, EventSelector};
use serde::Serialize;

use crate::authority::open_store_to_write;
use crate::output::{self, ListFormat};
use crate::progress::Progress;
use crate::state::MeshArgs;

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// `MODULE` or `MODULE@REV` (a branch, tag or commit; HEAD if none).
    pub target: String,
    /// Print the build's id once it is queued, and do not wait.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait for the build (it stays queued past it).
    #[arg(long, default_value = "30m", value_parser = crate::node::parse_ttl)]
    pub timeout: Duration,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

#[derive(Debug, Args)]
pub struct BuildsArgs {
    /// Only this module's builds.
    pub module: Option<String>,
    #[arg(long, value_enum, default_value_t = ListFormat::Text)]
    pub output: ListFormat,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

#[derive(Debug, Args)]
pub struct BuildMachineArgs {
    /// Repositories, builds in progress and the builds' HOME.
    #[arg(long, default_value = "build-cache")]
    pub cache: PathBuf,
    /// A build running longer is killed and reported failed.
    #[arg(long, default_value = "30m", value_parser = crate::node::parse_ttl)]
    pub time_limit: Duration,
    /// Builds at once; work arriving while all run is handed back to the
    /// queue for another build machine.
    #[arg(long, default_value_t = 1)]
    pub parallel: usize,
}

/// After this long with no build machine assigned, `mesh build` says so.
const SAY_NO_MACHINE_AFTER: Duration = Duration::from_secs(3);

pub fn run_build(args: &BuildArgs) -> anyhow::Result<ExitCode> {
    let (module, rev) = match args.target.split_once('@') {
        Some((m, r)) => (m, r),
        None => (args.target.as_str(), "HEAD"),
    };
    let module = Name::new(module).with_context(|| format!("{module:?} is not a module name"))?;
    if let Some(ctx) = args.mesh.remote()? {
        let request = mesh_core::operation::wire::BuildArgs {
            module,
            rev: rev.to_string(),
        };
        let said = crate::remote::change(ctx, Operation::Build, &request)?;
        output::print(&format!("{said}\n"))?;
        return Ok(ExitCode::SUCCESS);
    }
    let genesis = Genesis::open(&args.mesh.dir()?)?;
    let url = args.mesh.store_url()?;
    crate::block_on(build(args, &genesis, &url, module, rev.to_string()))?
}

async fn build(
    args: &BuildArgs,
    genesis: &Genesis,
    url: &str,
    module: Name,
    rev: String,
) -> anyhow::Result<ExitCode> {
    let store = open_store_to_write(url).await?;
    let client = crate::bus::controller_client(genesis, url).await?;
    let bus = mesh_bus::seam::Bus::Nats(mesh_bus::seam::NatsSide::new(client.clone()));
    let js = async_nats::jetstream::new(client.clone());
    let built_subject = subjects::seat_event(
        &Name::new(BUILD_MACHINE_ROLE)?,
        &EventSelector::Named(Name::new(BUILT_EVENT)?),
    );
    // Listening before submitting: the answer cannot slip past.
    let mut answers = client
        .subscribe(built_subject)
        .await
        .context("listening for built events")?;
    client.flush().await.context("listening for built events")?;
    let submitted = mesh_controller::builds::submit(&store, &bus, &module, &rev).await;
    let id = match submitted {
        Ok(s) => s.id,
        Err(e) => {
            store.close().await;
            return Err(e.into());
        }
    };
    crate::audit::record_local(
        &store,
        Operation::Build,
        serde_json::json!({ "module": module.as_str(), "rev": rev, "id": id }),
    )
    .await?;
    if args.no_wait {
        output::print(&format!("{id}\n"))?;
        store.close().await;
        return Ok(ExitCode::SUCCESS);
    }
    let mut progress = Progress::start(format!("build {id} of {module}@{rev}: queued"));
    let started = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut said_no_machine = false;
    let built: Built = loop {
        tokio::select! {
            msg = answers.next() => {
                let Some(msg) = msg else { bail!("the connection to the broker closed while waiting") };
                if let Some(b) = answer(&msg.payload, &id) {
                    break b;
                }
            }
            _ = tick.tick() => {
                if started.elapsed() > args.timeout {
                    drop(progress);
                    output::note(format!("build {id} is not done after {:?}; it stays queued, and `mesh builds {module}` shows it once it is", args.timeout));
                    store.close().await;
                    return Ok(ExitCode::FAILURE);
                }
                let machines = assigned_build_machines(&store).await.unwrap_or_default();
                let taken = taken(&js).await;
                let state = match (machines.len(), taken) {
                    (0, _) => "queued; no build machine is assigned, so it waits (`mesh assign build-machine NODE`)".to_string(),
                    (n, Some(true)) => format!("building ({n} build machine{} assigned)", if n == 1 { "" } else { "s" }),
                    (n, _) => format!("queued for {n} build machine{}", if n == 1 { "" } else { "s" }),
                };
                if machines.is_empty() && !said_no_machine && started.elapsed() >= SAY_NO_MACHINE_AFTER {
                    said_no_machine = true;
                    output::note(format!("no module holding {BUILD_MACHINE_ROLE} is assigned to any node: build {id} waits in the queue until one is (`mesh assign build-machine NODE`)"));
                }
                progress.set(format!("build {id} of {module}@{rev}: {state}"));
            }
        }
    };
    if let Some(failure) = &built.failure {
        progress.finish(None);
        output::note(format!("build {id} of {module}@{rev} failed: {failure}"));
        if !built.log_tail.is_empty() {
            output::note(format!(
                "--- the build's log, last lines ---\n{}",
                built.log_tail
            ));
        }
        store.close().await;
        return Ok(ExitCode::FAILURE);
    }
    // Done when the controller has recorded it: a `mesh assign` right
    // after pins this version.
    progress.set(format!(
        "build {id} of {module}@{rev}: built; waiting for the controller to record it"
    ));
    let recorded = loop {
        if let Some(b) = store.build(&id).await? {
            break Some(b);
        }
        if started.elapsed() > args.timeout {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    progress.finish(None);
    store.close().await;
    let version = built.version.clone().unwrap_or_default();
    let mut text = format!("built {module} at {version} (build {id})\n");
    for a in &built.artifacts {
        text.push_str(&format!("  {} ({} bytes)\n", a.reference, a.size));
    }
    for i in &built.inputs {
        text.push_str(&format!("  built on {i}\n"));
    }
    match recorded {
        Some(r) if matches!(r.state, mesh_store::BuildState::Succeeded) => {
            text.push_str(&format!("  run it: `mesh assign {module} NODE` pins this version (or `--version {version}`)\n"));
        }
        Some(r) => {
            if let mesh_store::BuildState::Failed { reason } = r.state {
                output::print(&text)?;
                output::note(format!(
                    "the controller did not take it as a version: {reason}"
                ));
                return Ok(ExitCode::FAILURE);
            }
        }
        None => text.push_str(
            "  the controller has not recorded it yet; `mesh builds` shows it once it has\n",
        ),
    }
    output::print(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// The build a `built` payload announces, when it answers `id`. Anything
/// else on the subject (another build, a malformed event) is not ours.
fn answer(payload: &[u8], id: &str) -> Option<Built> {
    let envelope = event::parse(payload).ok()?;
    let built: Built = serde_json::from_value(envelope.payload).ok()?;
    (built.id == id).then_some(built)
}

async fn assigned_build_machines(store: &mesh_store::Store) -> anyhow::Result<Vec<(Name, Name)>> {
    let catalogue = mesh_state::registered::catalogue(store).await?;
    let assignments = store.assignments().await?;
    Ok(build_machines(
        &catalogue,
        assignments.iter().map(|a| (&a.node, &a.module)),
    ))
}

/// Whether some build machine holds work of the queue now.
async fn taken(js: &async_nats::jetstream::Context) -> Option<bool> {
    let seat = Name::new(BUILD_MACHINE_ROLE).ok()?;
    let mut c: async_nats::jetstream::consumer::Consumer<
        async_nats::jetstream::consumer::push::Config,
    > = js
        .get_consumer_from_stream(
            subjects::consumer::seat_worker(&seat),
            subjects::seat_stream(&seat),
        )
        .await
        .ok()?;
    let info = c.info().await.ok()?;
    Some(info.num_ack_pending > 0)
}

/// A build as `mesh builds` lists it.
#[derive(Debug, Serialize)]
pub struct BuildView {
    pub id: String,
    pub module: Option<String>,
    pub version: Option<String>,
    pub state: &'static str,
    pub failure: Option<String>,
    pub artifacts: Vec<String>,
    pub inputs: Vec<String>,
    /// Unix milliseconds.
    pub finished_at: i64,
}

pub fn run_builds(args: &BuildsArgs) -> anyhow::Result<ExitCode> {
    let module = crate::authority::module_filter(args.module.as_deref())?;
    let builds =
        crate::authority::read_store(&args.mesh, async |s| s.builds(module.as_ref()).await)?;
    let views: Vec<BuildView> = builds
        .into_iter()
        // An upload is a version too, but no build machine made it.
        .filter(|b| !b.id.starts_with("upload:"))
        .map(|b| {
            let (state, failure) = match b.state {
                mesh_store::BuildState::Succeeded => ("succeeded", None),
                mesh_store::BuildState::Failed { reason } => ("failed", Some(reason)),
            };
            let artifacts = b
                .artifacts
                .iter()
                .map(|a| match &b.module {
                    Some(m) => format!("artifact-store://{m}/{}@sha256:{}", a.name, a.digest),
                    None => a.name.clone(),
                })
                .collect();
            BuildView {
                id: b.id,
                module: b.module.map(|m| m.to_string()),
                version: b.rev,
                state,
                failure,
                artifacts,
                inputs: b.inputs,
                finished_at: b.finished_at,
            }
        })
        .collect();
    match args.output {
        ListFormat::Json => output::print_json(&views)?,
        ListFormat::Text => {
            let mut out = output::Stdout::lock();
            if views.is_empty() {
                out.line(
                    "no builds; `mesh build MODULE` builds one (its manifest names its repository)",
                )?;
            } else {
                let wm = views
                    .iter()
                    .map(|v| v.module.as_deref().unwrap_or("-").len())
                    .max()
                    .unwrap_or(6)
                    .max(6);
                out.line(format_args!(
                    "{:<32}  {:<wm$}  {:<12}  {:<9}  WHAT",
                    "ID", "MODULE", "VERSION", "STATE"
                ))?;
                for v in &views {
                    let short: String = v
                        .version
                        .as_deref()
                        .unwrap_or("-")
                        .chars()
                        .take(12)
                        .collect();
                    let what = match &v.failure {
                        Some(f) => f.clone(),
                        None => v.artifacts.join(", "),
                    };
                    out.line(format_args!(
                        "{:<32}  {:<wm$}  {:<12}  {:<9}  {}",
                        v.id,
                        v.module.as_deref().unwrap_or("-"),
                        short,
                        v.state,
                        what
                    ))?;
                }
            }
            out.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run_build_machine(args: &BuildMachineArgs) -> anyhow::Result<ExitCode> {
    crate::logging::init();
    let options = mesh_builder::Options {
        cache: args.cache.clone(),
        time_limit: args.time_limit,
        parallel: args.parallel,
    };
    crate::shutdown::block_on(async move {
        let signals = crate::shutdown::Signals::install()?;
        tokio::select! {
            r = mesh_builder::run(options) => {
                mesh_builder::stop_all();
                match r {
                    Ok(()) => Ok(ExitCode::SUCCESS),
                    Err(e) => Err(anyhow::Error::new(e).context("the build machine stopped")),
                }
            }
            () = signals.first() => {
                // Unfinished builds come round again to whoever takes them.
                mesh_builder::stop_all();
                tracing::info!("build machine stopping");
                Ok(ExitCode::SUCCESS)
            }
        }
    })?
}

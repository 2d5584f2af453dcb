//! `mesh events tail [FILTER]`: an administrator watches the events the
//! mesh stores. Reads `EVENTS` through an ordered, ephemeral consumer as the
//! controller (whose key the administrator holds, and the only principal
//! with JetStream API rights), so it creates nothing durable and acknowledges
//! nothing: watching takes nothing from any module.

use std::process::ExitCode;

use anyhow::{Context as _, bail};
use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use clap::Args;
use futures::StreamExt as _;
use mesh_bus::{BusConfig, CertPin, ClientCredential, Secret};
use mesh_controller::Genesis;
use mesh_core::authority::CONTROLLER;
use mesh_core::manifest::refs::parse_event_ref;
use mesh_core::subjects::{self, STREAM_EVENTS};

use crate::node::ListFormat;
use crate::output;
use crate::state::MeshArgs;

#[derive(Debug, Args)]
pub struct EventsArgs {
    #[command(subcommand)]
    pub command: EventsCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum EventsCommand {
    /// Print events as they are stored (every event by default).
    #[command(after_help = "Examples:
  mesh events tail
  mesh events tail ticker.tick --all --count 3
  mesh events tail 'seat:jobs.*' --output json
  mesh events tail 'mesh.mod.*.event.>'")]
    Tail(TailArgs),
}

#[derive(Debug, Args)]
pub struct TailArgs {
    /// Which events: as a manifest's `consumes` writes them
    /// (`ticker.tick`, `seat:jobs.*`, `git-server.**`) or a subject
    /// (`mesh.mod.*.event.>`).
    pub filter: Option<String>,
    /// From the first event stored, not only those from now on.
    #[arg(long)]
    pub all: bool,
    /// Stop after this many events.
    #[arg(long)]
    pub count: Option<u64>,
    #[arg(long, value_enum, default_value = "text")]
    pub output: ListFormat,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

/// The subject a filter stands for.
fn filter_subject(filter: &str) -> anyhow::Result<String> {
    if filter.starts_with("mesh.") {
        let covered = [subjects::ALL_MODULE_EVENTS, subjects::ALL_SEAT_EVENTS]
            .iter()
            .any(|all| subjects::pattern::overlap(all, filter));
        if !covered {
            bail!(
                "{filter:?} matches no event subject: EVENTS holds {} and {}",
                subjects::ALL_MODULE_EVENTS,
                subjects::ALL_SEAT_EVENTS
            );
        }
        return Ok(filter.to_string());
    }
    let r = parse_event_ref(filter).map_err(|e| {
        anyhow::anyhow!(
            "{filter:?}: {e}; write <module>.<event>, seat:<seat>.<event> or a mesh. subject"
        )
    })?;
    Ok(r.subject())
}

pub fn run(args: &EventsArgs) -> anyhow::Result<ExitCode> {
    let EventsCommand::Tail(args) = &args.command;
    let filter = args.filter.as_deref().map(filter_subject).transpose()?;
    let genesis = Genesis::open(&args.mesh.dir()?)?;
    let seed_file = genesis.path("controller/nkey.seed");
    let seed = std::fs::read_to_string(&seed_file)
        .with_context(|| format!("reading the controller's key {}", seed_file.display()))?;
    crate::block_on(async {
        let cfg = BusConfig {
            url: genesis.local_url(),
            principal: CONTROLLER.into(),
            credential: ClientCredential::NKey(Secret::new(seed.trim())),
            ca_file: None,
            inbox_prefix: Some(subjects::inbox_prefix(CONTROLLER)),
            pin: Some(CertPin::from_hex(&genesis.cert_sha256)?),
        };
        let client = mesh_bus::connect(&cfg)
            .await
            .context("connecting as the controller")?;
        let js = async_nats::jetstream::new(client);
        let stream = js
            .get_stream(STREAM_EVENTS)
            .await
            .context("finding EVENTS")?;
        let consumer = stream
            .create_consumer(pull::OrderedConfig {
                filter_subject: filter.clone().unwrap_or_default(),
                deliver_policy: if args.all {
                    DeliverPolicy::All
                } else {
                    DeliverPolicy::New
                },
                ..Default::default()
            })
            .await
            .context("reading EVENTS")?;
        let mut messages = consumer.messages().await.context("reading EVENTS")?;
        let mut seen = 0;
        while args.count.is_none_or(|c| seen < c) {
            let Some(m) = messages.next().await else {
                break;
            };
            let m = m.context("reading EVENTS")?;
            print_event(&m.subject, &m.payload, args.output)?;
            seen += 1;
        }
        anyhow::Ok(())
    })??;
    Ok(ExitCode::SUCCESS)
}

fn print_event(subject: &str, payload: &[u8], format: ListFormat) -> anyhow::Result<()> {
    let line = match (mesh_core::event::parse(payload), format) {
        (Ok(e), ListFormat::Json) => serde_json::to_string(&serde_json::json!({
            "subject": subject,
            "envelope": e,
        }))?,
        (Ok(e), ListFormat::Text) => format!(
            "{subject}  {}@{}  {}  {}",
            e.module,
            e.node,
            e.id,
            serde_json::to_string(&e.payload)?
        ),
        // Shown, not dropped: a stored message that is no envelope is
        // something an administrator wants to see.
        (Err(err), ListFormat::Json) => serde_json::to_string(&serde_json::json!({
            "subject": subject,
            "malformed": err.to_string(),
        }))?,
        (Err(err), ListFormat::Text) => format!("{subject}  (not an event envelope: {err})"),
    };
    output::print(&format!("{line}\n"))?;
    Ok(())
}

//! `mesh events tail [FILTER]`: an administrator watches the events the
//! mesh stores. Reads `EVENTS` through an ordered, ephemeral consumer as the
//! controller (whose key the administrator holds, and the only principal
//! with JetStream API rights), so it creates nothing durable and acknowledges
//! nothing: watching takes nothing from any module. The sender it shows is
//! what the subject and the records bear out (`mesh_core::event::sender`):
//! an envelope's word alone never makes an event a node's.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use clap::Args;
use futures::StreamExt as _;
use mesh_controller::Genesis;
use mesh_core::event::sender::sender;
use mesh_core::event::{EventEnvelope, EventError};
use mesh_core::manifest::refs::parse_event_ref;
use mesh_core::records::Assignment;
use mesh_core::subjects::STREAM_EVENTS;

use crate::output;
use crate::output::ListFormat;
use crate::state::MeshArgs;

#[derive(Debug, Args)]
pub struct EventsArgs {
    #[command(subcommand)]
    pub command: EventsCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum EventsCommand {
    /// Print events as they are stored (every event by default), each
    /// line starting with when it was emitted (UTC).
    #[command(after_help = "Examples:
  mesh events tail
  mesh events tail ticker.tick --all --count 3
  mesh events tail ticker.tick --all --count 5 --timeout 30s
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
    /// Stop after this many events. Fewer within --timeout of the last
    /// one (or of the start): stop, say how many came, exit 1.
    #[arg(long)]
    pub count: Option<u64>,
    /// With --count: how long to wait for the next event before giving up.
    #[arg(long, default_value = "10s", value_parser = crate::node::parse_ttl, requires = "count")]
    pub timeout: Duration,
    #[arg(long, value_enum, default_value = "text")]
    pub output: ListFormat,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

/// The subject a filter stands for; a node-scoped seat's events are read
/// from every node's holder, as the registered catalogue declares the seat.
fn filter_subject(filter: &str, mesh: &MeshArgs) -> anyhow::Result<String> {
    if let Some(subject) = mesh_core::catalogue::subject_filter(filter) {
        return subject.map_err(anyhow::Error::msg);
    }
    // Said before the store is read: the filter does not read at all.
    parse_event_ref(filter).map_err(|e| {
        anyhow::anyhow!(
            "{filter:?}: {e}; write <module>.<event>, seat:<seat>.<event> or a mesh. subject"
        )
    })?;
    let catalogue = crate::block_on(async {
        let store = crate::authority::open_existing_store(&mesh.store_url()?).await?;
        let c = mesh_state::registered::catalogue(&store).await;
        store.close().await;
        anyhow::Ok(c?)
    })??;
    // A filter nothing registered emits would wait for ever, silently.
    catalogue.event_filter(filter).map_err(anyhow::Error::msg)
}

pub fn run(args: &EventsArgs) -> anyhow::Result<ExitCode> {
    let EventsCommand::Tail(args) = &args.command;
    if let Some(ctx) = args.mesh.remote()? {
        return crate::block_on(remote_tail(ctx, args))?;
    }
    let filter = args
        .filter
        .as_deref()
        .map(|f| filter_subject(f, &args.mesh))
        .transpose()?;
    let genesis = Genesis::open(&args.mesh.dir()?)?;
    let store_url = args.mesh.store_url()?;
    crate::block_on(async {
        let cfg = crate::bus::controller_bus(&genesis, &store_url).await?;
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
        // Where each module runs: what the node an envelope claims is
        // checked against (a module's own events carry no node in their
        // subject).
        let mut assigned = assignments(&args.mesh).await?;
        let mut seen = 0;
        while args.count.is_none_or(|c| seen < c) {
            let next = match args.count {
                // Without --count it follows for ever, as `tail -f` does.
                None => messages.next().await,
                Some(count) => match tokio::time::timeout(args.timeout, messages.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        output::note(format!(
                            "{seen} of {count} events; no more within {}s",
                            args.timeout.as_secs()
                        ));
                        return Ok(ExitCode::FAILURE);
                    }
                },
            };
            let Some(m) = next else {
                break;
            };
            let m = m.context("reading EVENTS")?;
            // When the broker stored it: the time of a message that is no
            // envelope (an envelope says when it was emitted).
            let stored = m
                .info()
                .ok()
                .and_then(|i| u64::try_from(i.published.unix_timestamp()).ok());
            let envelope = mesh_core::event::parse(&m.payload);
            let mut who = envelope
                .as_ref()
                .ok()
                .map(|e| sender(&m.subject, e, &assigned));
            if who.as_ref().is_some_and(|w| w.doubt.is_some()) {
                // Assigned since the records were read, perhaps: read
                // them again before doubting.
                assigned = assignments(&args.mesh).await?;
                who = envelope
                    .as_ref()
                    .ok()
                    .map(|e| sender(&m.subject, e, &assigned));
            }
            let (who, doubt) = who.map_or((None, None), |w| (Some(w.to_string()), w.doubt));
            print_event(&m.subject, envelope, who, doubt, stored, args.output)?;
            seen += 1;
        }
        anyhow::Ok(ExitCode::SUCCESS)
    })?
}

/// How often a tail from a person's machine asks for what is new.
const ASK_EVERY: Duration = Duration::from_millis(300);

/// `mesh events tail` from a person's machine: the active controller reads
/// `EVENTS` for them (and says who sent each, from its records), asked
/// again for what follows the last answer.
async fn remote_tail(ctx: crate::context::Context, args: &TailArgs) -> anyhow::Result<ExitCode> {
    use mesh_core::operation::Operation;
    use mesh_core::operation::wire::{EventsAnswer, EventsArgs, Reply};
    let asker = crate::remote::Asker::connect(ctx).await?;
    let mut after = args.all.then_some(0);
    let (mut seen, mut waiting_since) = (0, std::time::Instant::now());
    loop {
        let request = EventsArgs {
            filter: args.filter.clone(),
            after,
            max: 64,
        };
        let answer: EventsAnswer = match asker
            .ask(Operation::Events, serde_json::to_value(&request)?)
            .await?
        {
            Reply::Done { data, .. } => serde_json::from_value(data)
                .context("the controller's answer to `events` does not read")?,
            Reply::Refused { reason } => bail!("refused: {reason}"),
        };
        let got = !answer.events.is_empty();
        for e in answer.events {
            if args.count.is_some_and(|c| seen >= c) {
                break;
            }
            let envelope = mesh_core::event::parse(e.payload.as_bytes());
            print_event(&e.subject, envelope, e.who, e.doubt, e.stored, args.output)?;
            seen += 1;
        }
        after = Some(answer.last);
        if let Some(count) = args.count {
            if seen >= count {
                return Ok(ExitCode::SUCCESS);
            }
            if got {
                waiting_since = std::time::Instant::now();
            } else if waiting_since.elapsed() > args.timeout {
                output::note(format!(
                    "{seen} of {count} events; no more within {}s",
                    args.timeout.as_secs()
                ));
                return Ok(ExitCode::FAILURE);
            }
        }
        if !got {
            tokio::time::sleep(ASK_EVERY).await;
        }
    }
}

/// Every assignment the store records.
async fn assignments(mesh: &MeshArgs) -> anyhow::Result<Vec<Assignment>> {
    let store = crate::authority::open_existing_store(&mesh.store_url()?).await?;
    let read = store.assignments().await;
    store.close().await;
    Ok(read?
        .into_iter()
        .map(|a| Assignment::new(a.node, a.module))
        .collect())
}

/// One event: the sender shown is what the subject and the records bear
/// out, an envelope's claim that they do not shown as a claim.
fn print_event(
    subject: &str,
    envelope: Result<EventEnvelope, EventError>,
    who: Option<String>,
    doubt: Option<String>,
    stored_secs: Option<u64>,
    format: ListFormat,
) -> anyhow::Result<()> {
    let stored = stored_secs.map_or_else(|| "-".to_string(), utc_seconds);
    let who = who.unwrap_or_default();
    let line = match (envelope, format) {
        (Ok(e), ListFormat::Json) => {
            let mut line = serde_json::json!({
                "time": utc_seconds(e.at / 1000),
                "subject": subject,
                "envelope": e,
            });
            if let Some(doubt) = doubt {
                line["doubt"] = doubt.into();
            }
            serde_json::to_string(&line)?
        }
        (Ok(e), ListFormat::Text) => format!(
            "{}  {subject}  {who}  {}  {}",
            utc_seconds(e.at / 1000),
            e.id,
            serde_json::to_string(&e.payload)?
        ),
        // Shown, not dropped: a stored message that is no envelope is
        // something an administrator wants to see.
        (Err(err), ListFormat::Json) => serde_json::to_string(&serde_json::json!({
            "time": stored,
            "subject": subject,
            "malformed": err.to_string(),
        }))?,
        (Err(err), ListFormat::Text) => {
            format!("{stored}  {subject}  (not an event envelope: {err})")
        }
    };
    output::print(&format!("{line}\n"))?;
    Ok(())
}

/// RFC 3339 in UTC to the second (`2026-12-01T22:20:54Z`), from seconds
/// since the Unix epoch.
fn utc_seconds(secs: u64) -> String {
    let days = secs / 86_400;
    let rest = secs % 86_400;
    // Civil date from days since 1970-01-01 (the proleptic Gregorian
    // calendar's 400-year eras, from 0000-03-01).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::utc_seconds;

    #[test]
    fn times_read_as_rfc_3339_utc() {
        assert_eq!(utc_seconds(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_seconds(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_seconds(1_796_163_654), "2026-12-01T22:20:54Z");
        assert_eq!(utc_seconds(4_107_542_399), "2100-02-28T23:59:59Z");
    }
}

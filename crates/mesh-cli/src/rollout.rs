//! `mesh rollout check`: whether this mesh, on RabbitMQ, can move onto
//! NATS now. The active controller answers (it reads the records and dials
//! the new bus once); this prints each missing thing with its next step and
//! exits 0 only when there is none. It changes nothing: ask as often as you
//! like while the mesh serves.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use mesh_core::rollout::Readiness;

use crate::authority::{open_existing_store, open_store_to_write};
use crate::output::{self, ListFormat};
use crate::state::MeshArgs;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct RolloutArgs {
    #[command(subcommand)]
    pub command: Option<RolloutCommand>,
    /// Move the mesh from RabbitMQ onto NATS: refused unless a check of
    /// the mesh passes at that moment (it is run first, and its findings
    /// said); the plan is printed before anything moves.
    #[arg(long)]
    pub confirm: bool,
    /// The controller's HTTP address, as for `mesh rollout check`.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

#[derive(Debug, Subcommand)]
pub enum RolloutCommand {
    /// Whether the mesh can move from RabbitMQ onto NATS now: each missing
    /// thing and its next step (exit 0 only when ready, 1 otherwise).
    #[command(after_help = "Examples:
  mesh rollout check
  mesh rollout check --output json")]
    Check(CheckArgs),
    /// The move, node by node: which nodes took the new bus (their newest
    /// report answers a declaration naming it), and whether the controller
    /// has moved itself.
    #[command(after_help = "Examples:
  mesh rollout status
  mesh rollout status --output json")]
    Status(StatusArgs),
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[arg(long, value_enum, default_value_t = ListFormat::Text)]
    pub output: ListFormat,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

/// The move as `mesh rollout status` shows it.
#[derive(Debug, serde::Serialize)]
struct MoveShown {
    to: Vec<String>,
    confirmed_at: i64,
    moved_at: Option<i64>,
    retired_at: Option<i64>,
    nodes: Vec<NodeShown>,
}

#[derive(Debug, serde::Serialize)]
struct NodeShown {
    node: String,
    took: bool,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The controller's HTTP address [default: where the active
    /// controller's lease says it serves, else where this directory's
    /// controller wrote it serves].
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    #[arg(long, value_enum, default_value_t = ListFormat::Text)]
    pub output: ListFormat,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

/// The controller's dial of the new bus waits up to 5 s; its reading of
/// the records is quick.
const ANSWER_WITHIN: Duration = Duration::from_secs(20);

pub fn run(args: &RolloutArgs) -> anyhow::Result<ExitCode> {
    match &args.command {
        Some(RolloutCommand::Check(a)) => check(a),
        Some(RolloutCommand::Status(a)) => status(a),
        None if args.confirm => confirm(args),
        None => bail!(
            "say what to do: `mesh rollout check` (is the mesh ready to move onto NATS?) or `mesh rollout --confirm` (move it)"
        ),
    }
}

/// The recorded move and each enrolled node's part in it, from the store.
fn status(args: &StatusArgs) -> anyhow::Result<ExitCode> {
    let shown = crate::block_on(async {
        let store = open_existing_store(&args.mesh.store_url()?).await?;
        let read = async {
            let Some(m) = store.bus_move().await? else {
                return anyhow::Ok(None);
            };
            let mut nodes = Vec::new();
            for node in store.nodes().await? {
                if node.public_key.is_none() {
                    continue;
                }
                let took =
                    mesh_state::views::rollout::took_move(&store, &node.name, &m.to_urls).await?;
                nodes.push(NodeShown {
                    node: node.name.to_string(),
                    took,
                });
            }
            Ok(Some(MoveShown {
                to: m.to_urls,
                confirmed_at: m.confirmed_at,
                moved_at: m.moved_at,
                retired_at: m.retired_at,
                nodes,
            }))
        }
        .await;
        store.close().await;
        read
    })??;
    let Some(shown) = shown else {
        match args.output {
            ListFormat::Json => output::print_json(&serde_json::Value::Null)?,
            ListFormat::Text => output::print(
                "no move recorded: `mesh rollout check` says whether the mesh can move onto NATS\n",
            )?,
        }
        return Ok(ExitCode::SUCCESS);
    };
    match args.output {
        ListFormat::Json => output::print_json(&shown)?,
        ListFormat::Text => {
            let took = shown.nodes.iter().filter(|n| n.took).count();
            let mut out = format!(
                "move onto {}: {} of {} nodes took it; the controller {}\n",
                shown.to.join(","),
                took,
                shown.nodes.len(),
                match (shown.moved_at, shown.retired_at) {
                    (_, Some(_)) => "moved itself; RabbitMQ's users removed (it may be stopped)",
                    (Some(_), None) =>
                        "moved itself; RabbitMQ's users stay until every node reports on NATS",
                    (None, _) => "is draining RabbitMQ",
                }
            );
            for n in &shown.nodes {
                out.push_str(&format!(
                    "  {:<20} {}\n",
                    n.node,
                    if n.took {
                        "on the new bus"
                    } else {
                        "not yet: its report of the new bus has not been recorded (`mesh reports NODE`)"
                    }
                ));
            }
            output::print(&out)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs the check; refuses unless it passes, saying why; prints the plan.
fn confirm(args: &RolloutArgs) -> anyhow::Result<ExitCode> {
    let readiness = ask(&args.mesh, args.http.as_deref())?;
    if !readiness.ready {
        output::print(&text(&readiness))?;
        bail!(
            "refused: the mesh is not ready to move onto NATS ({} above); nothing was changed. Fix each, then `mesh rollout check` until it passes",
            match readiness.missing.len() {
                1 => "1 thing".to_string(),
                n => format!("{n} things"),
            }
        );
    }
    output::print(&plan_text(&readiness))?;
    let Some(mesh_core::rollout::MoveStep::Flip { url }) = readiness.plan.first() else {
        bail!("the controller's plan names no bus to move onto; nothing was changed");
    };
    let urls = vec![url.clone()];
    crate::block_on(async {
        let store = open_store_to_write(&args.mesh.store_url()?).await?;
        let done = async {
            store.confirm_bus_move(&urls).await?;
            crate::audit::record_local(&store, "rollout-confirm", serde_json::json!({ "to": urls }))
                .await
        }
        .await;
        store.close().await;
        done
    })??;
    output::print(&format!(
        "confirmed: the mesh moves onto NATS at {url}; the controller tells every node now, drains RabbitMQ and moves itself (`mesh rollout status` follows it)\n"
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// The steps a confirmed move carries out, numbered.
fn plan_text(r: &Readiness) -> String {
    let mut out = String::from("the move, in order:\n");
    for (i, step) in r.plan.iter().enumerate() {
        out.push_str(&format!("  {}. {step}\n", i + 1));
    }
    out
}

fn check(args: &CheckArgs) -> anyhow::Result<ExitCode> {
    let readiness = ask(&args.mesh, args.http.as_deref())?;
    match args.output {
        ListFormat::Json => output::print_json(&readiness)?,
        ListFormat::Text => output::print(&text(&readiness))?,
    }
    Ok(if readiness.ready {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The active controller's answer.
fn ask(mesh: &MeshArgs, http: Option<&str>) -> anyhow::Result<Readiness> {
    let dir = mesh.find().ok();
    let url = mesh.store_url()?;
    let controller = crate::block_on(async {
        let store = open_existing_store(&url).await?;
        let found = crate::status::find_controller(&store, dir.as_deref(), http).await;
        store.close().await;
        found
    })??;
    let at = controller
        .url
        .as_deref()
        .and_then(|u| u.strip_prefix("http://"))
        .unwrap_or(mesh_controller::http::DEFAULT_ADDR)
        .to_string();
    if let Some(key) = &controller.other_mesh {
        bail!(
            "the controller at {at} belongs to another mesh (controller key {key}); pass this mesh's with --http"
        );
    }
    if !controller.reachable {
        bail!(
            "the controller does not answer at {at}; the check is the active controller's to make: start it with `mesh controller` (or pass its address with --http)"
        );
    }
    let (code, body) = crate::status::http_get_within(&at, "/api/rollout/check", ANSWER_WITHIN)
        .with_context(|| format!("asking the controller at {at} for the rollout check"))?;
    if code != 200 {
        bail!(
            "the controller at {at} could not check the rollout (HTTP {code}): {}",
            body.trim()
        );
    }
    serde_json::from_str(&body)
        .with_context(|| format!("the controller at {at} answered the rollout check with something other than a readiness"))
}

/// One line per missing thing and its next step, then the verdict.
fn text(r: &Readiness) -> String {
    let mut out = String::new();
    for m in &r.missing {
        out.push_str(&format!("- {}\n  next: {}\n", m.what, m.next));
    }
    if r.ready {
        out.push_str(
            "ready: every node can move from RabbitMQ onto NATS (`mesh rollout --confirm`)\n",
        );
    } else {
        out.push_str(&format!(
            "not ready: {} thing{} to fix before the mesh can move onto NATS\n",
            r.missing.len(),
            if r.missing.len() == 1 { "" } else { "s" }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_core::bus::BusKind;
    use mesh_core::rollout::Missing;

    #[test]
    fn each_missing_thing_is_a_line_and_its_next_step() {
        let r = Readiness {
            from: BusKind::Amqp,
            ready: false,
            missing: vec![Missing {
                what: "node n2 is down".into(),
                next: "start `mesh host` on n2".into(),
            }],
            plan: vec![],
        };
        assert_eq!(
            text(&r),
            "- node n2 is down\n  next: start `mesh host` on n2\nnot ready: 1 thing to fix before the mesh can move onto NATS\n"
        );
        let ready = Readiness {
            from: BusKind::Amqp,
            ready: true,
            missing: vec![],
            plan: vec![],
        };
        assert!(text(&ready).starts_with("ready: "));
    }
}

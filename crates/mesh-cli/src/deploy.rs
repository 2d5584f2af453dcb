//! `mesh deploy`, `mesh deployments`, `mesh deployment ID`: a module's pin
//! moved to a version over its nodes, a canary first, then batches, each
//! waiting for its nodes to stay healthy (DESIGN "health and deploys").
//! This records the deployment (refusing what could never finish); the
//! active controller carries it out, step by step, and reverts it by
//! itself when a node fails. Pause, resume and revert are written over the
//! state they were read as, so the controller's next step never undoes
//! them.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Args;
use mesh_core::deploy::{self, BatchSize, Deployment, Spec, State, Step};
use mesh_core::duration::{parse_span, show_span};
use mesh_core::names::Name;
use mesh_store::{DeploymentRow, Store, StoreError};
use serde::Serialize;

use crate::authority::{open_existing_store, open_store_to_write};
use crate::output::{self, ListFormat, print_json};
use crate::state::MeshArgs;

#[derive(Debug, Args)]
pub struct DeployArgs {
    /// The module to move.
    pub module: String,
    /// The version to move it to (`mesh artifact list --module M`).
    #[arg(long)]
    pub version: String,
    /// The nodes to move, in order [default: every node the module is
    /// assigned to, by name].
    #[arg(long, value_delimiter = ',', value_name = "NODE,..")]
    pub nodes: Vec<String>,
    /// Nodes moved first, alone (0: none).
    #[arg(long, default_value_t = 1)]
    pub canary: u32,
    /// Nodes per batch after the canary: a number, or a percentage of the
    /// deployment's nodes (`25%`).
    #[arg(long, default_value = "25%", value_parser = parse_batch)]
    pub batch: BatchSize,
    /// How long each node of a batch must stay healthy before the next.
    #[arg(long, default_value = "10s", value_parser = parse_span)]
    pub healthy_for: u64,
    /// How long a batch may take to be healthy, from its start.
    #[arg(long, default_value = "5m", value_parser = parse_span)]
    pub deadline: u64,
    /// Leave a failed deployment as it is instead of moving every node it
    /// touched back to the version it ran before.
    #[arg(long)]
    pub no_auto_revert: bool,
    /// Follow it until it ends, a line per batch: exit 0 when it
    /// succeeded, 1 when it was halted or reverted.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait follows it before giving up (it carries on).
    #[arg(long, default_value = "1h", value_parser = parse_span, requires = "wait")]
    pub timeout: u64,
    #[arg(long, value_enum, default_value_t = ListFormat::Text)]
    pub output: ListFormat,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

#[derive(Debug, Args)]
pub struct DeploymentsArgs {
    /// One module's deployments only.
    #[arg(long)]
    pub module: Option<String>,
    #[arg(long, default_value_t = 20)]
    pub limit: u32,
    #[arg(long, value_enum, default_value_t = ListFormat::Text)]
    pub output: ListFormat,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

#[derive(Debug, Args)]
pub struct DeploymentArgs {
    /// The deployment's id (`mesh deployments`).
    pub id: i64,
    /// Hold it after the batch it is in: nothing more is moved.
    #[arg(long, conflicts_with_all = ["resume", "revert"])]
    pub pause: bool,
    /// Carry on a paused deployment (its batch's deadline starts again).
    #[arg(long, conflicts_with = "revert")]
    pub resume: bool,
    /// Move every node it may have touched back to its version before.
    #[arg(long)]
    pub revert: bool,
    #[arg(long, value_enum, default_value_t = ListFormat::Text)]
    pub output: ListFormat,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

/// `3` or `25%`.
pub fn parse_batch(s: &str) -> Result<BatchSize, String> {
    const HELP: &str = "write a number of nodes (`2`) or a percentage of them (`25%`)";
    let parsed = match s.strip_suffix('%') {
        Some(p) => p.parse::<u8>().map(BatchSize::Percent),
        None => s.parse::<u32>().map(BatchSize::Nodes),
    };
    parsed.map_err(|_| format!("{s:?}: {HELP}"))
}

fn name(what: &str, s: &str) -> anyhow::Result<Name> {
    Name::new(s).with_context(|| format!("{s:?} is not a {what} name"))
}

fn now_ms() -> u64 {
    u64::try_from(mesh_store::now_ms()).unwrap_or(0)
}

pub fn run_deploy(args: &DeployArgs) -> anyhow::Result<ExitCode> {
    let module = name("module", &args.module)?;
    let nodes = args
        .nodes
        .iter()
        .map(|n| name("node", n))
        .collect::<anyhow::Result<Vec<_>>>()?;
    crate::block_on(async {
        let store = open_store_to_write(&args.mesh.store_url()?).await?;
        let made = record(&store, args, module, nodes).await;
        let (id, d) = match made {
            Ok(made) => made,
            Err(e) => {
                store.close().await;
                return Err(e);
            }
        };
        let text = args.output == ListFormat::Text;
        match args.output {
            ListFormat::Json if !args.wait => {
                print_json(&serde_json::json!({ "id": id, "deployment": d }))?
            }
            ListFormat::Json => {}
            ListFormat::Text => output::print(&format!(
                "deployment #{id} of {} to {} over {} nodes: {}\n{}",
                d.spec.module,
                d.spec.version,
                d.spec.nodes.len(),
                batches_line(&d.spec),
                if args.wait {
                    String::new()
                } else {
                    format!("`mesh deployment {id}` follows it\n")
                }
            ))?,
        }
        if !args.wait {
            store.close().await;
            return Ok(ExitCode::SUCCESS);
        }
        let ended = follow(&store, id, args.timeout, text).await;
        store.close().await;
        let d = ended?;
        if !text {
            print_json(&serde_json::json!({ "id": id, "deployment": d }))?;
        }
        Ok(match d.state {
            State::Succeeded => ExitCode::SUCCESS,
            _ => ExitCode::FAILURE,
        })
    })?
}

/// Reads deployment `id` until it ends (or `within` passes), saying each
/// state it reaches; the deployment as it ended.
async fn follow(store: &Store, id: i64, within: u64, text: bool) -> anyhow::Result<Deployment> {
    let until = std::time::Instant::now() + std::time::Duration::from_millis(within);
    let mut said: Option<State> = None;
    loop {
        let row = store
            .deployment(id)
            .await?
            .with_context(|| format!("deployment #{id} is gone from the store"))?;
        let d = row.deployment;
        let same = match (&said, &d.state) {
            // A batch is said once, however its start is recorded.
            (Some(State::Running { batch: a, .. }), State::Running { batch: b, .. }) => a == b,
            (Some(a), b) => a == b,
            (None, _) => false,
        };
        if !same {
            if text {
                let line = match &d.state {
                    State::Running { batch, .. } => {
                        let batches = d.spec.batches();
                        let nodes = batches.get(*batch).map_or(String::new(), |b| {
                            b.iter().map(Name::as_str).collect::<Vec<_>>().join(" ")
                        });
                        format!("batch {} of {}: {nodes}", batch + 1, batches.len())
                    }
                    other => format!("deployment #{id} {}", state_line(other)),
                };
                output::print(&format!("{line}\n"))?;
            }
            said = Some(d.state.clone());
        }
        if !matches!(d.state, State::Running { .. } | State::Paused { .. }) {
            return Ok(d);
        }
        if std::time::Instant::now() >= until {
            bail!(
                "deployment #{id} is still {} after {}; it carries on (`mesh deployment {id}`)",
                state_line(&d.state),
                show_span(within)
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// `canary [n1], then [n2 n3], [n4 n5]`.
pub fn batches_line(spec: &Spec) -> String {
    let show = |b: &Vec<Name>| {
        format!(
            "[{}]",
            b.iter().map(Name::as_str).collect::<Vec<_>>().join(" ")
        )
    };
    let batches = spec.batches();
    let mut parts: Vec<String> = batches.iter().map(show).collect();
    if spec.canary > 0 && !parts.is_empty() {
        parts[0] = format!("canary {}", parts[0]);
        if parts.len() > 1 {
            parts[1] = format!("then {}", parts[1]);
        }
    }
    parts.join(", ")
}

async fn record(
    store: &Store,
    args: &DeployArgs,
    module: Name,
    nodes: Vec<Name>,
) -> anyhow::Result<(i64, Deployment)> {
    if store.module(&module).await?.is_none() {
        bail!("module {module} is not registered; `mesh catalogue register DIR` registers it");
    }
    let versions = store.versions().await?;
    if !versions.contains_key(&(module.clone(), args.version.clone())) {
        bail!(
            "module {module} has no version {}; `mesh artifact list --module {module}` lists its versions",
            args.version
        );
    }
    let assignments: Vec<_> = store
        .assignments()
        .await?
        .into_iter()
        .filter(|a| a.module == module)
        .collect();
    let assigned: Vec<Name> = assignments.iter().map(|a| a.node.clone()).collect();
    let spec = Spec {
        module: module.clone(),
        version: args.version.clone(),
        nodes: if nodes.is_empty() {
            assigned.clone()
        } else {
            nodes
        },
        canary: args.canary,
        batch: args.batch,
        healthy_for_ms: args.healthy_for,
        deadline_ms: args.deadline,
        auto_revert: !args.no_auto_revert,
    };
    spec.check(&assigned)?;
    if args.deadline < args.healthy_for {
        bail!(
            "the deadline ({}) is shorter than the healthy window ({}): no batch could pass; give a longer --deadline",
            show_span(args.deadline),
            show_span(args.healthy_for)
        );
    }
    let previous: BTreeMap<Name, String> = assignments
        .iter()
        .filter(|a| spec.nodes.contains(&a.node))
        .filter_map(|a| a.version.clone().map(|v| (a.node.clone(), v)))
        .collect();
    let d = Deployment {
        spec,
        previous,
        state: State::Running {
            batch: 0,
            started_ms: now_ms(),
        },
    };
    match store.create_deployment(&d).await {
        Ok(id) => Ok((id, d)),
        Err(StoreError::AlreadyExists { key, .. }) => bail!(
            "deployment {key} is still running; wait for it (`mesh deployments --module {module}`), or stop it with `mesh deployment ID --revert`"
        ),
        Err(e) => Err(e.into()),
    }
}

/// One node of a deployment as shown.
#[derive(Debug, Serialize)]
struct NodeRow {
    node: String,
    batch: usize,
    pinned: Option<String>,
    running: Option<String>,
    health: Option<String>,
    reason: Option<String>,
}

#[derive(Debug, Serialize)]
struct Shown {
    id: i64,
    deployment: Deployment,
    nodes: Vec<NodeRow>,
}

fn state_line(s: &State) -> String {
    match s {
        State::Running { batch, .. } => format!("running batch {}", batch + 1),
        State::Paused { batch } => format!("paused at batch {}", batch + 1),
        State::Succeeded => "succeeded".into(),
        State::Halted { node, reason } => format!("halted at {node}: {reason}"),
        State::Reverted {
            node: Some(node),
            reason,
        } => format!("reverted at {node}: {reason}"),
        State::Reverted { node: None, reason } => format!("reverted: {reason}"),
    }
}

pub fn run_deployments(args: &DeploymentsArgs) -> anyhow::Result<ExitCode> {
    let module = args
        .module
        .as_deref()
        .map(|m| name("module", m))
        .transpose()?;
    crate::block_on(async {
        let store = open_existing_store(&args.mesh.store_url()?).await?;
        let rows = store.deployments(module.as_ref(), args.limit).await;
        store.close().await;
        let rows = rows?;
        match args.output {
            ListFormat::Json => print_json(
                &rows
                    .iter()
                    .map(|r| serde_json::json!({"id": r.id, "deployment": r.deployment, "created_at": r.created_at, "updated_at": r.updated_at}))
                    .collect::<Vec<_>>(),
            )?,
            ListFormat::Text => {
                let mut out = output::Stdout::lock();
                if rows.is_empty() {
                    out.line("no deployment recorded; `mesh deploy MODULE --version V` makes one")?;
                }
                for r in &rows {
                    let s = &r.deployment.spec;
                    out.line(format_args!(
                        "#{:<4} {:<20} {:<12} {:>3} nodes  {}",
                        r.id,
                        s.module,
                        s.version,
                        s.nodes.len(),
                        state_line(&r.deployment.state)
                    ))?;
                }
                out.flush()?;
            }
        }
        Ok(ExitCode::SUCCESS)
    })?
}

pub fn run_deployment(args: &DeploymentArgs) -> anyhow::Result<ExitCode> {
    crate::block_on(async {
        let url = args.mesh.store_url()?;
        let store = if args.pause || args.resume || args.revert {
            open_store_to_write(&url).await?
        } else {
            open_existing_store(&url).await?
        };
        let shown = operate(&store, args).await;
        store.close().await;
        let shown = shown?;
        match args.output {
            ListFormat::Json => print_json(&shown)?,
            ListFormat::Text => {
                let d = &shown.deployment;
                let mut out = output::Stdout::lock();
                out.line(format_args!(
                    "deployment #{} of {} to {}: {}",
                    shown.id,
                    d.spec.module,
                    d.spec.version,
                    state_line(&d.state)
                ))?;
                out.line(format_args!(
                    "  {}; each batch healthy for {} within {}{}",
                    batches_line(&d.spec),
                    show_span(d.spec.healthy_for_ms),
                    show_span(d.spec.deadline_ms),
                    if d.spec.auto_revert {
                        ""
                    } else {
                        "; no auto-revert"
                    }
                ))?;
                for n in &shown.nodes {
                    out.line(format_args!(
                        "  {:<16} batch {:<3} pinned {:<10} running {:<10} {:<9} {}",
                        n.node,
                        n.batch + 1,
                        n.pinned.as_deref().unwrap_or("-"),
                        n.running.as_deref().unwrap_or("-"),
                        n.health.as_deref().unwrap_or("-"),
                        n.reason.as_deref().unwrap_or("")
                    ))?;
                }
                out.flush()?;
            }
        }
        Ok(ExitCode::SUCCESS)
    })?
}

/// Pauses, resumes or reverts `args.id` if asked, then reads it with each
/// node's pin and newest report.
async fn operate(store: &Store, args: &DeploymentArgs) -> anyhow::Result<Shown> {
    let id = args.id;
    let read = |row: Option<DeploymentRow>| {
        row.with_context(|| format!("there is no deployment #{id}; `mesh deployments` lists them"))
    };
    // Tried again when the controller wrote its step in between.
    for _ in 0..10 {
        let row = read(store.deployment(id).await?)?;
        let d = &row.deployment;
        let steps = if args.pause {
            match d.state {
                State::Running { batch, .. } => vec![Step::Record {
                    state: State::Paused { batch },
                }],
                State::Paused { .. } => Vec::new(),
                _ => bail!(
                    "deployment #{id} is {}: only a running one pauses",
                    state_line(&d.state)
                ),
            }
        } else if args.resume {
            match d.state {
                State::Paused { batch } => vec![Step::Record {
                    state: State::Running {
                        batch,
                        started_ms: now_ms(),
                    },
                }],
                State::Running { .. } => Vec::new(),
                _ => bail!(
                    "deployment #{id} is {}: only a paused one resumes",
                    state_line(&d.state)
                ),
            }
        } else if args.revert {
            if matches!(d.state, State::Reverted { .. }) {
                Vec::new()
            } else {
                deploy::revert(d, &format!("asked by {}", crate::audit::local_user()))
            }
        } else {
            Vec::new()
        };
        let nothing_to_record = steps.is_empty();
        if nothing_to_record || store.carry_out_deployment(&row, steps).await?.is_some() {
            return show(store, read(store.deployment(id).await?)?).await;
        }
    }
    bail!("deployment #{id} kept changing while it was being written; ask again")
}

async fn show(store: &Store, row: DeploymentRow) -> anyhow::Result<Shown> {
    let d = &row.deployment;
    let assignments = store.assignments().await?;
    let mut nodes = Vec::new();
    for (batch, members) in d.spec.batches().iter().enumerate() {
        for node in members {
            let pinned = assignments
                .iter()
                .find(|a| a.node == *node && a.module == d.spec.module)
                .and_then(|a| a.version.clone());
            let report = store.latest_report(node).await?;
            let o = report
                .as_ref()
                .and_then(|r| r.report.outcomes.iter().find(|o| o.module == d.spec.module));
            let reason = o.and_then(|o| match (&o.state, &o.health) {
                (mesh_store::ModuleState::Failed { reason }, _) => Some(reason.clone()),
                (_, Some(mesh_core::report::ModuleHealth::Unhealthy { reason })) => {
                    Some(reason.clone())
                }
                _ => None,
            });
            nodes.push(NodeRow {
                node: node.to_string(),
                batch,
                pinned,
                running: o.and_then(|o| o.pinned.clone()),
                health: o.and_then(|o| o.health.as_ref().map(|h| h.as_str().to_string())),
                reason,
            });
        }
    }
    Ok(Shown {
        id: row.id,
        deployment: row.deployment,
        nodes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_a_number_or_a_percentage() {
        assert_eq!(parse_batch("2"), Ok(BatchSize::Nodes(2)));
        assert_eq!(parse_batch("25%"), Ok(BatchSize::Percent(25)));
        for bad in ["", "%", "two", "-1", "2.5", "300%", "1e3"] {
            assert!(parse_batch(bad).unwrap_err().contains("`25%`"), "{bad}");
        }
    }

    #[test]
    fn the_batches_read_in_order_with_the_canary_first() {
        let n = |s: &str| Name::new(s).unwrap();
        let spec = Spec {
            module: n("web"),
            version: "v2".into(),
            nodes: ["n1", "n2", "n3", "n4", "n5"].map(n).to_vec(),
            canary: 1,
            batch: BatchSize::Nodes(2),
            healthy_for_ms: 3000,
            deadline_ms: 60_000,
            auto_revert: true,
        };
        assert_eq!(batches_line(&spec), "canary [n1], then [n2 n3], [n4 n5]");
        let spec = Spec { canary: 0, ..spec };
        assert_eq!(batches_line(&spec), "[n1 n2], [n3 n4], [n5]");
    }
}

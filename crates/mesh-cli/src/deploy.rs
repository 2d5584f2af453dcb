//! `mesh deploy`, `mesh deployments`, `mesh deployment ID`: a module's pin
//! moved to a version over its nodes, a canary first, then batches, each
//! waiting for its nodes to stay healthy (DESIGN "health and deploys").
//! This records the deployment (refusing what could never finish); the
//! active controller carries it out, step by step, and reverts it by
//! itself when a node fails. Pause, resume and revert are written over the
//! state they were read as, so the controller's next step never undoes
//! them.

use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Args;
use mesh_core::deploy::{BatchSize, Deployment, Spec, State};
use mesh_core::duration::{parse_span, show_span};
use mesh_core::names::Name;
use mesh_core::operation::Operation;
use mesh_core::operation::wire::{
    DeployArgs as DeployRequest, DeploymentChange, DeploymentChangeArgs,
    DeploymentsArgs as DeploymentsRequest, Reply,
};
use mesh_state::deployments::{self, Listed, Shown};
use mesh_state::operations::OperationError;
use mesh_store::Store;
use serde::Serialize;

use crate::authority::{open_existing_store, open_store_to_write};
use crate::output::{self, ListFormat, print_json};
use crate::state::MeshArgs;

/// What a deployment moves, and in which batches: `mesh deploy`'s and
/// `mesh plan deploy`'s.
#[derive(Debug, Args)]
pub struct DeployTarget {
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
}

impl DeployTarget {
    /// The module and the nodes named, checked.
    pub fn names(&self) -> anyhow::Result<(Name, Vec<Name>)> {
        let module = name("module", &self.module)?;
        let nodes = self
            .nodes
            .iter()
            .map(|n| name("node", n))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok((module, nodes))
    }
}

#[derive(Debug, Args)]
pub struct DeployArgs {
    #[command(flatten)]
    pub target: DeployTarget,
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

/// Where deployments are made and read: the store on the controller's
/// machine (the change audited as the local user), or the active
/// controller asked as the current context's person.
enum Records {
    Local(Store),
    Remote(Box<crate::remote::Asker>),
}

impl Records {
    async fn open(mesh: &MeshArgs, write: bool) -> anyhow::Result<Records> {
        if let Some(ctx) = mesh.remote()? {
            return Ok(Records::Remote(Box::new(
                crate::remote::Asker::connect(ctx).await?,
            )));
        }
        let url = mesh.store_url()?;
        Ok(Records::Local(if write {
            open_store_to_write(&url).await?
        } else {
            open_existing_store(&url).await?
        }))
    }

    async fn close(self) {
        if let Records::Local(store) = self {
            store.close().await;
        }
    }

    /// A remote answer's data, or its refusal as the error.
    async fn ask<T: serde::de::DeserializeOwned>(
        asker: &crate::remote::Asker,
        op: Operation,
        args: impl Serialize,
    ) -> anyhow::Result<T> {
        match asker.ask(op, serde_json::to_value(args)?).await? {
            Reply::Done { data, .. } => serde_json::from_value(data)
                .with_context(|| format!("the controller's answer to `{op}` does not read")),
            Reply::Refused { reason } => bail!("refused: {reason}"),
        }
    }

    async fn deploy(&self, spec: Spec) -> anyhow::Result<(i64, Deployment)> {
        match self {
            Records::Local(store) => {
                let args = serde_json::to_value(DeployRequest { spec: spec.clone() })?;
                let made = deployments::deploy(store, spec).await.map_err(refusal)?;
                crate::audit::record_local(store, Operation::Deploy, args).await?;
                Ok(made)
            }
            Records::Remote(asker) => {
                let made: Made =
                    Self::ask(asker, Operation::Deploy, DeployRequest { spec }).await?;
                Ok((made.id, made.deployment))
            }
        }
    }

    async fn change(&self, id: i64, change: DeploymentChange) -> anyhow::Result<Shown> {
        match self {
            Records::Local(store) => {
                let who = crate::audit::local_user();
                let shown = deployments::change(store, id, change, &who)
                    .await
                    .map_err(refusal)?;
                let args = serde_json::to_value(DeploymentChangeArgs { id, change })?;
                crate::audit::record_local(store, Operation::DeploymentChange, args).await?;
                Ok(shown)
            }
            Records::Remote(asker) => {
                Self::ask(
                    asker,
                    Operation::DeploymentChange,
                    DeploymentChangeArgs { id, change },
                )
                .await
            }
        }
    }

    async fn shown(&self, id: i64) -> anyhow::Result<Shown> {
        match self {
            Records::Local(store) => deployments::shown(store, id).await.map_err(refusal),
            Records::Remote(asker) => {
                let args = DeploymentsRequest {
                    id: Some(id),
                    ..Default::default()
                };
                Self::ask(asker, Operation::Deployments, args).await
            }
        }
    }

    async fn listed(&self, module: Option<Name>, limit: u32) -> anyhow::Result<Vec<Listed>> {
        match self {
            Records::Local(store) => deployments::listed(store, module.as_ref(), limit)
                .await
                .map_err(refusal),
            Records::Remote(asker) => {
                let args = DeploymentsRequest {
                    id: None,
                    module,
                    limit: Some(limit),
                };
                Self::ask(asker, Operation::Deployments, args).await
            }
        }
    }
}

/// A refused operation as the command's error: its words alone.
fn refusal(e: OperationError) -> anyhow::Error {
    match e {
        OperationError::Refused(why) => anyhow::anyhow!(why),
        e => anyhow::Error::new(e),
    }
}

/// What `deploy` answers with.
#[derive(Debug, Serialize, serde::Deserialize)]
pub struct Made {
    pub id: i64,
    pub deployment: Deployment,
}

pub fn run_deploy(args: &DeployArgs) -> anyhow::Result<ExitCode> {
    let (module, nodes) = args.target.names()?;
    let spec = Spec {
        module,
        version: args.target.version.clone(),
        nodes,
        canary: args.target.canary,
        batch: args.target.batch,
        healthy_for_ms: args.healthy_for,
        deadline_ms: args.deadline,
        auto_revert: !args.no_auto_revert,
    };
    crate::block_on(async {
        let records = Records::open(&args.mesh, true).await?;
        let made = records.deploy(spec).await;
        let (id, d) = match made {
            Ok(made) => made,
            Err(e) => {
                records.close().await;
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
            records.close().await;
            return Ok(ExitCode::SUCCESS);
        }
        let ended = follow(&records, id, args.timeout, text).await;
        records.close().await;
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
async fn follow(records: &Records, id: i64, within: u64, text: bool) -> anyhow::Result<Deployment> {
    let until = std::time::Instant::now() + std::time::Duration::from_millis(within);
    let mut said: Option<State> = None;
    loop {
        let d = records.shown(id).await?.deployment;
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
                    other => format!("deployment #{id} {other}"),
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
                d.state,
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

pub fn run_deployments(args: &DeploymentsArgs) -> anyhow::Result<ExitCode> {
    let module = args
        .module
        .as_deref()
        .map(|m| name("module", m))
        .transpose()?;
    crate::block_on(async {
        let records = Records::open(&args.mesh, false).await?;
        let rows = records.listed(module, args.limit).await;
        records.close().await;
        let rows = rows?;
        match args.output {
            ListFormat::Json => print_json(&rows)?,
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
                        r.deployment.state
                    ))?;
                }
                out.flush()?;
            }
        }
        Ok(ExitCode::SUCCESS)
    })?
}

pub fn run_deployment(args: &DeploymentArgs) -> anyhow::Result<ExitCode> {
    let change = if args.pause {
        Some(DeploymentChange::Pause)
    } else if args.resume {
        Some(DeploymentChange::Resume)
    } else if args.revert {
        Some(DeploymentChange::Revert)
    } else {
        None
    };
    crate::block_on(async {
        let records = Records::open(&args.mesh, change.is_some()).await?;
        let shown = match change {
            Some(c) => records.change(args.id, c).await,
            None => records.shown(args.id).await,
        };
        records.close().await;
        let shown = shown?;
        match args.output {
            ListFormat::Json => print_json(&shown)?,
            ListFormat::Text => {
                let d = &shown.deployment;
                let mut out = output::Stdout::lock();
                out.line(format_args!(
                    "deployment #{} of {} to {}: {}",
                    shown.id, d.spec.module, d.spec.version, d.state
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

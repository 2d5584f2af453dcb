//! `mesh logs MODULE [--node N] [--lines N] [--follow]`: a module's log on
//! any node, read over the bus from that node's host (its logs tool,
//! `mesh.host.<node>.tool.logs`), as the controller — whose key the
//! administrator holds, and whose derived authority includes every host's
//! logs tool. Nothing is read from the node's disk but by its host.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use async_nats::Client;
use clap::Args;
use mesh_bus::seam::{Bus, NatsSide};
use mesh_controller::Genesis;
use mesh_core::authority::CONTROLLER;
use mesh_core::diagnostic::{escape_controls, suggest};
use mesh_core::logs::{DEFAULT_LINES, LogsAnswer, LogsRequest, MAX_LINES};
use mesh_core::names::Name;
use mesh_core::operation::Operation;
use mesh_core::operation::wire::{self, LogsReply, Reply};
use mesh_core::records::Assignment;
use mesh_core::subjects;
use mesh_sdk::{Denied, SdkError, ServerErrors, ToolAddress};

use crate::authority::open_existing_store;
use crate::output;
use crate::state::MeshArgs;

/// How long a host has to answer one request.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);
/// How often `--follow` asks for what is new.
const POLL_EVERY: Duration = Duration::from_millis(500);

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The module whose log to print.
    pub module: String,
    /// The node it runs on; needed only when it runs on more than one.
    #[arg(long)]
    pub node: Option<String>,
    /// How many of the newest lines.
    #[arg(long, default_value_t = DEFAULT_LINES)]
    pub lines: usize,
    /// Then keep printing lines as the module writes them, until Ctrl-C.
    #[arg(long, short)]
    pub follow: bool,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

pub fn run(args: &LogsArgs) -> anyhow::Result<ExitCode> {
    let module = Name::new(&args.module)
        .with_context(|| format!("{:?} is not a module name", args.module))?;
    if args.lines > MAX_LINES {
        bail!(
            "--lines {}: at most {MAX_LINES} lines are sent at once; use --follow to read on",
            args.lines
        );
    }
    let explicit = args
        .node
        .as_deref()
        .map(|n| Name::new(n).with_context(|| format!("{n:?} is not a node name")))
        .transpose()?;
    let remote = args.mesh.remote()?;
    crate::block_on(async {
        let host = match remote {
            // From a person's machine: the controller asks the host.
            Some(ctx) => Host {
                via: Via::Controller(crate::remote::Asker::connect(ctx).await?),
                node: explicit,
            },
            None => {
                let genesis = Genesis::open(&args.mesh.dir()?)?;
                let node = match explicit {
                    Some(n) => n,
                    None => node_of(&args.mesh, &module).await?,
                };
                let (client, errors) = ServerErrors::connect(
                    &crate::bus::controller_bus(&genesis, &args.mesh.store_url()?).await?,
                )
                .await
                .context("connecting as the controller")?;
                Host {
                    via: Via::Direct {
                        client,
                        errors,
                        address: ToolAddress {
                            written: format!("logs of module {module} on node {node}"),
                            subject: subjects::host_logs(&node),
                        },
                    },
                    node: Some(node),
                }
            }
        };
        let first = host
            .ask(&LogsRequest {
                module: module.clone(),
                lines: Some(args.lines),
                from: None,
                file: None,
            })
            .await?;
        if first.cut {
            output::note(format_args!(
                "mesh logs: fewer than {} lines: the rest is more than one answer carries",
                args.lines
            ));
        }
        print(&first.lines)?;
        // No log file at all: the host never started it (an empty answer
        // would read as a module that is quiet).
        if first.file.is_empty() && first.lines.is_empty() {
            let node = host.node_named();
            output::note(format_args!(
                "mesh logs: {module} on {node} has no log: it has never started there (`mesh reports {node}` says why)"
            ));
            if !args.follow {
                return anyhow::Ok(ExitCode::FAILURE);
            }
        }
        if args.follow {
            follow(&host, module, first).await?;
        }
        anyhow::Ok(ExitCode::SUCCESS)
    })?
}

/// The one node `module` is assigned to, from the store's assignments.
async fn node_of(mesh: &MeshArgs, module: &Name) -> anyhow::Result<Name> {
    let store = open_existing_store(&mesh.store_url()?).await?;
    let read = store.assignments().await;
    store.close().await;
    let assignments: Vec<Assignment> = read
        .context("reading the assignments")?
        .into_iter()
        .map(|a| Assignment::new(a.node, a.module))
        .collect();
    pick_node(module, &assignments)
}

fn pick_node(module: &Name, assignments: &[Assignment]) -> anyhow::Result<Name> {
    let mut nodes: Vec<&Name> = assignments
        .iter()
        .filter(|a| a.module == *module)
        .map(|a| &a.node)
        .collect();
    nodes.sort();
    match nodes.as_slice() {
        [one] => Ok((*one).clone()),
        [] => {
            let meant = suggest(
                module.as_str(),
                assignments.iter().map(|a| a.module.as_str()),
            )
            .and_then(|m| assignments.iter().find(|a| a.module.as_str() == m))
            .map(|a| format!("; did you mean {} (on {})?", a.module, a.node))
            .unwrap_or_default();
            Err(anyhow!(
                "module {module} is assigned to no node{meant} (`mesh modules` lists what runs where; `mesh assign {module} NODE` runs it on NODE; --node NODE reads a node's log anyway)"
            ))
        }
        more => {
            let names: Vec<&str> = more.iter().map(|n| n.as_str()).collect();
            Err(anyhow!(
                "module {module} runs on {} nodes ({}); say which with --node (e.g. --node {})",
                names.len(),
                names.join(", "),
                names[0]
            ))
        }
    }
}

struct Host {
    via: Via,
    /// None: the controller picks the module's one node.
    node: Option<Name>,
}

/// Who asks the host: this command as the controller (on its machine), or
/// the controller for a person.
enum Via {
    Direct {
        client: Client,
        errors: ServerErrors,
        address: ToolAddress,
    },
    Controller(crate::remote::Asker),
}

/// Why a request got no answer.
enum Unanswered {
    /// Nobody answered (the host is down, or not connected).
    Silent,
    /// Anything else: the host's refusal, the broker's, a garbled answer.
    Failed(anyhow::Error),
}

impl Host {
    async fn ask(&self, request: &LogsRequest) -> anyhow::Result<LogsAnswer> {
        self.try_ask(request).await.map_err(|e| match e {
            Unanswered::Silent => self.silent(),
            Unanswered::Failed(e) => e,
        })
    }

    fn node_named(&self) -> String {
        self.node
            .as_ref()
            .map_or_else(|| "its node".to_string(), Name::to_string)
    }

    fn silent(&self) -> anyhow::Error {
        anyhow!(
            "no host answered for node {} within {}s; is it running? (mesh nodes)",
            self.node_named(),
            ANSWER_WITHIN.as_secs()
        )
    }

    async fn try_ask(&self, request: &LogsRequest) -> Result<LogsAnswer, Unanswered> {
        let (client, errors, address) = match &self.via {
            Via::Direct {
                client,
                errors,
                address,
            } => (client, errors, address),
            Via::Controller(asker) => return self.ask_controller(asker, request).await,
        };
        let payload = serde_json::to_value(request)
            .map_err(|e| Unanswered::Failed(anyhow!("writing the request: {e}")))?;
        let subject = &address.subject;
        let answer = mesh_sdk::call(
            &Bus::Nats(NatsSide::new(client.clone())),
            errors.refusal(Denied::Publish, subject),
            CONTROLLER,
            address,
            payload,
            ANSWER_WITHIN,
        )
        .await;
        let value = match answer {
            Ok(v) => v,
            Err(SdkError::NoServer { .. } | SdkError::CallTimeout { .. }) => {
                return Err(Unanswered::Silent);
            }
            Err(SdkError::ToolFailed { message, .. }) => {
                return Err(Unanswered::Failed(anyhow!(
                    "node {}: {message}",
                    self.node_named()
                )));
            }
            Err(SdkError::CallRefused { .. }) => {
                return Err(Unanswered::Failed(anyhow!(
                    "the broker refused the controller a request on {subject}: the users file it serves predates `mesh logs`; run this version's `mesh controller` so it composes the file again"
                )));
            }
            Err(e) => return Err(Unanswered::Failed(e.into())),
        };
        serde_json::from_value(value).map_err(|e| {
            Unanswered::Failed(anyhow!(
                "node {}'s host answered something that is not a logs answer: {e}",
                self.node_named()
            ))
        })
    }

    async fn ask_controller(
        &self,
        asker: &crate::remote::Asker,
        request: &LogsRequest,
    ) -> Result<LogsAnswer, Unanswered> {
        let args = wire::LogsArgs {
            node: self.node.clone(),
            request: request.clone(),
        };
        let args = serde_json::to_value(args)
            .map_err(|e| Unanswered::Failed(anyhow!("writing the request: {e}")))?;
        match asker.ask(Operation::Logs, args).await {
            Ok(Reply::Done { data, .. }) => match serde_json::from_value(data) {
                Ok(LogsReply::Answer(a)) => Ok(a),
                Ok(LogsReply::Silent { .. }) => Err(Unanswered::Silent),
                Err(e) => Err(Unanswered::Failed(anyhow!(
                    "the controller's answer to `logs` does not read: {e}"
                ))),
            },
            Ok(Reply::Refused { reason }) => Err(Unanswered::Failed(anyhow!("refused: {reason}"))),
            Err(e) => Err(Unanswered::Failed(e)),
        }
    }
}

/// Asks for what follows the last answer's cursor, every [`POLL_EVERY`]
/// (at once while the host says more is waiting), until interrupted. A host
/// that stops answering is said once and asked again; one that refuses
/// (the module was unassigned) ends it.
async fn follow(host: &Host, module: Name, mut last: LogsAnswer) -> anyhow::Result<()> {
    let (mut silent, mut in_rotated) = (false, false);
    loop {
        if !last.more {
            tokio::time::sleep(POLL_EVERY).await;
        }
        let request = LogsRequest {
            module: module.clone(),
            lines: None,
            from: Some(last.next),
            file: Some(last.file.clone()).filter(|f| !f.is_empty()),
        };
        let answer = match host.try_ask(&request).await {
            Ok(a) => a,
            Err(Unanswered::Silent) => {
                if !silent {
                    output::note(format_args!("mesh logs: {}; still asking", host.silent()));
                    silent = true;
                }
                last.more = false;
                continue;
            }
            Err(Unanswered::Failed(e)) => return Err(e),
        };
        if silent {
            output::note(format_args!(
                "mesh logs: node {} answers again",
                host.node_named()
            ));
            silent = false;
        }
        if answer.dropped {
            output::note(format_args!(
                "mesh logs: the log was rotated more than once since the last read; what lay between was dropped by rotation, nothing else is missing"
            ));
        } else if answer.rotated && !in_rotated {
            output::note(format_args!(
                "mesh logs: the log was rotated; reading on into the new file, nothing missed"
            ));
        }
        in_rotated = answer.rotated;
        print(&answer.lines)?;
        last = answer;
    }
}

/// The lines, control characters escaped: a log is the module's bytes,
/// and a terminal must not take them for commands.
fn print(lines: &[String]) -> anyhow::Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let mut out = output::Stdout::lock();
    for line in lines {
        out.line(escape_controls(line))?;
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(node: &str, module: &str) -> Assignment {
        Assignment::new(Name::new(node).unwrap(), Name::new(module).unwrap())
    }

    #[test]
    fn the_node_is_the_only_one_running_the_module_or_must_be_named() {
        let echo = Name::new("echo").unwrap();
        let all = [a("n2", "echo"), a("n1", "ticker"), a("n3", "nftables")];
        assert_eq!(pick_node(&echo, &all).unwrap().as_str(), "n2");
        let two = [a("n2", "echo"), a("n1", "echo")];
        let e = pick_node(&echo, &two).unwrap_err().to_string();
        assert!(
            e.contains("runs on 2 nodes (n1, n2)") && e.contains("--node n1"),
            "{e}"
        );
        let e = pick_node(&Name::new("ecko").unwrap(), &all)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("assigned to no node; did you mean echo (on n2)?"),
            "{e}"
        );
        assert!(e.contains("mesh assign ecko NODE"), "{e}");
    }
}

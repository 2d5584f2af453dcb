//! The operations that read: the same views the CLI prints on the
//! controller's machine, a module's log from its node's host, and the
//! events `EVENTS` stores — read by the controller, whose authority covers
//! them, for a person whose role allows the read.

use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
use futures::StreamExt as _;
use mesh_core::names::Name;
use mesh_core::operation::Operation;
use mesh_core::operation::wire::{
    AuditArgs, EventsAnswer, EventsArgs, LogsArgs, LogsReply, Reply, Request, StatusData,
    StoredEvent,
};
use mesh_core::tool::ToolReply;
use mesh_state::deployments;
use mesh_state::operations::OperationError;
use mesh_state::views::ControllerView;

use super::{args, not_served, read, refused};
use crate::daemon::{Ctx, error_chain};

/// How long a node's host has to answer for its log.
const HOST_ANSWERS_WITHIN: Duration = Duration::from_secs(5);
/// The most events one answer carries.
const MOST_EVENTS: usize = 256;

pub(super) async fn carry_out(ctx: &Ctx, op: Operation, request: &Request) -> Reply {
    let store = &ctx.store;
    let now = u64::try_from(mesh_store::now_ms()).unwrap_or(0);
    match op {
        Operation::Status => {
            // It answers, so it is this mesh's active controller and
            // connected: what a status asked over the bus can say of it.
            let controller = ControllerView {
                reachable: true,
                controller_key: crate::Genesis::open(&ctx.opts.dir)
                    .ok()
                    .map(|g| g.controller_nkey),
                ready: true,
                broker_connected: Some(true),
                role: Some("active".into()),
                ..ControllerView::default()
            };
            match mesh_state::views::status(store, now, controller).await {
                Ok(status) => read(StatusData {
                    status,
                    xkey: ctx.xkey_public.clone(),
                }),
                Err(e) => refused(e),
            }
        }
        Operation::Nodes => match mesh_state::views::nodes(store, now).await {
            Ok(rows) => read(rows),
            Err(e) => refused(e),
        },
        Operation::Modules => match mesh_state::views::modules(store).await {
            Ok(rows) => read(rows),
            Err(e) => refused(e),
        },
        Operation::Deployments => {
            let a: mesh_core::operation::wire::DeploymentsArgs = args!(op, request);
            let answer = match a.id {
                Some(id) => deployments::shown(store, id).await.map(read),
                None => deployments::listed(store, a.module.as_ref(), a.limit.unwrap_or(20))
                    .await
                    .map(read),
            };
            match answer {
                Ok(reply) => reply,
                Err(OperationError::Refused(reason)) => Reply::Refused { reason },
                Err(e) => refused(e),
            }
        }
        Operation::Audit => {
            let a: AuditArgs = args!(op, request);
            let filter = mesh_store::AuditFilter {
                since: a.since,
                who: a
                    .person
                    .map(|p| mesh_store::Actor::Person(p.to_string()).written()),
                limit: a.limit,
            };
            match store.audit(&filter).await {
                Ok(rows) => read(rows),
                Err(e) => refused(e),
            }
        }
        Operation::Logs => {
            let a: LogsArgs = args!(op, request);
            logs(ctx, a).await
        }
        Operation::Plan => {
            let pending: mesh_core::change::Pending = args!(op, request);
            match mesh_state::plan::compute(&pending, store).await {
                Ok(plan) => read(serde_json::json!({
                    "text": mesh_state::plan::render(&plan),
                    "plan": plan,
                })),
                Err(mesh_state::plan::PlanError::Refused(reason)) => Reply::Refused { reason },
                Err(e) => refused(e),
            }
        }
        Operation::Events => {
            let a: EventsArgs = args!(op, request);
            match events(ctx, &a).await {
                Ok(answer) => read(answer),
                Err(reason) => Reply::Refused { reason },
            }
        }
        other => not_served(other),
    }
}

/// The node `module` runs on: the one given, else its one assignment.
async fn node_of(ctx: &Ctx, module: &Name, given: Option<Name>) -> Result<Name, String> {
    if let Some(n) = given {
        return Ok(n);
    }
    let assignments = ctx.store.assignments().await.map_err(|e| error_chain(&e))?;
    let mut nodes: Vec<Name> = assignments
        .into_iter()
        .filter(|a| a.module == *module)
        .map(|a| a.node)
        .collect();
    nodes.sort();
    match nodes.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(format!(
            "module {module} is assigned to no node (`mesh modules` lists what runs where; --node NODE reads a node's log anyway)"
        )),
        more => Err(format!(
            "module {module} runs on {} nodes ({}); say which with --node",
            more.len(),
            more.iter().map(Name::as_str).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// Asks the node's host for the module's log (its logs tool).
async fn logs(ctx: &Ctx, a: LogsArgs) -> Reply {
    let node = match node_of(ctx, &a.request.module, a.node).await {
        Ok(n) => n,
        Err(reason) => return Reply::Refused { reason },
    };
    let body = serde_json::to_vec(&a.request).expect("a logs request serializes");
    let subject = mesh_core::subjects::host_logs(&node);
    let asked = ctx.bus.request(&subject, &body, HOST_ANSWERS_WITHIN);
    let payload = match asked.await {
        Err(
            mesh_bus::seam::SeamError::NoAnswer { .. }
            | mesh_bus::seam::SeamError::NoResponders { .. },
        ) => {
            return read(LogsReply::Silent { node });
        }
        Err(e) => return refused(e),
        Ok(p) => p,
    };
    match mesh_core::tool::parse_reply(&payload) {
        Ok(ToolReply::Ok(v)) => match serde_json::from_value(v) {
            Ok(answer) => read(LogsReply::Answer(answer)),
            Err(e) => Reply::Refused {
                reason: format!(
                    "node {node}'s host answered something that is not a logs answer: {e}"
                ),
            },
        },
        Ok(ToolReply::Error(message)) => Reply::Refused {
            reason: format!("node {node}: {message}"),
        },
        Err(e) => refused(e),
    }
}

/// The events stored after `a.after` (at most `a.max`), read through an
/// ephemeral consumer that acknowledges nothing: reading takes nothing
/// from any module.
async fn events(ctx: &Ctx, a: &EventsArgs) -> Result<EventsAnswer, String> {
    let js = ctx
        .js()
        .ok_or("reading stored events back is NATS's (a stream read from any point); on RabbitMQ `mesh events tail` follows them as they come")?;
    let mut stream = js
        .get_stream(mesh_core::subjects::STREAM_EVENTS)
        .await
        .map_err(|e| format!("finding EVENTS: {}", error_chain(&e)))?;
    let last = stream
        .info()
        .await
        .map_err(|e| format!("reading EVENTS: {}", error_chain(&e)))?
        .state
        .last_sequence;
    let Some(after) = a.after else {
        return Ok(EventsAnswer {
            events: Vec::new(),
            last,
        });
    };
    if after >= last {
        return Ok(EventsAnswer {
            events: Vec::new(),
            last: after,
        });
    }
    let filter = match &a.filter {
        None => String::new(),
        Some(f) => {
            let catalogue = mesh_state::registered::catalogue(&ctx.store)
                .await
                .map_err(|e| error_chain(&e))?;
            catalogue.event_filter(f)?
        }
    };
    // Who sent each is what the subject and the records bear out.
    let assigned: Vec<mesh_core::records::Assignment> = ctx
        .store
        .assignments()
        .await
        .map_err(|e| error_chain(&e))?
        .into_iter()
        .map(|a| mesh_core::records::Assignment::new(a.node, a.module))
        .collect();
    let consumer = stream
        .create_consumer(pull::Config {
            filter_subject: filter,
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: after + 1,
            },
            ack_policy: AckPolicy::None,
            inactive_threshold: Duration::from_secs(5),
            ..Default::default()
        })
        .await
        .map_err(|e| format!("reading EVENTS: {}", error_chain(&e)))?;
    let mut batch = consumer
        .fetch()
        .max_messages(a.max.clamp(1, MOST_EVENTS))
        .expires(Duration::from_millis(200))
        .messages()
        .await
        .map_err(|e| format!("reading EVENTS: {}", error_chain(&e)))?;
    // Nothing matching the filter past `after`: the next asks from the
    // stream's end.
    let mut answer = EventsAnswer {
        events: Vec::new(),
        last,
    };
    while let Some(m) = batch.next().await {
        let m = m.map_err(|e| format!("reading EVENTS: {}", e))?;
        let info = m.info().ok();
        let who = mesh_core::event::parse(&m.payload)
            .ok()
            .map(|e| mesh_core::event::sender::sender(&m.subject, &e, &assigned));
        answer.events.push(StoredEvent {
            sequence: info.as_ref().map_or(0, |i| i.stream_sequence),
            subject: m.subject.to_string(),
            payload: String::from_utf8_lossy(&m.payload).into_owned(),
            stored: info.and_then(|i| u64::try_from(i.published.unix_timestamp()).ok()),
            doubt: who.as_ref().and_then(|w| w.doubt.clone()),
            who: who.map(|w| w.to_string()),
        });
    }
    // A full batch may have left some: the next starts after its last.
    // Otherwise every match up to the stream's end was read (and any
    // stored since, if the batch reached them).
    let delivered = answer.events.last().map_or(0, |e| e.sequence);
    answer.last = if answer.events.len() == a.max.clamp(1, MOST_EVENTS) {
        delivered
    } else {
        last.max(delivered)
    };
    Ok(answer)
}

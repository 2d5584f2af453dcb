//! The JetStream objects a mesh needs (DESIGN §4), as data: the controller
//! asserts them (create or verify) on every start, streams before consumers.
//! Names and subjects come from [`crate::subjects`], the generator the grants
//! use, so a consumer's ack subject is exactly the one its owner is granted.

pub mod artifact_store;
mod plan;
pub mod renamed;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::catalogue::{Catalogue, SeatEntry};
use crate::manifest::{Manifest, Scope};
use crate::names::Name;
use crate::records::{ControllerSpec, Records};
use crate::subjects::{self, STREAM_CONTROL, STREAM_EVENTS, STREAM_NODES, consumer, pattern};

pub use plan::{ObjectStep, Observed, ObservedConsumer, ObservedStream, PlanError, plan};

/// How long a host has to apply a declaration before it is redelivered:
/// applying can mean minutes of downloads.
pub const NODE_ACK_WAIT_SECS: u64 = 5 * 60;
/// Ack wait of the other consumers.
pub const DEFAULT_ACK_WAIT_SECS: u64 = 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Retention {
    /// A log: a consumer created later still reads what was published before.
    Limits,
    /// A message leaves once acknowledged.
    WorkQueue,
}

/// How long an upload's chunks wait in `UPLOADS` for the controller.
pub const UPLOAD_LIFE_SECS: u64 = 3600;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamSpec {
    pub name: String,
    pub subjects: Vec<String>,
    pub retention: Retention,
    /// `None`: no per-subject limit.
    pub max_msgs_per_subject: Option<i64>,
    /// Messages older are removed; `None`: kept until their retention
    /// ends them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age_secs: Option<u64>,
    /// Copies kept by a clustered bus (the genesis's `--replicas`); 1 on
    /// a single server.
    #[serde(skip_serializing_if = "is_one")]
    pub replicas: usize,
}

fn is_one(n: &usize) -> bool {
    *n == 1
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConsumerSpec {
    pub stream: String,
    /// The durable name; contains no `.` (it is a token of the ack subject).
    pub name: String,
    /// Push delivery subject (`mesh.deliver.<name>`).
    pub deliver_subject: String,
    /// Queue group of the subscribers sharing the deliveries.
    pub deliver_group: Option<String>,
    /// Several filters are `filter_subjects` (server ≥ 2.10).
    pub filter_subjects: Vec<String>,
    pub ack_wait_secs: u64,
    /// `None`: redeliver for as long as it takes (no dead-lettering).
    pub max_deliver: Option<i64>,
}

impl ConsumerSpec {
    /// A consumer `name` of `stream` pushing to its own deliver subject, with
    /// no group and no filter, the default ack wait, and no max-deliver.
    fn new(stream: &str, name: &str) -> ConsumerSpec {
        ConsumerSpec {
            stream: stream.into(),
            name: name.into(),
            deliver_subject: subjects::deliver(name),
            deliver_group: None,
            filter_subjects: Vec::new(),
            ack_wait_secs: DEFAULT_ACK_WAIT_SECS,
            max_deliver: None,
        }
    }

    /// Consumer `name` of `stream` as its owner knows it, to bind it: the
    /// controller made it with its filters and group, which binding takes
    /// from the bus's copy, not from here.
    pub fn to_bind(stream: &str, name: &str) -> ConsumerSpec {
        ConsumerSpec::new(stream, name)
    }

    /// The subject its owner must be granted to acknowledge a delivery.
    pub fn ack_subject(&self) -> String {
        subjects::js_ack(&self.stream, &self.name)
    }

    /// The subject its owner must be granted to bind to it (the client asks
    /// for its info).
    pub fn info_subject(&self) -> String {
        subjects::js_consumer_info(&self.stream, &self.name)
    }
}

/// The controller's consumer on CONTROL: reports and enrolments, every
/// subject of the stream.
pub fn controller_control() -> ConsumerSpec {
    ConsumerSpec::new(STREAM_CONTROL, consumer::CONTROLLER_CONTROL)
}

/// The controller's consumer on EVENTS (as bound: its filters are the
/// derivation's, from the events it follows).
pub fn controller_events() -> ConsumerSpec {
    ConsumerSpec::new(subjects::STREAM_EVENTS, consumer::CONTROLLER_EVENTS)
}

/// A node's consumer on NODES: what its host binds, created by the
/// controller (at enrolment and on every start).
pub fn node_consumer(node: &Name) -> ConsumerSpec {
    // Named after the node: the host's ack grant is $JS.ACK.NODES.<node>.>,
    // and a consumer named otherwise is one it cannot acknowledge.
    ConsumerSpec {
        filter_subjects: vec![subjects::node_declaration(node)],
        ack_wait_secs: NODE_ACK_WAIT_SECS,
        ..ConsumerSpec::new(STREAM_NODES, &consumer::node(node))
    }
}

/// The worker consumer on a seat's work-queue stream; `None` for a seat that
/// accepts no work, which has neither stream nor worker.
pub fn seat_worker(entry: &SeatEntry) -> Option<ConsumerSpec> {
    // A node-scoped seat has a worker per holding node instead.
    if entry.decl.accepts.is_empty() || entry.decl.scope.value == Scope::Node {
        return None;
    }
    let seat = &entry.decl.name.value;
    let name = consumer::seat_worker(seat);
    Some(ConsumerSpec {
        // A queue group although a seat has one holder: the seat is
        // authority, the group is delivery; tied together, two holders would
        // each process every message with nothing reporting it.
        deliver_group: Some(name.clone()),
        ..ConsumerSpec::new(&subjects::seat_stream(seat), &name)
    })
}

/// The worker consumer of `node`'s holder of a node-scoped seat, filtered on
/// that node's token alone: work meant for one node's holder can never be
/// taken by another's. `None` for a mesh-scoped seat or one that accepts
/// no work.
pub fn seat_node_worker(entry: &SeatEntry, node: &Name) -> Option<ConsumerSpec> {
    if entry.decl.accepts.is_empty() || entry.decl.scope.value != Scope::Node {
        return None;
    }
    let seat = &entry.decl.name.value;
    let name = consumer::seat_node_worker(seat, node);
    Some(ConsumerSpec {
        // A group for the same reason as a mesh seat's worker.
        deliver_group: Some(name.clone()),
        filter_subjects: vec![subjects::seat_node_work_all(seat, node)],
        ..ConsumerSpec::new(&subjects::seat_stream(seat), &name)
    })
}

/// The work subjects a seat's stream holds: one per kind it accepts, with a
/// node token for a node-scoped seat.
fn seat_stream_subjects(entry: &SeatEntry) -> Vec<String> {
    let seat = &entry.decl.name.value;
    let kinds: BTreeSet<&Name> = entry.decl.accepts.iter().map(|k| &k.value).collect();
    kinds
        .into_iter()
        .map(|k| match entry.decl.scope.value {
            Scope::Mesh => subjects::seat_work(seat, k),
            Scope::Node => subjects::seat_any_node_work(seat, k),
        })
        .collect()
}

/// A module's consumer on EVENTS; `None` for a module that consumes nothing.
/// One consumer per module carrying every filter: its ack permission is
/// derived from its name, and instances share it through the group.
pub fn module_consumer(catalogue: &Catalogue, m: &Manifest) -> Option<ConsumerSpec> {
    let consumes = catalogue.consumes(m);
    if consumes.is_empty() {
        return None;
    }
    let name = consumer::module(&m.name.value);
    Some(ConsumerSpec {
        deliver_group: Some(name.clone()),
        filter_subjects: sorted(consumes.into_iter().map(|c| c.subject)),
        ..ConsumerSpec::new(STREAM_EVENTS, &name)
    })
}

/// Everything to assert, streams first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Objects {
    pub streams: Vec<StreamSpec>,
    pub consumers: Vec<ConsumerSpec>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectsError {
    #[error(
        "streams {first} and {second} overlap ({first_subject} and {second_subject} can match one subject); the server refuses the second, so give them disjoint subjects"
    )]
    Overlap {
        first: String,
        first_subject: String,
        second: String,
        second_subject: String,
    },
    #[error(
        "consumer {consumer} names stream {stream}, which is not among the streams; assert the stream first"
    )]
    MissingStream { consumer: String, stream: String },
    #[error(
        "consumer name {0:?} is not one the server accepts (no '.', '*', '>', whitespace or path separators)"
    )]
    BadConsumerName(String),
}

/// The mesh's own streams, the controller's consumers, a consumer per node,
/// per consuming assigned module and per seat worker, and a work-queue stream
/// per seat that accepts work — created at registration, not assignment, so
/// work waits for a holder instead of being lost.
pub fn derive(
    catalogue: &Catalogue,
    records: &Records,
    controller: &ControllerSpec,
) -> Result<Objects, ObjectsError> {
    let mut o = Objects::default();
    o.streams.push(StreamSpec {
        name: STREAM_CONTROL.into(),
        // Named, never `mesh.control.>`: heartbeats live there and would
        // compete for retention with the messages that matter.
        subjects: vec![
            subjects::ALL_REPORTS.into(),
            subjects::ALL_ENROLMENTS.into(),
        ],
        retention: Retention::WorkQueue,
        max_msgs_per_subject: None,
        max_age_secs: None,
        replicas: controller.replicas,
    });
    o.streams.push(StreamSpec {
        name: STREAM_EVENTS.into(),
        // Selects on the `event` token: a module's whole namespace would
        // persist every tool call.
        subjects: vec![
            subjects::ALL_MODULE_EVENTS.into(),
            subjects::ALL_SEAT_EVENTS.into(),
            subjects::ALL_SEAT_NODE_EVENTS.into(),
        ],
        retention: Retention::Limits,
        max_msgs_per_subject: None,
        max_age_secs: None,
        replicas: controller.replicas,
    });
    o.streams.push(StreamSpec {
        name: subjects::STREAM_UPLOADS.into(),
        // An upload lives until the controller has put it in the artifact
        // store (then purged); one abandoned midway goes within the hour.
        subjects: vec![subjects::ALL_UPLOADS.into()],
        retention: Retention::Limits,
        max_msgs_per_subject: None,
        max_age_secs: Some(UPLOAD_LIFE_SECS),
        replicas: controller.replicas,
    });
    o.streams.push(StreamSpec {
        name: STREAM_NODES.into(),
        subjects: vec![subjects::ALL_DECLARATIONS.into()],
        retention: Retention::Limits,
        // Only the newest declaration matters.
        max_msgs_per_subject: Some(1),
        max_age_secs: None,
        replicas: controller.replicas,
    });
    for entry in catalogue.seats() {
        if entry.decl.accepts.is_empty() {
            continue;
        }
        o.streams.push(StreamSpec {
            name: subjects::seat_stream(&entry.decl.name.value),
            subjects: seat_stream_subjects(entry),
            retention: Retention::WorkQueue,
            max_msgs_per_subject: None,
            max_age_secs: None,
            replicas: controller.replicas,
        });
        o.consumers.extend(seat_worker(entry));
    }

    // No max-deliver: the store window's bound is the controller's; a server
    // that dead-lettered first would drop what CONTROL protects.
    o.consumers.push(controller_control());
    if !controller.follows.is_empty() {
        o.consumers.push(ConsumerSpec {
            filter_subjects: sorted(controller.follows.iter().map(|e| e.subject())),
            ..ConsumerSpec::new(STREAM_EVENTS, consumer::CONTROLLER_EVENTS)
        });
    }

    let mut nodes: Vec<&Name> = records.nodes.iter().collect();
    nodes.sort();
    nodes.dedup();
    for node in nodes {
        o.consumers.push(node_consumer(node));
    }

    // A node-scoped seat's worker for each node its holder is assigned to:
    // work for a node with no holder yet waits in the stream.
    // Keyed by name: the same objects in the same order whatever order the
    // assignments were read in.
    let mut node_workers: BTreeMap<String, ConsumerSpec> = BTreeMap::new();
    for a in &records.assignments {
        let Some(m) = catalogue.module(&a.module) else {
            continue;
        };
        for held in catalogue.held_seats(m) {
            if let Some(w) = catalogue
                .seat(&held.seat)
                .and_then(|entry| seat_node_worker(entry, &a.node))
            {
                node_workers.insert(w.name.clone(), w);
            }
        }
    }
    o.consumers.extend(node_workers.into_values());

    let assigned: BTreeSet<&Name> = records.assignments.iter().map(|a| &a.module).collect();
    for module in assigned {
        if let Some(c) = catalogue
            .module(module)
            .and_then(|m| module_consumer(catalogue, m))
        {
            o.consumers.push(c);
        }
    }
    check(&o)?;
    Ok(o)
}

fn sorted(subjects: impl Iterator<Item = String>) -> Vec<String> {
    let set: BTreeSet<String> = subjects.collect();
    set.into_iter().collect()
}

/// Refuses overlapping streams (naming both), consumers on streams not in the
/// set, and consumer names the server would reject.
pub fn check(o: &Objects) -> Result<(), ObjectsError> {
    for (i, a) in o.streams.iter().enumerate() {
        for b in &o.streams[i + 1..] {
            for sa in &a.subjects {
                for sb in &b.subjects {
                    if pattern::overlap(sa, sb) {
                        return Err(ObjectsError::Overlap {
                            first: a.name.clone(),
                            first_subject: sa.clone(),
                            second: b.name.clone(),
                            second_subject: sb.clone(),
                        });
                    }
                }
            }
        }
    }
    for c in &o.consumers {
        if !subjects::is_valid_consumer_name(&c.name) {
            return Err(ObjectsError::BadConsumerName(c.name.clone()));
        }
        if !o.streams.iter().any(|s| s.name == c.stream) {
            return Err(ObjectsError::MissingStream {
                consumer: c.name.clone(),
                stream: c.stream.clone(),
            });
        }
    }
    Ok(())
}

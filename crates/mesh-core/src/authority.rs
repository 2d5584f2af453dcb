//! Every principal on the bus and what it may do (DESIGN §5), derived from the
//! catalogue and the records each time it is asked for. Nothing here is
//! stored: a stored permission list would be a second account of a
//! principal's power, able to disagree with the declarations it came from.
//!
//! Every subject comes from [`crate::subjects`], the generator the publishers
//! and the JetStream objects use too, so a grant and the subject it is meant
//! for cannot drift apart. A module's grants on a durable consumer come from
//! the [`crate::jetstream`] spec of that consumer, so whether it has one is
//! decided in one place.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;

pub mod amqp;
pub mod amqp_users;
mod artifact_grants;
mod mint;
pub use mint::credentials_to_mint;

use crate::catalogue::{BUILD_MACHINE_ROLE, Catalogue, SeatEntry, SeatRef};
use crate::diagnostic::Location;
use crate::jetstream::{self, ConsumerSpec, Objects};
use crate::manifest::{Manifest, Scope};
use crate::names::Name;
use crate::records::{Assignment, ControllerSpec, PersonRecord, Records, ToolAccess};
use crate::subjects::{
    self, EventSelector, STREAM_CONTROL, STREAM_EVENTS, STREAM_NODES, artifact, consumer,
};

/// The separator of principal names. No [`Name`] can contain it, so
/// `module_<node>_<module>` can never equal another principal's name.
pub const SEPARATOR: char = '_';

/// The controller's principal name.
pub const CONTROLLER: &str = "controller";

/// Which kind of principal, with the records that identify it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum PrincipalKind {
    Controller,
    Host {
        node: Name,
    },
    Module {
        node: Name,
        module: Name,
    },
    Enrolment {
        node: Name,
    },
    Person {
        person: Name,
    },
    /// A person's one-time login, until `mesh login` spends it.
    Login {
        person: Name,
    },
}

impl PrincipalKind {
    /// The principal's name on the bus; also its inbox token
    /// (`_INBOX.<name>.>`), so it is a single subject token.
    pub fn principal_name(&self) -> String {
        match self {
            PrincipalKind::Controller => CONTROLLER.to_string(),
            PrincipalKind::Host { node } => format!("host{SEPARATOR}{node}"),
            PrincipalKind::Module { node, module } => {
                format!("module{SEPARATOR}{node}{SEPARATOR}{module}")
            }
            PrincipalKind::Enrolment { node } => format!("enrol{SEPARATOR}{node}"),
            PrincipalKind::Person { person } => format!("person{SEPARATOR}{person}"),
            PrincipalKind::Login { person } => format!("login{SEPARATOR}{person}"),
        }
    }
}

/// Why a principal holds a grant: what `mesh authority explain` prints.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(tag = "from", rename_all = "kebab-case")]
pub enum Cause {
    /// A line of a manifest.
    Manifest {
        #[serde(flatten)]
        at: Location,
        what: String,
    },
    /// A record of the mesh (a node, an assignment, a token, a person).
    Record { what: String },
    /// A rule of the bus contract that holds for every principal of a kind.
    Rule { what: &'static str },
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Manifest { at, what } => write!(f, "{at}: {what}"),
            Cause::Record { what } => write!(f, "record: {what}"),
            Cause::Rule { what } => write!(f, "rule: {what}"),
        }
    }
}

/// One subject a principal may publish or subscribe to, and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Grant {
    pub subject: String,
    pub cause: Cause,
}

/// What a principal may do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Permissions {
    pub publish: Vec<Grant>,
    pub subscribe: Vec<Grant>,
    /// Set (with its cause) only for principals that serve tools (modules,
    /// and hosts for their logs tool): lets them
    /// answer a request they received, and nothing else.
    pub allow_responses: Option<Cause>,
}

impl Permissions {
    fn publish(&mut self, subject: impl Into<String>, cause: Cause) {
        self.publish.push(Grant {
            subject: subject.into(),
            cause,
        });
    }

    fn subscribe(&mut self, subject: impl Into<String>, cause: Cause) {
        self.subscribe.push(Grant {
            subject: subject.into(),
            cause,
        });
    }

    /// Taking deliveries from a durable push consumer: hearing its deliver
    /// subject, acknowledging, and binding to it.
    fn consume(&mut self, c: &ConsumerSpec, cause: Cause) {
        self.subscribe(c.deliver_subject.clone(), cause.clone());
        self.publish(c.ack_subject(), cause.clone());
        self.publish(c.info_subject(), cause);
    }

    /// The distinct subjects, sorted: what the users file lists.
    pub fn publish_subjects(&self) -> BTreeSet<&str> {
        self.publish.iter().map(|g| g.subject.as_str()).collect()
    }

    pub fn subscribe_subjects(&self) -> BTreeSet<&str> {
        self.subscribe.iter().map(|g| g.subject.as_str()).collect()
    }

    fn normalise(&mut self) {
        self.publish.sort();
        self.publish.dedup();
        self.subscribe.sort();
        self.subscribe.dedup();
    }
}

/// A principal and its derived permissions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Principal {
    pub name: String,
    #[serde(flatten)]
    pub kind: PrincipalKind,
    /// The record or declaration this principal exists because of.
    pub source: String,
    pub permissions: Permissions,
}

/// Why authority could not be derived.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthorityError {
    #[error(
        "principal {name:?} would be derived twice: from {first} and from {second}; remove one of them"
    )]
    DuplicatePrincipal {
        name: String,
        first: String,
        second: String,
    },
    #[error(
        "module {module} is assigned to node {node} but is not in the catalogue; register its manifest or remove the assignment"
    )]
    UnregisteredModule { node: Name, module: Name },
    #[error(
        "module {module} is assigned to node {node}, which is not a node of this mesh; add the node or remove the assignment"
    )]
    UnknownNode { node: Name, module: Name },
    #[error(
        "{at}: seat {seat} is not declared by any registered module or role; register the module declaring it"
    )]
    UnknownSeat { seat: Name, at: Location },
}

fn rule(what: &'static str) -> Cause {
    Cause::Rule { what }
}

fn record(what: String) -> Cause {
    Cause::Record { what }
}

fn manifest_cause(m: &Manifest, pos: crate::diagnostic::Pos, what: String) -> Cause {
    Cause::Manifest {
        at: m.locate(pos),
        what,
    }
}

/// The declared seat (or role) a manifest names in `[holds]` or `[uses]`.
fn seat_entry<'c>(catalogue: &'c Catalogue, r: &SeatRef) -> Result<&'c SeatEntry, AuthorityError> {
    catalogue
        .seat(&r.seat)
        .ok_or_else(|| AuthorityError::UnknownSeat {
            seat: r.written.clone(),
            at: r.location.clone(),
        })
}

/// Derives every principal, the controller first, then hosts, modules,
/// enrolments and persons, each group sorted by name, so the users file
/// composed from it is the same bytes for the same records.
pub fn derive(
    catalogue: &Catalogue,
    records: &Records,
    controller: &ControllerSpec,
) -> Result<Vec<Principal>, AuthorityError> {
    let mut out: Vec<Principal> = Vec::new();
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut add = |p: Principal, out: &mut Vec<Principal>| -> Result<(), AuthorityError> {
        if let Some(first) = seen.get(&p.name) {
            return Err(AuthorityError::DuplicatePrincipal {
                name: p.name.clone(),
                first: first.clone(),
                second: p.source.clone(),
            });
        }
        seen.insert(p.name.clone(), p.source.clone());
        out.push(p);
        Ok(())
    };

    let mut controller = controller_principal(controller);
    // Work queued under a renamed seat's old name is the controller's to
    // move onto the new seat's subjects.
    for r in crate::jetstream::renamed::renamed(catalogue) {
        for subject in r.publish_subjects() {
            controller.permissions.publish(
                subject,
                record(format!(
                    "seat {} is renamed to {}: the controller moves the work queued under the old name",
                    r.old, r.seat
                )),
            );
        }
    }
    controller.permissions.normalise();
    add(controller, &mut out)?;

    let mut nodes: Vec<&Name> = records.nodes.iter().collect();
    nodes.sort();
    let by_node = records.modules_by_node();
    for node in nodes {
        let mut host = host_principal(node);
        let modules = by_node.get(node).map(Vec::as_slice).unwrap_or_default();
        artifact_grants::add_host_reads(&mut host.permissions, catalogue, records, node, modules);
        host.permissions.normalise();
        add(host, &mut out)?;
    }

    let known_nodes: BTreeSet<&Name> = records.nodes.iter().collect();
    let mut assignments: Vec<&Assignment> = records.assignments.iter().collect();
    assignments.sort();
    for Assignment { node, module } in assignments {
        if !known_nodes.contains(node) {
            return Err(AuthorityError::UnknownNode {
                node: node.clone(),
                module: module.clone(),
            });
        }
        let Some(manifest) = catalogue.module(module) else {
            return Err(AuthorityError::UnregisteredModule {
                node: node.clone(),
                module: module.clone(),
            });
        };
        add(module_principal(catalogue, node, manifest)?, &mut out)?;
    }

    let mut tokens: Vec<&Name> = records.live_tokens.iter().collect();
    tokens.sort();
    for node in tokens {
        add(enrolment_principal(node), &mut out)?;
    }

    let mut logins: Vec<&Name> = records.live_logins.iter().collect();
    logins.sort();
    for person in logins {
        add(login_principal(person), &mut out)?;
    }

    let mut persons: Vec<&PersonRecord> = records.persons.iter().collect();
    persons.sort_by(|a, b| a.name.cmp(&b.name));
    for person in persons {
        add(person_principal(person), &mut out)?;
    }
    Ok(out)
}

fn finish(kind: PrincipalKind, source: String, mut permissions: Permissions) -> Principal {
    permissions.normalise();
    Principal {
        name: kind.principal_name(),
        kind,
        source,
        permissions,
    }
}

/// The controller's consumers are listed here, not derived from a manifest.
pub fn controller_principal(spec: &ControllerSpec) -> Principal {
    let mut p = Permissions::default();
    p.publish(
        subjects::ALL_DECLARATIONS,
        rule("the controller publishes every node's declaration"),
    );
    p.publish(
        subjects::JS_API_ALL,
        rule("the controller is the sole writer of stream and consumer definitions"),
    );
    p.publish(
        subjects::ALL_ENROL_INBOXES,
        rule("the controller answers enrolments at the address each request carries"),
    );
    // An object's meta and chunks are plain publishes to the bucket's
    // subjects; the flow-control answers let it read one back (`mesh
    // artifact get`) above ~1 MB.
    for s in [artifact::ALL_META, artifact::ALL_CHUNKS] {
        p.publish(
            s,
            rule("the controller stores artifacts (mesh artifact put)"),
        );
    }
    p.publish(
        artifact::FLOW_CONTROL,
        rule("the controller reads artifacts back (mesh artifact get)"),
    );
    p.publish(
        subjects::js_ack(STREAM_CONTROL, consumer::CONTROLLER_CONTROL),
        rule("the controller acknowledges the reports and enrolments it takes"),
    );
    p.subscribe(
        subjects::deliver(consumer::CONTROLLER_CONTROL),
        rule("the controller's CONTROL consumer delivers here"),
    );
    p.subscribe(
        subjects::ALL_HEARTBEATS,
        rule("the controller hears every heartbeat"),
    );
    p.subscribe(
        subjects::inbox(CONTROLLER),
        rule("replies to the controller reach its own inbox"),
    );
    p.publish(
        subjects::ALL_HOST_LOGS,
        rule("the controller reads any node's module logs from its host (mesh logs)"),
    );
    p.subscribe(
        subjects::ALL_OPERATIONS,
        rule("the controller serves persons' operations (the server admits each person's own, as its role allows)"),
    );
    p.subscribe(
        subjects::ALL_LOGINS,
        rule("the controller spends persons' one-time logins"),
    );
    p.subscribe(
        subjects::ALL_ARTIFACT_FETCHES,
        rule("the controller hands each host the artifacts its declaration names, where the bus keeps none (RabbitMQ)"),
    );
    // Its answer goes to the asker's reply subject, in the asker's inbox:
    // one answer to each request it was sent, no grant on any inbox.
    p.allow_responses = Some(rule(
        "the controller answers each operation once, at the asker's reply subject",
    ));
    if !spec.follows.is_empty() {
        p.publish(
            subjects::js_ack(STREAM_EVENTS, consumer::CONTROLLER_EVENTS),
            rule("the controller acknowledges the events it follows"),
        );
        p.subscribe(
            subjects::deliver(consumer::CONTROLLER_EVENTS),
            rule("the controller's EVENTS consumer delivers here"),
        );
    }
    for event in &spec.follows {
        // Each followed subject named, never a module's or seat's whole branch.
        p.subscribe(
            event.subject(),
            record(format!("the controller follows {event}")),
        );
    }
    for (seat, kind) in &spec.submits {
        p.publish(
            subjects::seat_work(seat, kind),
            record(format!("the controller submits {kind} work to seat {seat}")),
        );
    }
    finish(PrincipalKind::Controller, "the mesh's controller".into(), p)
}

pub fn host_principal(node: &Name) -> Principal {
    let mut p = Permissions::default();
    let why = |what: &str| record(format!("node {node} {what}"));
    p.publish(subjects::report(node), why("reports what it applied"));
    p.publish(subjects::heartbeat(node), why("heartbeats"));
    let c = consumer::node(node);
    p.publish(
        subjects::js_ack(STREAM_NODES, &c),
        why("acknowledges its own declarations"),
    );
    p.publish(
        subjects::js_consumer_info(STREAM_NODES, &c),
        why("binds its own consumer (the client asks for its info)"),
    );
    p.subscribe(subjects::deliver(&c), why("receives its declarations"));
    p.subscribe(
        subjects::host_logs(node),
        why("serves its modules' logs (mesh logs)"),
    );
    p.publish(
        subjects::artifact_fetch(node),
        why("asks the controller for the artifacts its declaration names (a mesh on RabbitMQ)"),
    );
    // The answer goes to the requester's reply subject, in its inbox: a
    // publish grant on `_INBOX.controller.>` would let a host write into any
    // reply the controller waits for; allow_responses allows one answer to
    // each request the host was sent, and nothing else.
    p.allow_responses = Some(why(
        "answers each log request it receives, once, at the requester's reply subject",
    ));
    let kind = PrincipalKind::Host { node: node.clone() };
    p.subscribe(
        subjects::inbox(&kind.principal_name()),
        rule("replies to a principal reach its own inbox only"),
    );
    finish(kind, format!("node record {node}"), p)
}

/// A person's one-time login: it asks the controller to record the key the
/// person made, and hears the answer; nothing else.
pub fn login_principal(person: &Name) -> Principal {
    let kind = PrincipalKind::Login {
        person: person.clone(),
    };
    let mut p = Permissions::default();
    p.publish(
        subjects::login(person),
        record(format!("a live login of person {person}")),
    );
    p.subscribe(
        subjects::inbox(&kind.principal_name()),
        rule("replies to a principal reach its own inbox only"),
    );
    finish(kind, format!("login of person {person}"), p)
}

pub fn enrolment_principal(node: &Name) -> Principal {
    let mut p = Permissions::default();
    p.publish(
        subjects::enrol(node),
        record(format!("a live enrolment token for node {node}")),
    );
    p.subscribe(
        subjects::enrol_inbox(node),
        record(format!("a live enrolment token for node {node}")),
    );
    finish(
        PrincipalKind::Enrolment { node: node.clone() },
        format!("enrolment token for node {node}"),
        p,
    )
}

pub fn person_principal(person: &PersonRecord) -> Principal {
    let mut p = Permissions::default();
    let name = &person.name;
    match &person.tools {
        ToolAccess::All => {
            for s in subjects::ALL_TOOLS {
                p.publish(s, record(format!("person {name} may call every tool")));
            }
            // Every tool is the hosts' too: `*` is an operator's whole reach,
            // and a module's log is no more than its tools could tell.
            p.publish(
                subjects::ALL_HOST_LOGS,
                record(format!(
                    "person {name} may call every tool, the hosts' logs tool included"
                )),
            );
        }
        ToolAccess::Only(tools) => {
            for t in tools {
                p.publish(t.subject(), record(format!("person {name} may call {t}")));
            }
        }
    }
    if let Some(role) = person.role {
        for op in role.operations() {
            p.publish(
                subjects::operation(name, op),
                record(format!("person {name} is {role}: may ask for {op}")),
            );
        }
        // An artifact's bytes travel through JetStream, not the request:
        // into the person's own uploads, which only the controller reads.
        if role.allows(crate::operation::Operation::ArtifactPut) {
            p.publish(
                subjects::person_uploads(name),
                record(format!("person {name} is {role}: may upload artifacts")),
            );
        }
    }
    let kind = PrincipalKind::Person {
        person: name.clone(),
    };
    p.subscribe(
        subjects::inbox(&kind.principal_name()),
        rule("replies to a principal reach its own inbox only"),
    );
    // No ack subjects, no allow_responses, no durable consumer: a person asks,
    // and one who could answer a request would be impersonating a module.
    finish(kind, format!("person record {name}"), p)
}

pub fn module_principal(
    catalogue: &Catalogue,
    node: &Name,
    m: &Manifest,
) -> Result<Principal, AuthorityError> {
    let module = &m.name.value;
    let mut p = Permissions::default();
    let mut serves_tools = None;

    for e in &m.emits {
        p.publish(
            subjects::module_event(module, &EventSelector::Named(e.value.clone())),
            manifest_cause(m, e.pos, format!("emits {}", e.value)),
        );
    }
    if let Some((c, first)) = jetstream::module_consumer(catalogue, m).zip(m.consumes.first()) {
        let cause = manifest_cause(m, first.pos, "consumes events (its EVENTS consumer)".into());
        p.consume(&c, cause);
    }
    for t in &m.serves {
        let cause = manifest_cause(m, t.pos, format!("serves tool {}", t.value));
        p.subscribe(subjects::module_tool(module, &t.value), cause.clone());
        serves_tools.get_or_insert(cause);
    }
    for t in catalogue.tool_uses(m) {
        p.publish(
            t.subject,
            Cause::Manifest {
                at: t.location,
                what: format!("uses tool {}", t.written),
            },
        );
    }
    for held in catalogue.held_seats(m) {
        let seat = held.seat.clone();
        let entry = seat_entry(catalogue, &held)?;
        let why = |what: String| Cause::Manifest {
            at: held.location.clone(),
            what: format!("holds seat {seat}: {what}"),
        };
        let node_scoped = entry.decl.scope.value == Scope::Node;
        for e in &entry.decl.emits {
            let event = EventSelector::Named(e.value.clone());
            // A node-scoped seat's holder speaks for its own node only.
            if node_scoped {
                p.publish(
                    subjects::seat_node_event(&seat, node, &event),
                    why(format!("the seat emits {} on node {node}", e.value)),
                );
            } else {
                p.publish(
                    subjects::seat_event(&seat, &event),
                    why(format!("the seat emits {}", e.value)),
                );
            }
        }
        for t in &entry.decl.tools {
            // A node-scoped seat's holder answers for its own node only.
            let (subject, cause) = if node_scoped {
                (
                    subjects::seat_node_tool(&seat, node, &t.value),
                    why(format!("the seat serves tool {} on node {node}", t.value)),
                )
            } else {
                (
                    subjects::seat_tool(&seat, &t.value),
                    why(format!("the seat serves tool {}", t.value)),
                )
            };
            p.subscribe(subject, cause.clone());
            serves_tools.get_or_insert(cause);
        }
        // A build machine puts what it built into the bus's artifact store
        // (and reads metas: whether a name is stored, whether an input is).
        if seat.as_str() == BUILD_MACHINE_ROLE && entry.module.is_none() {
            for (s, what) in [
                (
                    artifact::ALL_CHUNKS,
                    "stores the chunks of what it builds in ARTIFACTS",
                ),
                (
                    artifact::ALL_META,
                    "records what it builds in ARTIFACTS (write once)",
                ),
                (
                    artifact::ALL_META_GETS,
                    "reads whether an artifact is stored (its own outputs, a build's inputs)",
                ),
            ] {
                p.publish(s, why(what.into()));
            }
        }
        if let Some(worker) = jetstream::seat_worker(entry) {
            p.consume(
                &worker,
                why("the seat accepts work (its worker consumer)".into()),
            );
        }
        if let Some(worker) = jetstream::seat_node_worker(entry, node) {
            p.consume(
                &worker,
                why(format!(
                    "the seat accepts work (node {node}'s worker consumer)"
                )),
            );
        }
    }
    for used in catalogue.used_seats(m) {
        let seat = used.seat.clone();
        let entry = seat_entry(catalogue, &used)?;
        for kind in &entry.decl.accepts {
            // Work for any node's holder of a node-scoped seat: the node
            // token says whose.
            let subject = match entry.decl.scope.value {
                Scope::Mesh => subjects::seat_work(&seat, &kind.value),
                Scope::Node => subjects::seat_any_node_work(&seat, &kind.value),
            };
            p.publish(
                subject,
                Cause::Manifest {
                    at: used.location.clone(),
                    what: format!("uses seat {seat}, which accepts {} work", kind.value),
                },
            );
        }
    }
    p.allow_responses = serves_tools;
    let kind = PrincipalKind::Module {
        node: node.clone(),
        module: module.clone(),
    };
    p.subscribe(
        subjects::inbox(&kind.principal_name()),
        rule("replies to a principal reach its own inbox only"),
    );
    Ok(finish(
        kind,
        format!("assignment of module {module} to node {node} ({})", m.path),
        p,
    ))
}

impl Principal {
    /// The consumers whose deliveries this principal may receive: what it
    /// hears, and through which filters.
    pub fn consumers<'o>(&self, objects: &'o Objects) -> Vec<&'o ConsumerSpec> {
        let subscribed = self.permissions.subscribe_subjects();
        objects
            .consumers
            .iter()
            .filter(|c| subscribed.contains(c.deliver_subject.as_str()))
            .collect()
    }
}

#[cfg(test)]
mod tests;

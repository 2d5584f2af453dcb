//! The one generator of every NATS subject, stream and consumer name mesh uses
//! (DESIGN §4). Publishers, subscribers, stream filters and grants all call
//! these functions, so the subject a grant names and the subject a publisher
//! uses cannot drift apart.

use std::fmt;

use crate::names::Name;

/// Stream holding reports and enrolment requests.
pub const STREAM_CONTROL: &str = "CONTROL";
/// Stream holding module and seat events.
pub const STREAM_EVENTS: &str = "EVENTS";
/// Artifacts on their way from a person's machine to the artifact store.
pub const STREAM_UPLOADS: &str = "UPLOADS";
/// Every upload's chunks: `mesh.upload.<person>.<upload>`.
pub const ALL_UPLOADS: &str = "mesh.upload.>";
/// Stream holding the newest declaration of every node.
pub const STREAM_NODES: &str = "NODES";

/// The name of the work-queue stream of a seat that accepts work.
pub fn seat_stream(seat: &Name) -> String {
    // Stream names may hold '-', and seat names are lowercase, so SEAT_<seat>
    // cannot collide with the upper-case mesh streams.
    format!("SEAT_{seat}")
}

/// Which events of an emitter a subject selects: one named event, any one
/// event (`*`), or every event (`**`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EventSelector {
    Named(Name),
    /// `*` in a manifest: exactly one event token.
    AnyOne,
    /// `**` in a manifest: every event; derived to NATS `>`.
    All,
}

/// `*`: one token, in a manifest and in a subject alike.
const ANY_ONE: &str = "*";
/// Every event as a manifest writes it.
const ALL_WRITTEN: &str = "**";
/// Every event as NATS writes it.
const ALL_SUBJECT: &str = ">";

impl EventSelector {
    /// In manifest syntax: the name, `*`, or `**` (never NATS `>`).
    pub fn written(&self) -> &str {
        match self {
            EventSelector::Named(n) => n.as_str(),
            EventSelector::AnyOne => ANY_ONE,
            EventSelector::All => ALL_WRITTEN,
        }
    }

    /// The event token of a subject in manifest syntax: `>` is written
    /// `**`; any other token stands as it is.
    pub fn written_token(token: &str) -> &str {
        if token == ALL_SUBJECT {
            ALL_WRITTEN
        } else {
            token
        }
    }
}

/// In subject syntax (`>`, not manifest `**`).
impl fmt::Display for EventSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EventSelector::Named(n) => f.write_str(n.as_str()),
            EventSelector::AnyOne => f.write_str(ANY_ONE),
            EventSelector::All => f.write_str(ALL_SUBJECT),
        }
    }
}

/// `mesh.node.<node>.declaration`
pub fn node_declaration(node: &Name) -> String {
    format!("mesh.node.{node}.declaration")
}

/// `mesh.control.report.<node>`
pub fn report(node: &Name) -> String {
    format!("mesh.control.report.{node}")
}

/// `mesh.control.enrol.<node>`
pub fn enrol(node: &Name) -> String {
    format!("mesh.control.enrol.{node}")
}

/// `mesh.control.heartbeat.<node>`: core NATS only, never stored.
pub fn heartbeat(node: &Name) -> String {
    format!("mesh.control.heartbeat.{node}")
}

/// Every report subject (a CONTROL stream filter).
pub const ALL_REPORTS: &str = "mesh.control.report.*";
/// Every enrolment subject (a CONTROL stream filter).
pub const ALL_ENROLMENTS: &str = "mesh.control.enrol.*";

/// Whether `subject` is some node's enrolment subject (what CONTROL holds
/// besides reports).
pub fn is_enrolment(subject: &str) -> bool {
    pattern::covers(ALL_ENROLMENTS, subject)
}
/// Every heartbeat subject (what the controller hears).
pub const ALL_HEARTBEATS: &str = "mesh.control.heartbeat.*";
/// Every declaration subject (the NODES stream).
pub const ALL_DECLARATIONS: &str = "mesh.node.*.declaration";
/// Every module event: selects on the `event` token, never a module's whole
/// namespace, which would persist every tool call.
pub const ALL_MODULE_EVENTS: &str = "mesh.mod.*.event.>";
/// Every event of a mesh-scoped seat.
pub const ALL_SEAT_EVENTS: &str = "mesh.seat.*.event.>";
/// Every event of a node-scoped seat (the node is in the subject).
pub const ALL_SEAT_NODE_EVENTS: &str = "mesh.seat.*.node.*.event.>";

/// `mesh.mod.<module>.event.<event>`
pub fn module_event(module: &Name, event: &EventSelector) -> String {
    format!("mesh.mod.{module}.event.{event}")
}

/// `mesh.seat.<seat>.event.<event>`
pub fn seat_event(seat: &Name, event: &EventSelector) -> String {
    format!("mesh.seat.{seat}.event.{event}")
}

/// `mesh.seat.<seat>.node.<node>.event.<event>`: an event of `node`'s
/// holder of a node-scoped seat. The node is in the subject, granted to
/// each holder for its own node only, so the server — not an envelope the
/// holder writes — says which node spoke.
pub fn seat_node_event(seat: &Name, node: &Name, event: &EventSelector) -> String {
    format!("mesh.seat.{seat}.node.{node}.event.{event}")
}

/// `mesh.seat.<seat>.node.*.event.<event>`: a node-scoped seat's event
/// from any node's holder (what a consumer of it subscribes).
pub fn seat_any_node_event(seat: &Name, event: &EventSelector) -> String {
    format!("mesh.seat.{seat}.node.*.event.{event}")
}

/// `mesh.seat.<seat>.work.<kind>`
pub fn seat_work(seat: &Name, kind: &Name) -> String {
    format!("mesh.seat.{seat}.work.{kind}")
}

/// `mesh.seat.<seat>.node.<node>.work.<kind>`: work for one node's holder
/// of a node-scoped seat.
pub fn seat_node_work(seat: &Name, node: &Name, kind: &Name) -> String {
    format!("mesh.seat.{seat}.node.{node}.work.{kind}")
}

/// `mesh.seat.<seat>.node.*.work.<kind>`: the stream's filter, and what a
/// user of a node-scoped seat may submit (to any node's holder).
pub fn seat_any_node_work(seat: &Name, kind: &Name) -> String {
    format!("mesh.seat.{seat}.node.*.work.{kind}")
}

/// `mesh.seat.<seat>.node.<node>.work.*`: a node's worker consumer filter.
/// One token per node, so the workers of two nodes never overlap (a
/// work-queue stream refuses overlapping consumers).
pub fn seat_node_work_all(seat: &Name, node: &Name) -> String {
    format!("mesh.seat.{seat}.node.{node}.work.*")
}

/// `mesh.mod.<module>.tool.<tool>`
pub fn module_tool(module: &Name, tool: &Name) -> String {
    format!("mesh.mod.{module}.tool.{tool}")
}

/// `mesh.seat.<seat>.tool.<tool>`
pub fn seat_tool(seat: &Name, tool: &Name) -> String {
    format!("mesh.seat.{seat}.tool.{tool}")
}

/// `mesh.seat.<seat>.node.<node>.tool.<tool>`: a node-scoped seat's tool,
/// answered by that node's holder.
pub fn seat_node_tool(seat: &Name, node: &Name, tool: &Name) -> String {
    format!("mesh.seat.{seat}.node.{node}.tool.{tool}")
}

/// `mesh.seat.<seat>.node.*.tool.<tool>`: what a user of a node-scoped
/// seat's tool may call (any node's holder).
pub fn seat_any_node_tool(seat: &Name, tool: &Name) -> String {
    format!("mesh.seat.{seat}.node.*.tool.{tool}")
}

/// Every tool of every module and seat, node-scoped seats' too (a person
/// granted `*`).
pub const ALL_TOOLS: [&str; 3] = [
    "mesh.mod.*.tool.*",
    "mesh.seat.*.tool.*",
    "mesh.seat.*.node.*.tool.*",
];

/// `mesh.host.<node>.tool.logs`: the logs tool a node's host serves
/// (`mesh logs`). A namespace of its own, `mesh.host.`, which no stream
/// captures (a request stored would be a log line stored) and no module,
/// seat or node subject can reach.
pub fn host_logs(node: &Name) -> String {
    format!("mesh.host.{node}.tool.logs")
}

/// `mesh.controller.artifact.<node>`: node N's host asks the controller for
/// a piece of an artifact its newest declaration names (a mesh on RabbitMQ
/// has no object store; the controller keeps them). The node is the
/// server's word: only its host is granted the subject.
pub fn artifact_fetch(node: &Name) -> String {
    format!("mesh.controller.artifact.{node}")
}

/// Every node's artifact requests: what the controller serves.
pub const ALL_ARTIFACT_FETCHES: &str = "mesh.controller.artifact.*";

/// Every host's logs tool: what the controller (and a person granted every
/// tool) may call.
pub const ALL_HOST_LOGS: &str = "mesh.host.*.tool.logs";

/// `mesh.controller.op.<person>.<operation>`: a person asking the
/// controller for an operation. The person is the server's word (only
/// that person is granted the subject), never the payload's.
pub fn operation(person: &Name, op: crate::operation::Operation) -> String {
    format!("mesh.controller.op.{person}.{op}")
}

/// Every person's every operation: what the controller serves.
pub const ALL_OPERATIONS: &str = "mesh.controller.op.*.*";

/// `mesh.controller.login.<person>`: a person's one-time login, spent by
/// `mesh login` on their machine as the login's principal.
pub fn login(person: &Name) -> String {
    format!("mesh.controller.login.{person}")
}

/// Every login subject (what the active controller serves).
pub const ALL_LOGINS: &str = "mesh.controller.login.*";

/// The person and the operation an operation subject names; none for any
/// other subject.
pub fn parse_operation(subject: &str) -> Option<(Name, crate::operation::Operation)> {
    let rest = subject.strip_prefix("mesh.controller.op.")?;
    let (person, op) = rest.split_once('.')?;
    Some((Name::new(person).ok()?, op.parse().ok()?))
}

/// `mesh.deliver.<consumer>`: where the server pushes a consumer's messages.
pub fn deliver(consumer: &str) -> String {
    format!("mesh.deliver.{consumer}")
}

/// The inbox prefix of a principal, `_INBOX.<principal>`; a client of that
/// principal must use it as its custom inbox prefix.
pub fn inbox_prefix(principal: &str) -> String {
    format!("_INBOX.{principal}")
}

/// Every reply subject under a principal's inbox: `_INBOX.<principal>.>`.
pub fn inbox(principal: &str) -> String {
    format!("_INBOX.{principal}.>")
}

/// The inbox prefix an enrolling node listens under: `_INBOX.enrol.<node>`.
pub fn enrol_inbox_prefix(node: &Name) -> String {
    format!("_INBOX.enrol.{node}")
}

/// `_INBOX.enrol.<node>.>`
pub fn enrol_inbox(node: &Name) -> String {
    format!("_INBOX.enrol.{node}.>")
}

/// Every enrolment inbox: what the controller may answer, and nothing else
/// under `_INBOX` but its own.
pub const ALL_ENROL_INBOXES: &str = "_INBOX.enrol.>";

/// `$JS.ACK.<stream>.<consumer>.>`: acknowledging a delivery of that consumer.
pub fn js_ack(stream: &str, consumer: &str) -> String {
    format!("$JS.ACK.{stream}.{consumer}.>")
}

/// `$JS.API.CONSUMER.INFO.<stream>.<consumer>`: what binding to a push
/// consumer asks.
pub fn js_consumer_info(stream: &str, consumer: &str) -> String {
    format!("$JS.API.CONSUMER.INFO.{stream}.{consumer}")
}

/// The whole JetStream API: the controller's alone.
pub const JS_API_ALL: &str = "$JS.API.>";

/// Consumer names (they become a token of the ack subject, and the server
/// refuses `.`, `*`, `>`, whitespace and path separators in them). Built from
/// [`Name`]s joined by `_`, which no name can contain, so a node consumer, a
/// module consumer and a seat worker can never share a name.
pub mod consumer {
    use crate::names::Name;

    /// The per-node consumer on NODES is named after the node: the host's ack
    /// grant is `$JS.ACK.NODES.<node>.>`.
    pub fn node(node: &Name) -> String {
        node.to_string()
    }

    /// The per-module consumer on EVENTS, shared by all instances.
    pub fn module(module: &Name) -> String {
        format!("mod_{module}")
    }

    /// The worker consumer on a seat's work-queue stream.
    pub fn seat_worker(seat: &Name) -> String {
        format!("seat_{seat}")
    }

    /// The worker consumer of one node's holder of a node-scoped seat.
    /// `_` joins names that cannot contain it, so `seat_<seat>_<node>`
    /// never equals another seat's worker.
    pub fn seat_node_worker(seat: &Name, node: &Name) -> String {
        format!("seat_{seat}_{node}")
    }

    /// The controller's consumer on a renamed seat's old stream, taking
    /// what waits there to move it under the new name.
    pub fn renamed_mover(old: &Name) -> String {
        format!("moved_{old}")
    }

    /// The controller's consumer of reports and enrolments on CONTROL.
    pub const CONTROLLER_CONTROL: &str = "controller_control";
    /// The controller's consumer of the events it follows on EVENTS.
    pub const CONTROLLER_EVENTS: &str = "controller_events";
}

/// The artifact store: a JetStream object store bucket (DESIGN §6
/// Artifacts). Its subjects are the object store's, fixed by the NATS
/// clients that read and write it (`$O.<bucket>.M.<base64url(name)>` for an
/// object's meta, `$O.<bucket>.C.<nuid>` for its chunks), so another client
/// reads what mesh writes.
pub mod artifact {
    use crate::names::Name;
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE;

    /// The object store bucket.
    pub const BUCKET: &str = "ARTIFACTS";
    /// The stream the server keeps the bucket in.
    pub const STREAM: &str = "OBJ_ARTIFACTS";
    /// The stream every meta is written into, one per name, and sourced
    /// from into [`STREAM`] (see `jetstream::artifact_store`). Not named
    /// `OBJ_…`: clients take such a stream for a bucket of its own.
    pub const METAS_STREAM: &str = "ARTIFACT_METAS";
    /// Flow-control replies of every consumer on the bucket's stream: the
    /// server pauses a push consumer after about 1 MB until its flow-control
    /// message is answered, so a reader that may not answer stalls.
    pub const FLOW_CONTROL: &str = "$JS.FC.OBJ_ARTIFACTS.>";
    /// Every meta subject (where an object's name, size and digest live).
    pub const ALL_META: &str = "$O.ARTIFACTS.M.>";
    /// Every chunk subject.
    pub const ALL_CHUNKS: &str = "$O.ARTIFACTS.C.>";
    /// A direct get of any object's meta: what a writer reads to learn
    /// whether a name is stored (write once), and a build machine to confirm
    /// each input it read is. Metas only: no chunk is readable through it.
    pub const ALL_META_GETS: &str = "$JS.API.DIRECT.GET.OBJ_ARTIFACTS.$O.ARTIFACTS.M.>";

    /// The token naming one stored version of an object's chunks, chosen by
    /// its writer. Letters and digits only: it becomes a subject token and
    /// part of a consumer filter, where `.`, `*` or `>` would widen what a
    /// grant built from it lets a reader see.
    #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub struct Nuid(String);

    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    #[error("{0:?} is not an object nuid (letters and digits only, at most 64)")]
    pub struct InvalidNuid(pub String);

    impl Nuid {
        pub fn new(s: &str) -> Result<Nuid, InvalidNuid> {
            if !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric()) {
                Ok(Nuid(s.to_string()))
            } else {
                Err(InvalidNuid(s.to_string()))
            }
        }

        pub fn as_str(&self) -> &str {
            &self.0
        }
    }

    impl std::fmt::Display for Nuid {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    /// `<module>/<artifact>/sha256-<hex>`: an object's name says what its
    /// content is, so a name is written once and means one content.
    pub fn object_name(module: &Name, artifact: &Name, sha256_hex: &str) -> String {
        format!("{module}/{artifact}/sha256-{sha256_hex}")
    }

    /// The SHA-256 (lowercase hex) an object's name says its content has:
    /// `Some` only for `<name>/<name>/sha256-<64 lowercase hex digits>`.
    pub fn named_digest(name: &str) -> Option<&str> {
        let mut parts = name.split('/');
        let (module, artifact, last) = (parts.next()?, parts.next()?, parts.next()?);
        let hex = last.strip_prefix("sha256-")?;
        (parts.next().is_none()
            && Name::new(module).is_ok()
            && Name::new(artifact).is_ok()
            && crate::digest::is_sha256_hex(hex))
        .then_some(hex)
    }

    /// `$O.ARTIFACTS.M.<base64url(name)>`: the meta subject of an object.
    /// URL-safe base64 *with* padding, as async-nats and nats.go encode it
    /// (`=` is a legal subject character); any other encoding names a
    /// subject nothing was written to.
    pub fn meta(name: &str) -> String {
        format!("$O.{BUCKET}.M.{}", URL_SAFE.encode(name))
    }

    /// `$O.ARTIFACTS.C.<nuid>`: the chunks of one stored object.
    pub fn chunks(nuid: &Nuid) -> String {
        format!("$O.{BUCKET}.C.{nuid}")
    }

    /// `$JS.API.DIRECT.GET.OBJ_ARTIFACTS.<meta subject>`: the newest meta
    /// of one object, by a direct get of the last message on its subject.
    /// Per name, so a grant of it reveals one object's meta only.
    pub fn meta_get(name: &str) -> String {
        format!("$JS.API.DIRECT.GET.{STREAM}.{}", meta(name))
    }

    /// `$JS.API.CONSUMER.CREATE.OBJ_ARTIFACTS.<consumer>.$O.ARTIFACTS.C.<nuid>`:
    /// creating a consumer of one object's chunks. The server refuses a
    /// request whose body filter differs from this subject's (error 10131),
    /// so the grant, unlike the unfiltered `…CREATE.OBJ_ARTIFACTS`, cannot
    /// be used to read another object.
    pub fn consumer_create(consumer: &str, nuid: &Nuid) -> String {
        format!(
            "$JS.API.CONSUMER.CREATE.{STREAM}.{consumer}.{}",
            chunks(nuid)
        )
    }

    /// What a principal publishes to read exactly one object (its replies
    /// and the consumer's deliveries come to its own inbox): the meta by
    /// direct get, a chunk consumer of any name filtered on that object's
    /// nuid, and the flow-control answers. Neither stream info nor consumer
    /// delete: the reader's consumer is ephemeral and goes by itself.
    pub fn reader_publish(name: &str, nuid: &Nuid) -> Vec<String> {
        vec![
            meta_get(name),
            consumer_create("*", nuid),
            FLOW_CONTROL.to_string(),
        ]
    }
}

/// Whether a consumer or stream name is one the server accepts.
pub fn is_valid_consumer_name(name: &str) -> bool {
    !name.is_empty()
        && !name
            .chars()
            .any(|c| matches!(c, '.' | '*' | '>' | '/' | '\\') || c.is_whitespace())
}

/// NATS subject wildcard algebra over patterns (`*` one token, `>` the rest).
pub mod pattern {
    fn tokens(s: &str) -> Vec<&str> {
        s.split('.').collect()
    }

    /// Whether some subject is matched by both patterns (two stream filters, or
    /// a subscription and a publication, that can meet).
    pub fn overlap(a: &str, b: &str) -> bool {
        let (a, b) = (tokens(a), tokens(b));
        let mut i = 0;
        loop {
            match (a.get(i), b.get(i)) {
                (Some(&">"), Some(_)) | (Some(_), Some(&">")) => return true,
                (None, None) => return true,
                (None, _) | (_, None) => return false,
                (Some(x), Some(y)) => {
                    if *x != "*" && *y != "*" && x != y {
                        return false;
                    }
                }
            }
            i += 1;
        }
    }

    /// Whether every subject matched by `inner` is also matched by `outer`
    /// (a grant that covers a subscription).
    pub fn covers(outer: &str, inner: &str) -> bool {
        let (o, n) = (tokens(outer), tokens(inner));
        let mut i = 0;
        loop {
            match (o.get(i), n.get(i)) {
                (Some(&">"), Some(_)) => return true,
                (None, None) => return true,
                (None, _) | (_, None) => return false,
                (Some(x), Some(y)) => {
                    if *y == ">" {
                        return false;
                    }
                    if *x != "*" && (x != y) {
                        return false;
                    }
                }
            }
            i += 1;
        }
    }
}

/// `mesh.upload.<person>.<upload>`: the chunks of one artifact a person
/// uploads, in order, for the controller to put in the artifact store;
/// `upload` is [`upload_id_ok`].
pub fn upload(person: &Name, upload: &str) -> String {
    format!("mesh.upload.{person}.{upload}")
}

/// An upload's id: 32 lowercase hex digits (one subject token, no
/// wildcard).
pub fn upload_id_ok(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `mesh.upload.<person>.>`: every upload of a person (their grant).
pub fn person_uploads(person: &Name) -> String {
    format!("mesh.upload.{person}.>")
}

#[cfg(test)]
mod tests {

    #[test]
    fn an_upload_is_a_subject_of_its_persons_own() {
        let ada = Name::new("ada").unwrap();
        let id = "0123456789abcdef0123456789abcdef";
        assert!(upload_id_ok(id));
        assert_eq!(upload(&ada, id), format!("mesh.upload.ada.{id}"));
        assert!(pattern::covers(&person_uploads(&ada), &upload(&ada, id)));
        assert!(pattern::covers(ALL_UPLOADS, &upload(&ada, id)));
        let bob = Name::new("bob").unwrap();
        assert!(!pattern::covers(&person_uploads(&bob), &upload(&ada, id)));
        for bad in [
            "",
            "0123456789abcdef0123456789abcde",
            "0123456789abcdef0123456789abcdef0",
            "0123456789ABCDEF0123456789abcdef",
            "0123456789abcdef0123456789abcde*",
            "0123456789abcdef0123456789abcdeg",
            "0123456789abcdef.123456789abcdef",
        ] {
            assert!(!upload_id_ok(bad), "{bad:?}");
        }
        assert_eq!(login(&ada), "mesh.controller.login.ada");
        assert!(pattern::covers(ALL_LOGINS, &login(&ada)));
    }
    use super::pattern::{covers, overlap};
    use super::*;

    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    #[test]
    fn an_enrolment_subject_is_known_from_a_report() {
        let n1 = Name::new("n1").unwrap();
        assert!(is_enrolment(&enrol(&n1)));
        assert!(!is_enrolment(&report(&n1)));
        assert!(!is_enrolment("mesh.control.enrol.n1.extra"));
        assert!(!is_enrolment("mesh.control.enrol"));
    }

    #[test]
    fn subjects_follow_the_bus_contract() {
        assert_eq!(node_declaration(&n("n1")), "mesh.node.n1.declaration");
        assert_eq!(
            seat_event(&n("mesh-build-machine"), &EventSelector::Named(n("built"))),
            "mesh.seat.mesh-build-machine.event.built"
        );
        assert_eq!(
            module_event(&n("watcher"), &EventSelector::All),
            "mesh.mod.watcher.event.>"
        );
        assert_eq!(
            js_ack(STREAM_NODES, &consumer::node(&n("n1"))),
            "$JS.ACK.NODES.n1.>"
        );
    }

    #[test]
    fn node_scoped_seat_subjects_carry_the_node_and_are_covered_by_their_stream() {
        let (pf, n1, apply, rules) = (n("packet-filter"), n("n1"), n("apply"), n("rules"));
        let work = seat_node_work(&pf, &n1, &apply);
        assert_eq!(work, "mesh.seat.packet-filter.node.n1.work.apply");
        assert!(pattern::covers(&seat_any_node_work(&pf, &apply), &work));
        assert!(pattern::covers(&seat_node_work_all(&pf, &n1), &work));
        assert!(!pattern::covers(&seat_node_work_all(&pf, &n("n2")), &work));
        let tool = seat_node_tool(&pf, &n1, &rules);
        assert_eq!(tool, "mesh.seat.packet-filter.node.n1.tool.rules");
        assert!(pattern::covers(&seat_any_node_tool(&pf, &rules), &tool));
        assert!(ALL_TOOLS.iter().any(|all| pattern::covers(all, &tool)));
        // Work is never an event, nor a mesh-scoped seat's work.
        assert!(!pattern::overlap(
            ALL_SEAT_EVENTS,
            &seat_any_node_work(&pf, &apply)
        ));
        assert!(!pattern::overlap(&seat_work(&pf, &apply), &work));
        assert_eq!(
            consumer::seat_node_worker(&pf, &n1),
            "seat_packet-filter_n1"
        );
    }

    #[test]
    fn a_hosts_logs_tool_is_its_own_and_never_stored() {
        let (n1, n2) = (n("n1"), n("n2"));
        assert_eq!(host_logs(&n1), "mesh.host.n1.tool.logs");
        assert!(covers(ALL_HOST_LOGS, &host_logs(&n1)));
        assert!(!covers(&host_logs(&n2), &host_logs(&n1)));
        // No stream filter captures it, and no module's or seat's tool,
        // event, work or declaration subject is it.
        for other in [
            ALL_REPORTS,
            ALL_ENROLMENTS,
            ALL_HEARTBEATS,
            ALL_DECLARATIONS,
            ALL_MODULE_EVENTS,
            ALL_SEAT_EVENTS,
            "mesh.seat.*.node.*.event.>",
            "mesh.seat.*.work.*",
            "mesh.seat.*.node.*.work.*",
            "mesh.deliver.*",
            "_INBOX.>",
            "$JS.>",
        ]
        .into_iter()
        .chain(ALL_TOOLS)
        {
            assert!(!overlap(other, ALL_HOST_LOGS), "{other}");
        }
    }

    #[test]
    fn an_inbox_grant_covers_exactly_the_prefix_its_client_uses() {
        // A client whose custom inbox prefix differs from its grant waits out
        // every request: the answer is refused on the way back.
        assert_eq!(inbox_prefix("host_n1"), "_INBOX.host_n1");
        assert_eq!(inbox("host_n1"), "_INBOX.host_n1.>");
        assert_eq!(enrol_inbox_prefix(&n("n1")), "_INBOX.enrol.n1");
        assert_eq!(enrol_inbox(&n("n1")), "_INBOX.enrol.n1.>");
        for (prefix, grant) in [
            (inbox_prefix("person_ada"), inbox("person_ada")),
            (enrol_inbox_prefix(&n("n4")), enrol_inbox(&n("n4"))),
        ] {
            assert!(covers(&grant, &format!("{prefix}.reply-1")), "{grant}");
        }
        assert!(covers(ALL_ENROL_INBOXES, &enrol_inbox(&n("n4"))));
        assert!(!covers(ALL_ENROL_INBOXES, &inbox("host_n1")));
    }

    #[test]
    fn artifact_subjects_are_the_object_stores() {
        use artifact::{Nuid, chunks, consumer_create, meta, meta_get, reader_publish};
        // URL-safe and padded, as async-nats and nats.go write it: '-' where
        // standard base64 has '+', and the '=' kept.
        assert_eq!(
            meta("audit-log/bin/sha256-00ff"),
            "$O.ARTIFACTS.M.YXVkaXQtbG9nL2Jpbi9zaGEyNTYtMDBmZg=="
        );
        assert_eq!(meta("??>"), "$O.ARTIFACTS.M.Pz8-");
        assert_eq!(meta("a?"), "$O.ARTIFACTS.M.YT8=");
        let nuid = Nuid::new("Zx3kq9PWbRmTfA0c1dE2gH").unwrap();
        assert_eq!(chunks(&nuid), "$O.ARTIFACTS.C.Zx3kq9PWbRmTfA0c1dE2gH");
        assert_eq!(
            meta_get("a?"),
            "$JS.API.DIRECT.GET.OBJ_ARTIFACTS.$O.ARTIFACTS.M.YT8="
        );
        assert_eq!(
            consumer_create("fetch1", &nuid),
            "$JS.API.CONSUMER.CREATE.OBJ_ARTIFACTS.fetch1.$O.ARTIFACTS.C.Zx3kq9PWbRmTfA0c1dE2gH"
        );
        // The stream's subjects hold what is read.
        assert!(covers(artifact::ALL_META, &meta("a?")));
        assert!(covers(artifact::ALL_CHUNKS, &chunks(&nuid)));
        // A reader's grants cover its object's consumer under any name, and
        // neither another object's chunks nor the unfiltered create.
        let grants = reader_publish("a?", &nuid);
        assert!(
            grants
                .iter()
                .any(|g| covers(g, &consumer_create("x", &nuid)))
        );
        let other = Nuid::new("Other0000000000000000").unwrap();
        for refused in [
            consumer_create("x", &other),
            "$JS.API.CONSUMER.CREATE.OBJ_ARTIFACTS".to_string(),
            "$JS.API.CONSUMER.CREATE.OBJ_ARTIFACTS.x".to_string(),
            meta_get("b"),
            "$JS.API.STREAM.INFO.OBJ_ARTIFACTS".to_string(),
            "$JS.API.CONSUMER.DELETE.OBJ_ARTIFACTS.x".to_string(),
        ] {
            assert!(!grants.iter().any(|g| covers(g, &refused)), "{refused}");
        }
        assert!(grants.iter().any(|g| covers(g, "$JS.FC.OBJ_ARTIFACTS.x.y")));
    }

    #[test]
    fn an_object_name_says_its_content() {
        let hex = "ab".repeat(32);
        let name = artifact::object_name(&n("audit-log"), &n("bin"), &hex);
        assert_eq!(name, format!("audit-log/bin/sha256-{hex}"));
        assert_eq!(artifact::named_digest(&name), Some(hex.as_str()));
        for bad in [
            format!("audit-log/sha256-{hex}"),
            format!("audit-log/bin/x/sha256-{hex}"),
            format!("audit-log/bin/sha256-{}", "AB".repeat(32)),
            format!("audit-log/bin/sha256-{}", &hex[1..]),
            format!("audit-log/bin/sha512-{hex}"),
            format!("Audit/bin/sha256-{hex}"),
            format!("audit-log/b.n/sha256-{hex}"),
        ] {
            assert_eq!(artifact::named_digest(&bad), None, "{bad}");
        }
    }

    #[test]
    fn a_nuid_is_one_plain_token() {
        for bad in ["", "a.b", "*", ">", "a b", "a-b", "é", &"a".repeat(65)] {
            assert!(artifact::Nuid::new(bad).is_err(), "{bad:?}");
        }
        assert_eq!(artifact::Nuid::new("abc123").unwrap().as_str(), "abc123");
    }

    #[test]
    fn consumer_names_are_server_legal() {
        for c in [
            consumer::node(&n("n-1")),
            consumer::module(&n("audit-log")),
            consumer::seat_worker(&n("git")),
            consumer::CONTROLLER_CONTROL.into(),
            consumer::CONTROLLER_EVENTS.into(),
        ] {
            assert!(is_valid_consumer_name(&c), "{c}");
        }
        assert!(!is_valid_consumer_name("mod.audit"));
    }

    #[test]
    fn wildcard_overlap() {
        assert!(overlap("mesh.mod.*.event.>", "mesh.mod.git.event.pushed"));
        assert!(overlap("mesh.control.>", "mesh.control.report.*"));
        assert!(!overlap("mesh.control.report.*", "mesh.control.enrol.*"));
        assert!(!overlap("mesh.mod.*.event.>", "mesh.mod.git.tool.clone"));
        assert!(!overlap("a.b", "a.b.c"));
        assert!(overlap("a.*", "*.b"));
        assert!(!overlap("a.>", "a"));
    }

    #[test]
    fn wildcard_cover() {
        assert!(covers("mesh.mod.*.event.>", "mesh.mod.git.event.pushed"));
        assert!(covers("a.>", "a.*.c"));
        assert!(!covers("a.*", "a.>"));
        assert!(!covers("a.b", "a.*"));
        assert!(covers("a.*", "a.b"));
        assert!(!covers("mesh.mod.git.event.pushed", "mesh.mod.git.event.*"));
    }
}

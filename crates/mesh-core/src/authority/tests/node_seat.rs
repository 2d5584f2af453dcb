//! Node-scoped seats (DESIGN §4): one holder per node, a worker consumer per
//! (seat, node) filtered on that node's token, tools answered per node, and
//! users who may submit to any node's holder.

use super::*;

const PACKET_FILTER: &str = r#"
[module]
name = "nftables"

[[seat]]
name = "packet-filter"
scope = "node"
protocol = "nft"
accepts = ["apply"]
emits = ["applied"]
tools = ["rules"]

[holds]
seats = ["packet-filter"]
"#;

const ADMIN: &str = r#"
[module]
name = "firewall-admin"

[tools]
uses = ["seat:packet-filter.rules"]

[uses]
seats = ["packet-filter"]
"#;

fn catalogue() -> Catalogue {
    let ms = [
        ("nftables/mesh.toml", PACKET_FILTER),
        ("firewall-admin/mesh.toml", ADMIN),
    ]
    .iter()
    .map(|(p, t)| manifest::parse(p, t).expect("fixture parses"))
    .collect();
    Catalogue::build(ms, Aliases::new())
}

fn records() -> Records {
    Records {
        nodes: vec![n("n1"), n("n2"), n("n3")],
        // Listed out of order: the objects must not depend on it.
        assignments: vec![
            Assignment::new(n("n2"), n("nftables")),
            Assignment::new(n("n1"), n("firewall-admin")),
            Assignment::new(n("n1"), n("nftables")),
        ],
        ..Records::default()
    }
}

fn objects() -> jetstream::Objects {
    jetstream::derive(&catalogue(), &records(), &ControllerSpec::default()).unwrap()
}

fn principal(name: &str) -> Principal {
    let ps = derive(&catalogue(), &records(), &ControllerSpec::default()).unwrap();
    find(&ps, name).clone()
}

#[test]
fn the_stream_takes_work_for_any_node_and_each_holding_node_has_its_own_worker() {
    let o = objects();
    let stream = o
        .streams
        .iter()
        .find(|s| s.name == "SEAT_packet-filter")
        .expect("the seat's stream");
    assert_eq!(
        stream.subjects,
        ["mesh.seat.packet-filter.node.*.work.apply"]
    );
    assert_eq!(stream.retention, jetstream::Retention::WorkQueue);

    let workers: Vec<(&str, &[String], Option<&str>)> = o
        .consumers
        .iter()
        .filter(|c| c.stream == "SEAT_packet-filter")
        .map(|c| {
            (
                c.name.as_str(),
                c.filter_subjects.as_slice(),
                c.deliver_group.as_deref(),
            )
        })
        .collect();
    // n3 holds nothing: no worker; its work waits in the stream.
    assert_eq!(
        workers,
        [
            (
                "seat_packet-filter_n1",
                &["mesh.seat.packet-filter.node.n1.work.*".to_string()][..],
                Some("seat_packet-filter_n1"),
            ),
            (
                "seat_packet-filter_n2",
                &["mesh.seat.packet-filter.node.n2.work.*".to_string()][..],
                Some("seat_packet-filter_n2"),
            ),
        ]
    );
    // The filters of two nodes' workers never overlap (a work-queue stream
    // refuses that), and neither takes the other's work.
    assert!(!crate::subjects::pattern::overlap(
        &workers[0].1[0],
        &workers[1].1[0]
    ));
    jetstream::check(&o).unwrap();
}

#[test]
fn a_holder_takes_and_answers_for_its_own_node_only() {
    let p = principal("module_n1_nftables");
    assert!(can_subscribe(&p, "mesh.deliver.seat_packet-filter_n1"));
    assert!(!can_subscribe(&p, "mesh.deliver.seat_packet-filter_n2"));
    assert!(can_publish(
        &p,
        "$JS.ACK.SEAT_packet-filter.seat_packet-filter_n1.1.1.1.1.1"
    ));
    assert!(!can_publish(
        &p,
        "$JS.ACK.SEAT_packet-filter.seat_packet-filter_n2.1.1.1.1.1"
    ));
    assert!(can_publish(
        &p,
        "$JS.API.CONSUMER.INFO.SEAT_packet-filter.seat_packet-filter_n1"
    ));
    assert!(can_subscribe(
        &p,
        "mesh.seat.packet-filter.node.n1.tool.rules"
    ));
    assert!(!can_subscribe(
        &p,
        "mesh.seat.packet-filter.node.n2.tool.rules"
    ));
    assert!(!can_subscribe(&p, "mesh.seat.packet-filter.tool.rules"));
    assert!(p.permissions.allow_responses.is_some());
    // Events carry the node: the server, not the envelope, says who spoke.
    assert!(can_publish(
        &p,
        "mesh.seat.packet-filter.node.n1.event.applied"
    ));
    assert!(!can_publish(
        &p,
        "mesh.seat.packet-filter.node.n2.event.applied"
    ));
    assert!(!can_publish(&p, "mesh.seat.packet-filter.event.applied"));
    // A holder is no user: it cannot hand work to another node's holder.
    assert!(!can_publish(
        &p,
        "mesh.seat.packet-filter.node.n2.work.apply"
    ));
}

#[test]
fn a_user_submits_and_calls_any_nodes_holder_and_takes_nothing() {
    let p = principal("module_n1_firewall-admin");
    let pubs = p.permissions.publish_subjects();
    assert!(pubs.contains("mesh.seat.packet-filter.node.*.work.apply"));
    assert!(pubs.contains("mesh.seat.packet-filter.node.*.tool.rules"));
    assert!(can_publish(
        &p,
        "mesh.seat.packet-filter.node.n3.work.apply"
    ));
    assert!(!can_publish(&p, "mesh.seat.packet-filter.work.apply"));
    assert!(!can_subscribe(&p, "mesh.deliver.seat_packet-filter_n1"));
    assert_eq!(p.permissions.allow_responses, None);
}

#[test]
fn a_person_with_every_tool_may_call_a_node_scoped_seats_tool() {
    let mut r = records();
    r.persons.push(PersonRecord {
        name: n("alice"),
        tools: ToolAccess::All,
        role: None,
    });
    let ps = derive(&catalogue(), &r, &ControllerSpec::default()).unwrap();
    let alice = find(&ps, "person_alice");
    assert!(can_publish(
        alice,
        "mesh.seat.packet-filter.node.n2.tool.rules"
    ));
    assert!(!can_publish(
        alice,
        "mesh.seat.packet-filter.node.n2.work.apply"
    ));
}

const AUDIT: &str = r#"
[module]
name = "audit"

[events]
consumes = ["seat:packet-filter.applied"]
"#;

/// A node-scoped seat's events carry the node: each holder may publish on
/// its own node's subject only, so the server says which node spoke; a
/// consumer hears every node's holder; EVENTS stores them; the catalogue
/// check matches the consumer with what holders publish.
#[test]
fn a_node_scoped_seats_events_carry_the_node_and_each_holder_speaks_for_its_own() {
    let n1 = principal("module_n1_nftables");
    let pubs = n1.permissions.publish_subjects();
    assert!(
        pubs.contains("mesh.seat.packet-filter.node.n1.event.applied"),
        "{pubs:?}"
    );
    assert!(
        !pubs
            .iter()
            .any(|s| s.contains(".event.") && !s.contains(".node.n1.")),
        "no other node's event, nor the shared subject: {pubs:?}"
    );
    let ms = [
        ("nftables/mesh.toml", PACKET_FILTER),
        ("audit/mesh.toml", AUDIT),
    ]
    .iter()
    .map(|(p, t)| manifest::parse(p, t).expect("fixture parses"))
    .collect();
    let c = Catalogue::build(ms, Aliases::new());
    let mut r = records();
    r.assignments = vec![
        Assignment::new(n("n1"), n("nftables")),
        Assignment::new(n("n2"), n("audit")),
    ];
    let o = jetstream::derive(&c, &r, &ControllerSpec::default()).unwrap();
    let audit = o
        .consumers
        .iter()
        .find(|k| k.name == "mod_audit")
        .expect("audit's consumer");
    assert_eq!(
        audit.filter_subjects,
        ["mesh.seat.packet-filter.node.*.event.applied"]
    );
    let events = o.streams.iter().find(|s| s.name == "EVENTS").unwrap();
    assert!(
        events
            .subjects
            .iter()
            .any(|s| crate::subjects::pattern::covers(
                s,
                "mesh.seat.packet-filter.node.n1.event.applied"
            )),
        "{:?}",
        events.subjects
    );
    let errors: Vec<_> = crate::catalogue::check(&c)
        .into_iter()
        .filter(|d| d.severity == crate::diagnostic::Severity::Error)
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
}

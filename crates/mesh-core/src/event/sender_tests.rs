use super::*;
use crate::testing::n;

fn envelope(module: &str, node: &str) -> EventEnvelope {
    EventEnvelope {
        id: "00112233445566778899aabbccddeeff".into(),
        module: n(module),
        node: n(node),
        at: 1,
        payload: serde_json::Value::Null,
    }
}

fn runs(pairs: &[(&str, &str)]) -> Vec<Assignment> {
    pairs
        .iter()
        .map(|(node, module)| Assignment::new(n(node), n(module)))
        .collect()
}

#[test]
fn a_subject_proves_the_module_or_a_node_scoped_seats_node() {
    assert_eq!(
        proven("mesh.mod.ticker.event.tick"),
        Some(Proven::Module(n("ticker")))
    );
    assert_eq!(
        proven("mesh.seat.filter.node.n2.event.dropped"),
        Some(Proven::SeatNode {
            seat: n("filter"),
            node: n("n2")
        })
    );
    assert_eq!(
        proven("mesh.seat.git.event.pushed"),
        Some(Proven::Seat(n("git")))
    );
    for not in [
        "mesh.mod.ticker.tool.tick",
        "mesh.mod.ticker.event",
        "mesh.mod.Ticker.event.tick",
        "mesh.node.n1.declaration",
        "mesh.seat.git.node.n1.event",
    ] {
        assert_eq!(proven(not), None, "{not}");
    }
}

#[test]
fn a_node_the_records_do_not_run_the_module_on_is_a_claim_not_a_sender() {
    let records = runs(&[("n3", "ticker"), ("n1", "echo")]);
    let subject = "mesh.mod.ticker.event.tick";
    // Sent from where it runs: the sender.
    let s = sender(subject, &envelope("ticker", "n3"), &records);
    assert_eq!(s.doubt, None);
    assert_eq!(s.to_string(), "ticker@n3");
    // ticker on n3 claiming n1: shown as a claim, never as n1's.
    let s = sender(subject, &envelope("ticker", "n1"), &records);
    assert_eq!(
        s.to_string(),
        "ticker@? (the envelope claims ticker@n1, but ticker is not assigned to n1: it runs on n3)"
    );
    // A module assigned nowhere says so.
    let s = sender(subject, &envelope("ticker", "n1"), &[]);
    assert_eq!(
        s.doubt.as_deref(),
        Some(
            "the envelope claims ticker@n1, but ticker is not assigned to n1: it is assigned to no node"
        )
    );
    // On two nodes, either claim is consistent with the records.
    let both = runs(&[("n1", "ticker"), ("n3", "ticker")]);
    assert_eq!(
        sender(subject, &envelope("ticker", "n1"), &both).doubt,
        None
    );
    assert!(
        sender(subject, &envelope("ticker", "n2"), &both)
            .doubt
            .is_some_and(|d| d.ends_with("it runs on n1, n3"))
    );
}

#[test]
fn an_envelope_that_contradicts_its_subject_is_named_by_the_subject() {
    let records = runs(&[("n3", "ticker"), ("n1", "echo")]);
    // Another module's name on ticker's subject: the module shown is the
    // subject's.
    let e = envelope("echo", "n1");
    let s = sender("mesh.mod.ticker.event.tick", &e, &records);
    assert_eq!(s.module, n("ticker"));
    assert_eq!(
        s.to_string(),
        "ticker@? (the envelope claims echo@n1; the subject proves module ticker)"
    );
    assert_eq!(
        contradicts("mesh.mod.ticker.event.tick", &e).as_deref(),
        Some("the envelope claims echo@n1; the subject proves module ticker")
    );
    // A node-scoped seat's event claiming another node than its subject.
    let records = runs(&[("n1", "nft"), ("n2", "nft")]);
    let subject = "mesh.seat.filter.node.n2.event.dropped";
    let s = sender(subject, &envelope("nft", "n1"), &records);
    assert_eq!(
        s.doubt.as_deref(),
        Some("the envelope claims nft@n1; the subject proves node n2")
    );
    assert_eq!(
        sender(subject, &envelope("nft", "n2"), &records).doubt,
        None
    );
    assert_eq!(contradicts(subject, &envelope("nft", "n2")), None);
    // A mesh-scoped seat's subject proves neither; the records still speak.
    let subject = "mesh.seat.git.event.pushed";
    assert_eq!(contradicts(subject, &envelope("nft", "n9")), None);
    assert!(
        sender(subject, &envelope("nft", "n9"), &records)
            .doubt
            .is_some()
    );
    assert_eq!(
        sender(subject, &envelope("nft", "n1"), &records).doubt,
        None
    );
}

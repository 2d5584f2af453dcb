//! What both buses' authority matrices expect of one mesh: the example
//! catalogue and a fleet's records, and the operations no principal of it
//! may do, written as NATS subjects (the AMQP matrix renders each through
//! the same routing-key generator the grants are rendered with).

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use mesh_core::catalogue::Catalogue;
use mesh_core::manifest::{Target, ToolRef};
use mesh_core::names::Name;
use mesh_core::records::{Assignment, PersonRecord, Records, ToolAccess};
use mesh_core::subjects;

pub fn n(s: &str) -> Name {
    Name::new(s).unwrap()
}

pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/catalogue")
}

/// Three nodes, every example module assigned, two persons (one `*`), one
/// live token.
pub fn fleet() -> Records {
    let a = |node: &str, module: &str| Assignment::new(n(node), n(module));
    Records {
        nodes: vec![n("n1"), n("n2"), n("n3")],
        assignments: vec![
            a("n1", "nats-broker"),
            a("n1", "git-server"),
            a("n1", "audit-log"),
            a("n2", "notifier"),
            a("n2", "code-search"),
            a("n2", "artifact-store"),
            a("n3", "firewall-admin"),
            a("n1", "nftables"),
            a("n2", "nftables"),
            a("n3", "nftables"),
        ],
        live_tokens: vec![n("n4")],
        persons: vec![
            PersonRecord {
                name: n("alice"),
                tools: ToolAccess::All,
                role: Some(mesh_core::operation::Role::Operator),
            },
            PersonRecord {
                name: n("bob"),
                tools: ToolAccess::Only(vec![ToolRef {
                    provider: Target::Seat(n("git")),
                    tool: n("clone"),
                }]),
                role: Some(mesh_core::operation::Role::Viewer),
            },
        ],
        ..Records::default()
    }
}

/// A module run from an artifact, beside the examples: its host's grants to
/// read that one object are in the matrix too.
pub const RUNNER: &str = "[module]\nname = \"runner\"\ndescription = \"runs from the artifact store\"\n\n[run]\ncommand = [\"${artifact:bin}\", \"3600\"]\n";
pub const RUNNER_SHA: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";
pub const RUNNER_NUID: &str = "RUNNERNUID1";

pub fn runner_object() -> String {
    subjects::artifact::object_name(&n("runner"), &n("bin"), RUNNER_SHA)
}

/// What no principal but n1's host may do with runner's artifact, and what
/// not even n1's host may do with the bucket.
pub fn artifact_forbidden() -> Vec<(&'static str, Op, String)> {
    use subjects::artifact::{Nuid, consumer_create, meta_get};
    let other = Nuid::new("OTHERNUID").unwrap();
    let ours = Nuid::new(RUNNER_NUID).unwrap();
    let other_object = subjects::artifact::object_name(&n("audit-log"), &n("bin"), RUNNER_SHA);
    vec![
        ("host_n2", Op::Pub, meta_get(&runner_object())),
        ("host_n2", Op::Pub, consumer_create("c1", &ours)),
        ("host_n1", Op::Pub, meta_get(&other_object)),
        ("host_n1", Op::Pub, consumer_create("c1", &other)),
        // The unfiltered create would read any object.
        (
            "host_n1",
            Op::Pub,
            "$JS.API.CONSUMER.CREATE.OBJ_ARTIFACTS".into(),
        ),
        (
            "host_n1",
            Op::Pub,
            "$JS.API.STREAM.INFO.OBJ_ARTIFACTS".into(),
        ),
        (
            "host_n1",
            Op::Pub,
            "$JS.API.STREAM.PURGE.OBJ_ARTIFACTS".into(),
        ),
        ("host_n1", Op::Pub, format!("$O.ARTIFACTS.C.{RUNNER_NUID}")),
        ("module_n1_runner", Op::Pub, meta_get(&runner_object())),
        ("module_n1_runner", Op::Pub, consumer_create("c1", &ours)),
        ("person_alice", Op::Pub, meta_get(&runner_object())),
    ]
}

/// The example catalogue with `runner` beside it, and the fleet with runner
/// assigned to n1 from a recorded artifact.
pub fn mesh() -> (Catalogue, Records) {
    let extra = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(extra.path().join("runner")).unwrap();
    std::fs::write(extra.path().join("runner/mesh.toml"), RUNNER).unwrap();
    let report = mesh_state::load(&[examples(), extra.path().to_path_buf()]).unwrap();
    assert_eq!(report.errors(), 0, "{:?}", report.diagnostics);
    let catalogue = report.catalogue;
    let mut records = fleet();
    records
        .assignments
        .push(Assignment::new(n("n1"), n("runner")));
    records
        .pins
        .insert((n("n1"), n("runner")), "v1".to_string());
    records.artifacts.insert(
        (n("runner"), "v1".to_string()),
        [(
            n("bin"),
            mesh_core::artifact::Recorded {
                reference: mesh_core::artifact::Reference {
                    module: n("runner"),
                    artifact: n("bin"),
                    sha256: RUNNER_SHA.into(),
                },
                size: 10,
                nuid: RUNNER_NUID.into(),
            },
        )]
        .into(),
    );
    (catalogue, records)
}

/// (principal, operation, subject): things the derivation must not allow.
pub const FORBIDDEN: &[(&str, Op, &str)] = &[
    // Roles: an operation beyond the role, another person's operation.
    ("person_bob", Op::Pub, "mesh.controller.op.bob.assign"),
    ("person_bob", Op::Pub, "mesh.controller.op.alice.status"),
    (
        "person_alice",
        Op::Pub,
        "mesh.controller.op.alice.person-add",
    ),
    ("person_alice", Op::Pub, "mesh.controller.op.alice.audit"),
    ("host_n1", Op::Pub, "mesh.controller.op.n1.status"),
    // A host reaches only its own node.
    ("host_n1", Op::Sub, "mesh.node.n2.declaration"),
    ("host_n1", Op::Sub, "mesh.deliver.n2"),
    ("host_n1", Op::Sub, "mesh.node.n1.declaration"),
    ("host_n1", Op::Pub, "mesh.control.report.n2"),
    ("host_n1", Op::Pub, "mesh.control.heartbeat.n2"),
    ("host_n1", Op::Pub, "$JS.ACK.NODES.n2.1.1.1.1.1"),
    ("host_n1", Op::Pub, "$JS.API.STREAM.INFO.NODES"),
    ("host_n1", Op::Pub, "$JS.API.CONSUMER.INFO.NODES.n2"),
    ("host_n1", Op::Pub, "$JS.API.CONSUMER.CREATE.NODES.n1"),
    ("host_n1", Op::Sub, "_INBOX.host_n2.x"),
    ("host_n1", Op::Sub, "_INBOX.>"),
    ("host_n1", Op::Pub, "mesh.node.n1.declaration"),
    ("host_n1", Op::Pub, "mesh.mod.audit-log.event.entry-written"),
    ("host_n1", Op::Sub, "mesh.mod.*.event.>"),
    // A host serves its own node's logs tool only, calls none, and its
    // allow_responses answers requests it was sent, nothing else.
    ("host_n2", Op::Sub, "mesh.host.n1.tool.logs"),
    ("host_n1", Op::Sub, "mesh.host.*.tool.logs"),
    ("host_n1", Op::Pub, "mesh.host.n2.tool.logs"),
    ("host_n1", Op::Pub, "_INBOX.controller.unasked"),
    // A module neither reads a node's logs nor poses as its host.
    ("module_n1_audit-log", Op::Pub, "mesh.host.n1.tool.logs"),
    ("module_n1_audit-log", Op::Sub, "mesh.host.n1.tool.logs"),
    ("person_bob", Op::Pub, "mesh.host.n1.tool.logs"),
    // A module emits only its own declared events, and acks only its own.
    (
        "module_n1_audit-log",
        Op::Pub,
        "mesh.mod.git-server.event.repo-created",
    ),
    (
        "module_n1_audit-log",
        Op::Pub,
        "mesh.mod.audit-log.event.not-declared",
    ),
    ("module_n1_audit-log", Op::Pub, "mesh.seat.git.event.pushed"),
    ("module_n1_audit-log", Op::Pub, "$JS.API.STREAM.LIST"),
    (
        "module_n1_audit-log",
        Op::Pub,
        "$JS.ACK.EVENTS.mod_notifier.1.1.1.1.1",
    ),
    ("module_n1_audit-log", Op::Sub, "mesh.deliver.mod_notifier"),
    (
        "module_n1_audit-log",
        Op::Sub,
        "_INBOX.module_n2_notifier.x",
    ),
    ("module_n1_audit-log", Op::Sub, "mesh.seat.git.tool.clone"),
    (
        "module_n1_audit-log",
        Op::Pub,
        "mesh.seat.packet-filter.work.rule-change",
    ),
    ("module_n1_audit-log", Op::Pub, "mesh.control.report.n1"),
    (
        "module_n2_notifier",
        Op::Pub,
        "mesh.seat.mesh-build-machine.event.built",
    ),
    (
        "module_n2_notifier",
        Op::Pub,
        "mesh.mod.audit-log.tool.tail",
    ),
    (
        "module_n3_firewall-admin",
        Op::Pub,
        "mesh.seat.mesh-build-machine.work.build",
    ),
    (
        "module_n3_nftables",
        Op::Pub,
        "$JS.ACK.SEAT_packet-filter.seat_other.1.1.1.1.1",
    ),
    // A node-scoped seat's holder speaks for its own node only: the server
    // says which node spoke, not the envelope.
    (
        "module_n3_nftables",
        Op::Pub,
        "mesh.seat.packet-filter.node.n1.event.applied",
    ),
    (
        "module_n3_nftables",
        Op::Pub,
        "mesh.seat.packet-filter.event.applied",
    ),
    // A person asks and nothing else.
    ("person_bob", Op::Pub, "mesh.seat.git.tool.create-repo"),
    ("person_bob", Op::Sub, "mesh.seat.git.tool.clone"),
    ("person_bob", Op::Pub, "_INBOX.module_n2_code-search.x"),
    (
        "person_bob",
        Op::Sub,
        "mesh.mod.git-server.event.repo-created",
    ),
    ("person_bob", Op::Sub, "mesh.deliver.mod_audit-log"),
    (
        "person_bob",
        Op::Pub,
        "$JS.ACK.EVENTS.mod_audit-log.1.1.1.1.1",
    ),
    ("person_bob", Op::Sub, "_INBOX.person_alice.x"),
    ("person_alice", Op::Sub, "mesh.seat.*.event.>"),
    (
        "person_alice",
        Op::Pub,
        "mesh.mod.audit-log.event.entry-written",
    ),
    ("person_alice", Op::Pub, "$JS.API.INFO"),
    ("person_alice", Op::Pub, "_INBOX.module_n1_audit-log.x"),
    // An enrolling node reaches its enrolment subject and inbox only.
    ("enrol_n4", Op::Sub, "_INBOX.enrol.n1.x"),
    ("enrol_n4", Op::Sub, "mesh.node.n4.declaration"),
    ("enrol_n4", Op::Sub, "mesh.deliver.n4"),
    ("enrol_n4", Op::Pub, "mesh.control.enrol.n1"),
    ("enrol_n4", Op::Pub, "mesh.control.report.n4"),
    ("enrol_n4", Op::Sub, "_INBOX.>"),
    // The controller answers enrolments, and no other principal's inbox.
    ("controller", Op::Pub, "_INBOX.host_n1.x"),
    ("controller", Op::Sub, "_INBOX.host_n1.x"),
    ("controller", Op::Sub, "mesh.mod.*.event.>"),
    (
        "controller",
        Op::Pub,
        "mesh.mod.audit-log.event.entry-written",
    ),
];

#[derive(Debug, Clone, Copy)]
pub enum Op {
    Pub,
    Sub,
}

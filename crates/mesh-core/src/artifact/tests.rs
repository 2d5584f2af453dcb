//! Composing a module that runs from artifacts: the pinned version's
//! artifacts named in its declaration, the placeholders kept for the host,
//! and a module whose version lacks one left out, naming the fix.

use std::collections::BTreeMap;

use super::*;
use crate::catalogue::{Aliases, Catalogue};
use crate::declaration::{Inputs, NodeModules, compose_modules};
use crate::manifest::{self, Driver};
use crate::records::{Assignment, Records};

fn n(s: &str) -> Name {
    Name::new(s).unwrap()
}

const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

const AUDIT: &str = r#"
[module]
name = "audit"
description = "keeps an audit log"

[run]
command = ["${artifact:audit-log}", "--cost", "$${HOME} $5", "--plugin=${artifact:plugin}"]
"#;

const BOX: &str = r#"
[module]
name = "boxed"
description = "runs in a container"

[run]
driver = "container"
image = "${artifact:image}"
command = ["--serve"]
"#;

fn catalogue() -> Catalogue {
    let parsed = [AUDIT, BOX]
        .iter()
        .enumerate()
        .map(|(i, t)| manifest::parse(&format!("m{i}.toml"), t).unwrap())
        .collect();
    Catalogue::build(parsed, Aliases::new())
}

fn recorded(module: &str, name: &str, hex: &str, size: u64) -> (Name, Recorded) {
    (
        n(name),
        Recorded {
            reference: Reference {
                module: n(module),
                artifact: n(name),
                sha256: hex.to_string(),
            },
            size,
            nuid: format!("NUID{size}"),
        },
    )
}

fn records(pins: &[(&str, &str, &str)]) -> Records {
    Records {
        nodes: vec![n("n1")],
        assignments: pins
            .iter()
            .map(|(node, m, _)| Assignment::new(n(node), n(m)))
            .collect(),
        pins: pins
            .iter()
            .filter(|(_, _, v)| !v.is_empty())
            .map(|(node, m, v)| ((n(node), n(m)), v.to_string()))
            .collect(),
        artifacts: BTreeMap::from([
            (
                (n("audit"), "v1".to_string()),
                BTreeMap::from([
                    recorded("audit", "audit-log", A, 10),
                    recorded("audit", "plugin", B, 20),
                ]),
            ),
            (
                (n("audit"), "v2".to_string()),
                BTreeMap::from([recorded("audit", "audit-log", B, 11)]),
            ),
            (
                (n("boxed"), "v1".to_string()),
                BTreeMap::from([recorded("boxed", "image", A, 30)]),
            ),
        ]),
        ..Records::default()
    }
}

fn compose(r: &Records) -> NodeModules {
    let c = catalogue();
    let empty = BTreeMap::new();
    let ports = BTreeMap::new();
    let keys = BTreeMap::new();
    let inputs = Inputs {
        catalogue: &c,
        records: r,
        versions: &empty,
        addresses: &empty,
        seat_ports: &ports,
        secrets: &crate::declaration::NoSecrets,
        keys: &keys,
        users_file: Err("none"),
        left_out: &BTreeMap::new(),
    };
    compose_modules(&inputs, &n("n1"))
}

#[test]
fn the_pinned_versions_artifacts_are_declared_and_the_placeholders_kept_for_the_host() {
    let m = compose(&records(&[("n1", "audit", "v1")]));
    assert!(m.left_out.is_empty(), "{:?}", m.left_out);
    let audit = &m.modules[0];
    assert_eq!(
        audit.artifacts,
        [
            ArtifactDecl {
                name: n("audit-log"),
                reference: format!("artifact-store://audit/audit-log@sha256:{A}"),
                size: 10,
                sha256: A.into(),
                nuid: "NUID10".into(),
            },
            ArtifactDecl {
                name: n("plugin"),
                reference: format!("artifact-store://audit/plugin@sha256:{B}"),
                size: 20,
                sha256: B.into(),
                nuid: "NUID20".into(),
            },
        ]
    );
    // A literal `${` stays escaped: the host reads these again.
    assert_eq!(
        audit.run.command,
        [
            "${artifact:audit-log}",
            "--cost",
            "$${HOME} $5",
            "--plugin=${artifact:plugin}"
        ]
    );
    assert_eq!(audit.run.driver, Driver::Process);
    // The container's image is an artifact too, declared as decided: the
    // host loads that artifact's archive and reads no placeholder.
    let m = compose(&records(&[("n1", "boxed", "v1")]));
    let boxed = &m.modules[0];
    assert_eq!(boxed.run.driver, Driver::Container);
    assert_eq!(
        boxed.run.image,
        Some(crate::declaration::ImageDecl::Artifact(n("image")))
    );
    assert_eq!(boxed.run.command, ["--serve"]);
    assert_eq!(boxed.artifacts.len(), 1);
    // Another version is another declaration.
    let v2 = compose(&records(&[("n1", "audit", "v2")]));
    assert!(v2.modules.is_empty());
    assert_eq!(v2.left_out.len(), 1);
}

#[test]
fn a_version_without_an_artifact_or_no_version_leaves_the_module_out_naming_the_fix() {
    let m = compose(&records(&[("n1", "audit", "v2")]));
    let why = m.left_out[0].to_string();
    assert!(
        why.contains("version v2 of audit has no artifact plugin")
            && why.contains("mesh artifact put FILE --module audit --name plugin --version v2"),
        "{why}"
    );
    let m = compose(&records(&[("n1", "audit", "")]));
    let why = m.left_out[0].to_string();
    assert!(
        why.contains("no version of audit was recorded when it was assigned")
            && why.contains("mesh artifact put FILE --module audit --name audit-log"),
        "{why}"
    );
    // A version unknown altogether: the same, naming the first artifact.
    let m = compose(&records(&[("n1", "audit", "v9")]));
    let why = m.left_out[0].to_string();
    assert!(
        why.contains("version v9 of audit has no artifact audit-log"),
        "{why}"
    );
    // A chunk token that would widen a grant (`>`) is never declared.
    let mut r = records(&[("n1", "boxed", "v1")]);
    for a in r.artifacts.values_mut().flat_map(|v| v.values_mut()) {
        a.nuid = "X.>".into();
    }
    let m = compose(&r);
    let why = m.left_out[0].to_string();
    assert!(
        why.contains("is not an object nuid") && why.contains("put it again"),
        "{why}"
    );
}

#[test]
fn the_names_a_run_uses_come_from_command_and_image_each_once() {
    let c = catalogue();
    let audit = c.module(&n("audit")).unwrap();
    assert_eq!(names_used(audit), [n("audit-log"), n("plugin")]);
    let boxed = c.module(&n("boxed")).unwrap();
    assert_eq!(names_used(boxed), [n("image")]);
}

/// The artifact subjects `principal` may publish to, with their causes.
fn artifact_reads(r: &Records, principal: &str) -> Vec<(String, String)> {
    let ps = crate::authority::derive(&catalogue(), r, &crate::records::ControllerSpec::default())
        .unwrap();
    let p = ps.iter().find(|p| p.name == principal).unwrap();
    p.permissions
        .publish
        .iter()
        .filter(|g| g.subject.contains("OBJ_ARTIFACTS"))
        .map(|g| (g.subject.clone(), g.cause.to_string()))
        .collect()
}

#[test]
fn a_host_may_read_exactly_the_artifacts_its_declaration_names() {
    use crate::subjects::artifact::{Nuid, reader_publish};
    let mut r = records(&[("n1", "audit", "v1")]);
    r.nodes.push(n("n2"));
    let reads = artifact_reads(&r, "host_n1");
    let mut expected: Vec<String> = Vec::new();
    for (name, hex, nuid) in [("audit-log", A, "NUID10"), ("plugin", B, "NUID20")] {
        let object = crate::subjects::artifact::object_name(&n("audit"), &n(name), hex);
        expected.extend(reader_publish(&object, &Nuid::new(nuid).unwrap()));
    }
    expected.sort();
    expected.dedup();
    let subjects: Vec<String> = {
        let mut s: Vec<String> = reads.iter().map(|(s, _)| s.clone()).collect();
        s.dedup();
        s
    };
    assert_eq!(subjects, expected);
    // Each with its cause: the module, the node and the version.
    assert!(
        reads.iter().any(|(s, c)| s.contains("NUID20")
            && c.contains("module audit on node n1 runs artifact plugin")
            && c.contains("of version v1")),
        "{reads:?}"
    );
    // Another node running nothing reads nothing.
    assert!(artifact_reads(&r, "host_n2").is_empty());
    // Moved to v2 (which lacks plugin): left out, so nothing is granted.
    let r = records(&[("n1", "audit", "v2")]);
    assert!(artifact_reads(&r, "host_n1").is_empty());
    // The container's image: its one object.
    let r = records(&[("n1", "boxed", "v1")]);
    assert!(
        artifact_reads(&r, "host_n1")
            .iter()
            .any(|(s, _)| s.ends_with(".C.NUID30")),
    );
}

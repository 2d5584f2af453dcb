//! Golden derivations: every grant of every principal (with its cause, in
//! the order explain prints), every JetStream object, and the users file
//! composed from them (and their RabbitMQ rendering), compared whole against the files beside this one.
//! Substring and pattern checks let a widened or dropped grant through; a
//! whole-output comparison does not. After a deliberate change, write the
//! files anew with `MESH_BLESS=1 cargo test -p mesh-core golden` and read the
//! diff before committing it.

use std::fmt::Write as _;
use std::path::PathBuf;

use super::*;

fn golden(file: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/authority/tests")
        .join(file);
    if std::env::var_os("MESH_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; write it with MESH_BLESS=1", path.display()));
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(expected.lines().count().min(actual.lines().count()));
        panic!(
            "{} differs from the derivation at line {}:\n  expected: {:?}\n  actual:   {:?}",
            path.display(),
            first + 1,
            expected.lines().nth(first),
            actual.lines().nth(first)
        );
    }
}

fn render(ps: &[Principal]) -> String {
    let mut out = String::new();
    for p in ps {
        let _ = writeln!(out, "{} ({})", p.name, p.source);
        for g in &p.permissions.publish {
            let _ = writeln!(out, "  pub {}  <- {}", g.subject, g.cause);
        }
        for g in &p.permissions.subscribe {
            let _ = writeln!(out, "  sub {}  <- {}", g.subject, g.cause);
        }
        match &p.permissions.allow_responses {
            Some(c) => {
                let _ = writeln!(out, "  allow_responses  <- {c}");
            }
            None => {
                let _ = writeln!(out, "  no allow_responses");
            }
        }
    }
    out
}

#[test]
fn golden_principals() {
    golden("principals.txt", &render(&principals()));
}

#[test]
fn golden_objects() {
    let o = jetstream::derive(&catalogue(), &records(), &ControllerSpec::default()).unwrap();
    let mut text = serde_json::to_string_pretty(&o).unwrap();
    text.push('\n');
    golden("objects.json", &text);
}

#[test]
fn golden_users_file() {
    let ps = principals();
    let hashes = super::users::hashes(&ps);
    golden(
        "users.conf",
        &users_file::compose(&ps, &hashes).unwrap().text,
    );
}

#[test]
fn golden_amqp() {
    let o = jetstream::derive(&catalogue(), &records(), &ControllerSpec::default()).unwrap();
    let users: Vec<_> = principals()
        .iter()
        .map(|p| crate::authority::amqp::render(p, &o))
        .collect();
    let v = serde_json::json!({ "users": users, "queues": crate::authority::amqp::topology(&o) });
    let mut text = serde_json::to_string_pretty(&v).unwrap();
    text.push('\n');
    golden("amqp.json", &text);
}

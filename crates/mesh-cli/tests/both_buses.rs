//! A command given addresses of both buses is refused before it does
//! anything, naming both: a mesh half on each would send a declaration on
//! one and hear its report on the other.

mod support;

use std::process::Command;

use support::mesh_bin;

#[test]
fn login_with_a_nats_and_an_amqp_address_is_refused_naming_both() {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(mesh_bin())
        .args([
            "login",
            "--person",
            "ada",
            "--key",
            "ada.seed",
            "--bus",
            "tls://127.0.0.1:4222",
            "--bus",
            "amqps://127.0.0.1:5671",
            "--pin",
            &"ab".repeat(32),
        ])
        .env("HOME", home.path())
        .env_remove("MESH_DIR")
        .current_dir(home.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--bus: tls://127.0.0.1:4222")
            && err.contains("--bus: amqps://127.0.0.1:5671"),
        "{err}"
    );
    assert!(
        err.contains("unset whichever is not this mesh's bus"),
        "{err}"
    );
    // Nothing was written where a context would be.
    assert_eq!(std::fs::read_dir(home.path()).unwrap().count(), 0);
}

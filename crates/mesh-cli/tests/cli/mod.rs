//! The built `mesh` binary as the CLI tests run it.
// Each test binary uses part of this module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The example catalogue.
pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/catalogue")
}

/// `mesh ARGS` (a store from the environment is not inherited).
pub fn mesh(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(args)
        .env_remove("MESH_STORE")
        .output()
        .expect("run mesh")
}

/// Its stdout, once it succeeded.
pub fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout.clone()).unwrap()
}

//! mesh-env-shim: the entrypoint of a container module whose environment
//! holds a secret. The host bind-mounts this program (static: it runs in any
//! image, `FROM scratch` included) and the module's secret variables as a
//! file, read-only; the program adds them to its environment and execs the
//! image's own entrypoint. So no secret value is handed to the container
//! engine, which would keep it in its state (its database, the container's
//! `config.json`) after the module is gone.
//!
//! Usage: `mesh-env-shim FILE PROGRAM [ARG...]`. FILE holds `NAME=value`
//! records, each ended by a NUL (a value may hold a newline). PROGRAM is
//! looked up on the container's `PATH` when it holds no `/`. Any failure
//! prints one line to stderr and exits 127, as a shell does for a command
//! it cannot run.
//!
//! Built by `build.rs` on its own (`rustc`, static, no dependency), outside
//! the workspace's crates.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt as _;
use std::os::unix::process::CommandExt as _;
use std::process::{Command, ExitCode};

fn fail(why: String) -> ExitCode {
    eprintln!("mesh-env-shim: {why}");
    ExitCode::from(127)
}

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(file), Some(program)) = (args.next(), args.next()) else {
        return fail("usage: mesh-env-shim FILE PROGRAM [ARG...]".into());
    };
    let bytes = match std::fs::read(&file) {
        Ok(b) => b,
        Err(e) => return fail(format!("cannot read {}: {e}", file.to_string_lossy())),
    };
    let mut command = Command::new(&program);
    command.args(args);
    for record in bytes.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        let Some(at) = record.iter().position(|b| *b == b'=') else {
            // Never the record itself: it may be a value.
            return fail(format!("a record of {} has no `=`", file.to_string_lossy()));
        };
        let name = OsString::from_vec(record[..at].to_vec());
        let value = OsString::from_vec(record[at + 1..].to_vec());
        command.env(name, value);
    }
    let e = command.exec();
    fail(format!("cannot run {}: {e}", program.to_string_lossy()))
}

//! What the example modules share: running until SIGTERM, reporting the
//! reason a module stopped as its last log line (what its host reports), and
//! appending the records tests and operators read.
//!
//! Each module runs in the working directory its host gives it and writes
//! its records there as JSON lines.

use std::error::Error;
use std::future::Future;
use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use tokio::signal::unix::{SignalKind, signal};

pub type BoxError = Box<dyn Error + Send + Sync>;

/// Runs `module` until it ends or SIGTERM: exit 0 on SIGTERM or success, 1
/// with the error and its causes as the last line otherwise.
pub async fn run<F>(name: &str, module: F) -> ExitCode
where
    F: Future<Output = Result<(), BoxError>>,
{
    // Installed before the bus connect, so a stop asked for at any point is
    // honoured promptly.
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{name}: cannot listen for SIGTERM: {e}");
            return ExitCode::FAILURE;
        }
    };
    tokio::select! {
        r = module => match r {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{name}: {}", chain(e.as_ref()));
                ExitCode::FAILURE
            }
        },
        _ = term.recv() => {
            eprintln!("{name}: SIGTERM, stopping");
            ExitCode::SUCCESS
        }
    }
}

pub use mesh_sdk::chain;

/// Appends one JSON value as a line to `file` and syncs it: a record the
/// module acknowledged must survive the module.
pub fn append_line(file: &Path, value: &serde_json::Value) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)?;
    let mut line = serde_json::to_vec(value)?;
    line.push(b'\n');
    f.write_all(&line)?;
    f.sync_data()
}

/// The value after `flag` in `args`, if the flag is there.
pub fn flag_value(args: &[String], flag: &str) -> Result<Option<String>, String> {
    match args.iter().position(|a| a == flag) {
        None => Ok(None),
        Some(i) => args
            .get(i + 1)
            .cloned()
            .map(Some)
            .ok_or_else(|| format!("{flag} needs a value")),
    }
}

/// Refuses any argument not in `known` (flags taking a value are listed in
/// `with_value`), so a typo is not silently ignored.
pub fn check_args(args: &[String], with_value: &[&str], known: &[&str]) -> Result<(), String> {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if with_value.contains(&a) {
            i += 2;
        } else if known.contains(&a) {
            i += 1;
        } else {
            return Err(format!("unknown argument {a:?}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arguments_are_checked_and_read() {
        let a = args(&["--seat", "jobs", "--node-scoped"]);
        assert_eq!(check_args(&a, &["--seat"], &["--node-scoped"]), Ok(()));
        assert_eq!(flag_value(&a, "--seat").unwrap().as_deref(), Some("jobs"));
        assert_eq!(flag_value(&a, "--count").unwrap(), None);
        assert!(flag_value(&args(&["--seat"]), "--seat").is_err());
        let err = check_args(&args(&["--sat", "x"]), &["--seat"], &[]).unwrap_err();
        assert!(err.contains("\"--sat\""), "{err}");
    }

    #[test]
    fn lines_are_appended_whole() {
        let dir = std::env::temp_dir().join(format!("mesh-kit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("x.jsonl");
        append_line(&f, &serde_json::json!({"a": 1})).unwrap();
        append_line(&f, &serde_json::json!("b")).unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "{\"a\":1}\n\"b\"\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! Finding the server binaries the README's commands install.

use std::path::{Path, PathBuf};

use crate::TestkitError;

/// What to run when a binary is missing.
pub const INSTALL_HINT: &str = "run the README's test command (`scripts/test`), which installs it";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The pinned `nats-server` installed by `scripts/setup` into `.tools/bin`, or
/// `MESH_NATS_SERVER`. A `nats-server` elsewhere on PATH is deliberately not
/// used: its version is not the one the ack-subject tests pin.
pub fn nats_server_binary() -> Result<PathBuf, TestkitError> {
    find_nats_server(std::env::var_os("MESH_NATS_SERVER"), &workspace_root())
}

fn find_nats_server(
    configured: Option<std::ffi::OsString>,
    root: &Path,
) -> Result<PathBuf, TestkitError> {
    let mut looked = Vec::new();
    if let Some(p) = configured {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        looked.push(format!("MESH_NATS_SERVER={}", p.display()));
    }
    let local = root.join(".tools/bin/nats-server");
    if local.is_file() {
        return Ok(local);
    }
    looked.push(local.display().to_string());
    Err(TestkitError::BinaryMissing {
        what: "nats-server",
        looked: looked.join(", "),
        hint: INSTALL_HINT,
    })
}

/// Debian's `rabbitmq-server` start script (the one the package's service
/// wrapper runs), or `MESH_RABBITMQ_SERVER`.
pub fn rabbitmq_server_binary() -> Result<PathBuf, TestkitError> {
    let mut looked = Vec::new();
    if let Some(p) = std::env::var_os("MESH_RABBITMQ_SERVER") {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        looked.push(format!("MESH_RABBITMQ_SERVER={}", p.display()));
    }
    let debian = PathBuf::from("/usr/lib/rabbitmq/bin/rabbitmq-server");
    if debian.is_file() {
        return Ok(debian);
    }
    looked.push(debian.display().to_string());
    Err(TestkitError::BinaryMissing {
        what: "rabbitmq-server (Debian package rabbitmq-server)",
        looked: looked.join(", "),
        hint: INSTALL_HINT,
    })
}

/// The directory holding `initdb`, `postgres` and `psql`: `MESH_PG_BIN`, then
/// Debian's `/usr/lib/postgresql/<version>/bin` (newest first), then the
/// directory a PATH `initdb` links to.
pub fn postgres_bin_dir() -> Result<PathBuf, TestkitError> {
    let mut looked = Vec::new();
    let complete = |d: &Path| {
        ["initdb", "postgres", "psql"]
            .iter()
            .all(|b| d.join(b).is_file())
    };
    if let Some(p) = std::env::var_os("MESH_PG_BIN") {
        let p = PathBuf::from(p);
        if complete(&p) {
            return Ok(p);
        }
        looked.push(format!("MESH_PG_BIN={}", p.display()));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((v, e.path().join("bin")))
        })
        .collect();
    versions.sort();
    if let Some((_, dir)) = versions.iter().rev().find(|(_, d)| complete(d)) {
        return Ok(dir.clone());
    }
    looked.push("/usr/lib/postgresql/*/bin".into());
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        let initdb = dir.join("initdb");
        if let Ok(real) = std::fs::canonicalize(&initdb)
            && let Some(parent) = real.parent()
            && complete(parent)
        {
            return Ok(parent.to_path_buf());
        }
    }
    looked.push("PATH".into());
    Err(TestkitError::BinaryMissing {
        what: "PostgreSQL server binaries (initdb, postgres, psql)",
        looked: looked.join(", "),
        hint: INSTALL_HINT,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_nats_server_names_the_readme_command() {
        let empty = tempfile::tempdir().unwrap();
        let err = find_nats_server(Some("/nonexistent/nats-server".into()), empty.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("scripts/test"), "{err}");
        assert!(err.contains("/nonexistent/nats-server"), "{err}");
    }
}

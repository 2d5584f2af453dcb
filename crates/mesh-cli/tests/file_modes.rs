//! Every file mesh writes that holds a key, a hash or a record is its owner's
//! alone, and so are the directories mesh makes for them: the users file
//! (`--out`), the minted secrets (`--secrets-dir`) and the SQLite store
//! (`.mesh/mesh.db`, with its `-wal` and `-shm`).
//!
//! mesh runs under umask 000 here, so a file created without an explicit
//! mode comes out readable by all and the test sees it.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use support::{examples, mesh_bin};

/// Runs mesh in `dir` under umask 000 with the default store
/// (`./.mesh/mesh.db`), requiring success.
fn mesh(dir: &Path, args: &[&str]) {
    let out = Command::new("sh")
        .arg("-c")
        .arg("umask 000 && exec \"$0\" \"$@\"")
        .arg(mesh_bin())
        .args(args)
        .env_remove("MESH_STORE")
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mesh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn keys_hashes_and_records_are_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let catalogue = examples().join("catalogue");
    let catalogue = catalogue.to_str().unwrap();
    let fleet = examples().join("fleet.toml");
    mesh(
        d,
        &[
            "fleet",
            "load",
            fleet.to_str().unwrap(),
            "--catalogue",
            catalogue,
            "--secrets-dir",
            "keys/minted",
        ],
    );
    mesh(
        d,
        &[
            "authority",
            "compose",
            "--catalogue",
            catalogue,
            "--out",
            "broker/conf/users.conf",
        ],
    );

    let mut checked = Vec::new();
    let mut private = |p: &Path, want: u32| {
        assert_eq!(mode(p), want, "{} is {:o}", p.display(), mode(p));
        checked.push(p.to_path_buf());
    };
    for dir in [".mesh", "keys", "keys/minted", "broker", "broker/conf"] {
        private(&d.join(dir), 0o700);
    }
    private(&d.join("broker/conf/users.conf"), 0o600);
    let secrets: Vec<_> = std::fs::read_dir(d.join("keys/minted"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(secrets.len() >= 10, "{secrets:?}");
    for s in &secrets {
        private(s, 0o600);
    }
    private(&d.join(".mesh/mesh.db"), 0o600);
    for extra in ["-wal", "-shm"] {
        let p = d.join(format!(".mesh/mesh.db{extra}"));
        if p.exists() {
            private(&p, 0o600);
        }
    }
    // Nothing else was written beside them.
    for dir in [".mesh", "broker/conf"] {
        for e in std::fs::read_dir(d.join(dir)).unwrap() {
            let p = e.unwrap().path();
            assert!(checked.contains(&p), "unchecked file {}", p.display());
        }
    }
}

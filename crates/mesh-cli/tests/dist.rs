//! The binary installed on a machine: `cargo build --profile dist` makes one
//! small `mesh` (stripped, link-time optimised) that runs. Its size is
//! printed beside its target.

use std::path::Path;
use std::process::Command;

/// What a machine's copy may weigh.
const TARGET_BYTES: u64 = 20 * 1000 * 1000;

#[test]
fn the_dist_build_is_one_small_binary_that_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // A target directory of its own: the one running this test is locked
    // by the cargo running it.
    let target = root.join("target/dist-build");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "build",
            "--profile",
            "dist",
            "-p",
            "mesh-cli",
            "--bin",
            "mesh",
        ])
        .arg("--target-dir")
        .arg(&target)
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = target.join("dist/mesh");
    let bytes = std::fs::metadata(&bin).unwrap().len();
    println!(
        "dist binary: {:.1} MB (target under {:.0} MB) at {}",
        bytes as f64 / 1e6,
        TARGET_BYTES as f64 / 1e6,
        bin.display()
    );
    assert!(bytes < TARGET_BYTES, "{bytes} bytes");
    // Stripped: no symbol table left.
    let data = std::fs::read(&bin).unwrap();
    assert!(
        !data.windows(7).any(|w| w == b".symtab"),
        "the dist binary still has its symbol table"
    );
    let version = Command::new(&bin).arg("version").output().unwrap();
    assert!(version.status.success());
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("mesh "));
}

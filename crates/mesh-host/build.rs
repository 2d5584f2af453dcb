//! Builds `shim/env_shim.rs` into a static program the host bind-mounts
//! into containers whose environment holds a secret (see that file). It is
//! a program of its own, not a crate of the workspace: it must run in any
//! image, so it is linked statically (`crt-static`), which the workspace's
//! dynamically linked binaries are not.
//!
//! A toolchain that cannot link it statically (no static C library)
//! still builds the host; a container module with a secret in its
//! environment is then reported failed, naming why.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let source = "shim/env_shim.rs";
    println!("cargo:rerun-if-changed={source}");
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let shim = out.join("mesh-env-shim");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let target = std::env::var("TARGET").expect("cargo sets TARGET");
    let built = Command::new(rustc)
        .args(["--edition", "2021", "--crate-name", "mesh_env_shim"])
        .args([
            "-C",
            "opt-level=s",
            "-C",
            "panic=abort",
            "-C",
            "strip=symbols",
        ])
        .args(["-C", "target-feature=+crt-static", "--target", &target])
        .arg("-o")
        .arg(&shim)
        .arg(source)
        .output();
    match built {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            println!(
                "cargo:warning=the container env shim was not built (containers with a secret in their environment will not start): {}",
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .next()
                    .unwrap_or_default()
            );
            std::fs::write(&shim, b"").expect("OUT_DIR is writable");
        }
        Err(e) => {
            println!("cargo:warning=the container env shim was not built: {e}");
            std::fs::write(&shim, b"").expect("OUT_DIR is writable");
        }
    }
}

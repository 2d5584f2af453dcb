//! The systemd units in deploy/systemd: each verified by `systemd-analyze
//! verify` (a copy whose programs are the ones built and installed here),
//! and each `mesh` command line in them parsed by mesh itself.

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser as _;

fn units() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/systemd");
    let mut units: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "service"))
        .collect();
    units.sort();
    let names: Vec<_> = units
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "mesh-broker.service",
            "mesh-controller.service",
            "mesh-host.service"
        ]
    );
    units
}

/// The unit's `ExecStart=` line.
fn exec_start(text: &str) -> &str {
    text.lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart line")
}

#[test]
fn each_unit_passes_systemd_analyze_verify() {
    let Ok(out) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("systemd-analyze is not on this machine: the units are verified where it is");
        return;
    };
    assert!(out.status.success());
    let tmp = tempfile::tempdir().unwrap();
    let nats = mesh_testkit::nats_server_binary().unwrap();
    for unit in units() {
        let text = std::fs::read_to_string(&unit).unwrap();
        // The programs where this machine has them: verify checks that
        // each is executable.
        let here = text
            .replace(
                "/usr/local/bin/mesh ",
                &format!("{} ", env!("CARGO_BIN_EXE_mesh")),
            )
            .replace("/usr/local/bin/nats-server", &nats.display().to_string());
        let copy = tmp.path().join(unit.file_name().unwrap());
        std::fs::write(&copy, here).unwrap();
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&copy)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        // A key systemd does not know is only a warning: none is allowed.
        let about_it: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains(&*copy.file_name().unwrap().to_string_lossy()))
            .collect();
        assert!(
            out.status.success() && about_it.is_empty(),
            "{}: {}\n{stderr}",
            unit.display(),
            out.status
        );
    }
}

#[test]
fn each_mesh_command_line_in_the_units_parses() {
    for unit in units() {
        let text = std::fs::read_to_string(&unit).unwrap();
        let line = exec_start(&text);
        let mut words = line.split_whitespace();
        let program = words.next().unwrap();
        if !program.ends_with("/mesh") {
            assert!(line.contains("-c /var/lib/mesh/broker/nats.conf"), "{line}");
            continue;
        }
        // `$MESH_HOST_ARGS` is what a machine adds: empty by default.
        let argv: Vec<&str> = std::iter::once("mesh")
            .chain(words.filter(|w| !w.starts_with('$')))
            .collect();
        if let Err(e) = mesh_cli::Cli::try_parse_from(&argv) {
            panic!("{}: {argv:?}: {e}", unit.display());
        }
    }
}

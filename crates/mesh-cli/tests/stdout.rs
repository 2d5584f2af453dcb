//! Standard output itself failing under `mesh`: a reader that closed it, a
//! real `head -1`, and a full disk (`/dev/full`). A closed pipe is the reader
//! saying it has enough, so exit 0 and silence; a full disk is a failure,
//! exit 2 with one clean line; never a panic (101).

mod support;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use support::{examples, mesh_bin};

/// A manifest whose `check --format json` prints about a megabyte: far more
/// than a pipe holds, so a writer whose reader left must see EPIPE.
fn loud_catalogue(dir: &Path) -> PathBuf {
    let names: Vec<String> = (0..5_000).map(|i| format!("\"Bad{i}\"")).collect();
    let m = dir.join("m");
    std::fs::create_dir_all(&m).unwrap();
    std::fs::write(
        m.join("mesh.toml"),
        format!(
            "[module]\nname = \"m\"\n[events]\nemits = [{}]\n",
            names.join(", ")
        ),
    )
    .unwrap();
    m
}

/// The commands under test, each with the exit it has when its output is
/// read whole.
fn commands(dir: &Path) -> Vec<(Vec<String>, i32)> {
    let catalogue = examples().join("catalogue").display().to_string();
    let fleet = examples().join("fleet.toml").display().to_string();
    let loud = loud_catalogue(dir).display().to_string();
    let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    vec![
        (s(&["check", &catalogue]), 0),
        (s(&["check", "--format", "json", &loud]), 1),
        (s(&["check", &loud]), 1),
        (s(&["authority", "compose", "--catalogue", &catalogue]), 0),
        (
            s(&[
                "authority",
                "compose",
                "--catalogue",
                &catalogue,
                "--out",
                "-",
            ]),
            0,
        ),
        (
            s(&[
                "authority",
                "explain",
                "person_bob",
                "--catalogue",
                &catalogue,
            ]),
            0,
        ),
        // Loading the same fleet again records nothing and prints its summary.
        (s(&["fleet", "load", &fleet, "--catalogue", &catalogue]), 0),
        (s(&["--help"]), 0),
        (s(&["version"]), 0),
    ]
}

/// A store with the example fleet loaded, for the authority commands.
fn loaded_store(dir: &Path) -> String {
    let url = format!("sqlite://{}", dir.join("mesh.db").display());
    let out = Command::new(mesh_bin())
        .args(["fleet", "load"])
        .arg(examples().join("fleet.toml"))
        .arg("--catalogue")
        .arg(examples().join("catalogue"))
        .env("MESH_STORE", &url)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    url
}

fn mesh(dir: &Path, store: &str, args: &[String]) -> Command {
    let mut c = Command::new(mesh_bin());
    c.args(args).env("MESH_STORE", store).current_dir(dir);
    c
}

fn never_panicked(what: &str, o: &Output) {
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(101), "{what}: {stderr}");
    assert!(o.status.code().is_some(), "{what}: killed by a signal");
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
}

#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let store = loaded_store(dir.path());
    for (args, _) in commands(dir.path()) {
        let (reader, writer) = std::io::pipe().unwrap();
        // No reader at all: the first write fails with EPIPE.
        drop(reader);
        let o = mesh(dir.path(), &store, &args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        never_panicked(&format!("{args:?}"), &o);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&o.stderr), "", "{args:?}");
    }
}

#[test]
fn head_reading_one_line_ends_the_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let store = loaded_store(dir.path());
    for (args, exit) in commands(dir.path()) {
        let mut m = mesh(dir.path(), &store, &args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let head = Command::new("head")
            .arg("-1")
            .stdin(m.stdout.take().unwrap())
            .output()
            .unwrap();
        let mut stderr = String::new();
        m.stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let status = m.wait().unwrap();
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        // Output that fit in the pipe was all written before head left: the
        // command's own exit. Output that did not met a closed pipe: 0.
        let code = status.code();
        assert!(
            code == Some(0) || code == Some(exit),
            "{args:?}: exit {code:?}: {stderr}"
        );
        assert!(!stderr.contains("error:"), "{args:?}: {stderr}");
        assert_eq!(head.stdout.iter().filter(|b| **b == b'\n').count(), 1);
    }
}

#[test]
fn the_megabyte_into_head_meets_a_closed_pipe_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let loud = loud_catalogue(dir.path());
    let mut m = Command::new(mesh_bin())
        .args(["check", "--format", "json"])
        .arg(&loud)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let head = Command::new("head")
        .arg("-1")
        .stdin(m.stdout.take().unwrap())
        .output()
        .unwrap();
    let mut stderr = String::new();
    m.stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = m.wait().unwrap();
    assert_eq!(head.stdout, b"[\n");
    // Read whole it exits 1 (the manifest has errors): 0 means the closed
    // pipe was met and taken as the reader having enough.
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert_eq!(stderr, "");
}

#[test]
fn a_full_disk_under_stdout_is_exit_2_with_one_clean_line() {
    let dir = tempfile::tempdir().unwrap();
    let store = loaded_store(dir.path());
    for (args, _) in commands(dir.path()) {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let o = mesh(dir.path(), &store, &args)
            .stdout(full)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        never_panicked(&format!("{args:?}"), &o);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            stderr, "error: writing to standard output: no space left on device\n",
            "{args:?}"
        );
    }
}

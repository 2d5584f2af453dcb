//! `mesh check` as an operator runs it: the built binary, real files.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn catalogue() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/catalogue")
}

fn mesh(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(args)
        .output()
        .expect("run mesh")
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            fs::copy(e.path(), target).unwrap();
        }
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn the_example_catalogue_checks_clean() {
    let o = mesh(&["check", catalogue().to_str().unwrap()]);
    let out = stdout(&o);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("0 errors, 0 warnings"), "{out}");
}

#[test]
fn one_typo_in_a_copy_fails_with_its_location() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("catalogue");
    copy_dir(&catalogue(), &copy);
    let file = copy.join("git-server/mesh.toml");
    let text = fs::read_to_string(&file).unwrap();
    let line = 1 + text
        .lines()
        .position(|l| l.starts_with("protocol = "))
        .expect("git-server declares a protocol");
    fs::write(&file, text.replacen("protocol = ", "protocoll = ", 1)).unwrap();

    let o = mesh(&["check", copy.to_str().unwrap()]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    let at = format!("{}:{line}:1: error[unknown-field]", file.display());
    assert!(out.contains(&at), "expected `{at}` in:\n{out}");
    assert!(out.contains("did you mean `protocol`?"), "{out}");
    // The source line and a caret under the field.
    assert!(out.contains("protocoll = \"git\"\n"), "{out}");
    assert!(out.contains("| ^^^^^^^^^\n"), "{out}");

    let o = mesh(&["check", "--format", "json", copy.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json output");
    let d = json
        .as_array()
        .and_then(|a| a.iter().find(|d| d["kind"] == "unknown-field"))
        .expect("an unknown-field diagnostic");
    assert_eq!(d["severity"], "error");
    assert_eq!(d["file"], file.display().to_string());
    assert_eq!(d["line"], line);
    assert_eq!(d["col"], 1);
}

#[test]
fn warnings_alone_exit_zero() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("audit-log");
    fs::create_dir_all(&m).unwrap();
    fs::write(
        m.join("mesh.toml"),
        "[module]\nname = \"audit-log\"\n[events]\nconsumes = [\"watcher.changed\"]\n",
    )
    .unwrap();
    let o = mesh(&["check", dir.path().to_str().unwrap()]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("warning[unregistered-emitter]"), "{out}");
}

#[test]
fn a_path_with_no_manifest_is_not_success() {
    let dir = tempfile::tempdir().unwrap();
    let o = mesh(&["check", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no mesh.toml found"));
}

#[test]
fn overlapping_consumes_of_one_module_fail_at_the_narrower_entry() {
    // The server would refuse the module's one consumer (error 10138) and
    // the controller would not start: refused here instead.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("catalogue");
    copy_dir(&catalogue(), &copy);
    let file = copy.join("audit-log/mesh.toml");
    let text = fs::read_to_string(&file).unwrap();
    let text = text.replacen(
        "consumes = [",
        "consumes = [\n  \"git-server.repo-created\",",
        1,
    );
    let line = 1 + text
        .lines()
        .position(|l| l.contains("\"git-server.repo-created\""))
        .unwrap();
    fs::write(&file, text).unwrap();
    let o = mesh(&["check", copy.to_str().unwrap()]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    // The example already consumes `git-server.**`.
    let at = format!("{}:{line}:3: error[overlapping-consumes]", file.display());
    assert!(out.contains(&at), "expected `{at}` in:\n{out}");
    assert!(out.contains("inside the wider `git-server.**`"), "{out}");
    assert!(
        out.contains("drop the narrower `git-server.repo-created`"),
        "{out}"
    );
}

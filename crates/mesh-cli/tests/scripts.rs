//! The README's test command reports what the tests say: when `cargo test`
//! fails, `scripts/test` exits with its status, nothing filters it away
//! (L130). A `cargo` of the test's own, first on PATH, stands for a run
//! whose tests fail (running the suite inside itself would build it again).

use std::path::Path;
use std::process::Command;

fn scripts_test(exit: u8) -> (std::process::Output, String) {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let seen = tmp.path().join("args");
    let cargo = bin.join("cargo");
    std::fs::write(
        &cargo,
        format!(
            "#!/bin/sh\necho \"$@\" > {}\necho 'test result: FAILED. 0 passed; 1 failed'\nexit {exit}\n",
            seen.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path = std::env::join_paths(
        std::iter::once(bin).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let out = Command::new(root.join("scripts/test"))
        .args(["-p", "mesh-core"])
        .current_dir(&root)
        .env("PATH", path)
        .output()
        .unwrap();
    (out, std::fs::read_to_string(&seen).unwrap_or_default())
}

#[test]
fn the_test_command_exits_as_the_tests_do() {
    let (failed, args) = scripts_test(101);
    assert_eq!(
        failed.status.code(),
        Some(101),
        "{}",
        String::from_utf8_lossy(&failed.stderr)
    );
    assert_eq!(
        args.trim(),
        "test --workspace -p mesh-core",
        "its arguments passed on"
    );
    let (passed, _) = scripts_test(0);
    assert_eq!(
        passed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&passed.stderr)
    );
}

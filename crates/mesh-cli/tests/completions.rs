//! `mesh completions SHELL`: a script each shell reads, naming the commands.

use std::process::{Command, Output};

fn mesh(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(args)
        .output()
        .expect("run mesh")
}

#[test]
fn each_shell_gets_a_script_naming_the_subcommands() {
    for shell in ["bash", "zsh", "fish"] {
        let o = mesh(&["completions", shell]);
        assert!(
            o.status.success(),
            "{shell}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let script = String::from_utf8(o.stdout).unwrap();
        for sub in [
            "assign",
            "plan",
            "catalogue",
            "completions",
            "authority",
            "controller",
        ] {
            assert!(script.contains(sub), "{shell}: {sub} not in the script");
        }
    }
    // Each in its own shell's form.
    assert!(
        String::from_utf8(mesh(&["completions", "bash"]).stdout)
            .unwrap()
            .contains("complete -F")
    );
    assert!(
        String::from_utf8(mesh(&["completions", "zsh"]).stdout)
            .unwrap()
            .starts_with("#compdef mesh")
    );
    assert!(
        String::from_utf8(mesh(&["completions", "fish"]).stdout)
            .unwrap()
            .contains("complete -c mesh")
    );
}

#[test]
fn an_unknown_shell_is_a_usage_error_listing_the_known_ones() {
    let o = mesh(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bash") && err.contains("zsh") && err.contains("fish"),
        "{err}"
    );
}

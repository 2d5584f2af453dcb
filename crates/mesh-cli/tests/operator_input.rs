//! Bad operator input, one row per case, against the real binary: each must
//! exit as stated, say why and what to do instead, and lose, leak or panic
//! nothing (the shared rules are in `support`; the fleet file and store cases
//! are in `operator_input/fleet.rs`). Prints
//! `operator input: N cases, 0 panics, 0 losses, 0 leaks`.

#[path = "operator_input/fleet.rs"]
mod fleet;
mod support;

use support::{Case, Records, Setup, Tally};

/// The `--out` a compose case writes to, with the rest of its command line.
fn compose(name: &'static str, out: &'static str) -> Case {
    let mut c = Case::new(
        name,
        &[
            "authority",
            "compose",
            "--catalogue",
            "{catalogue}",
            "--out",
            out,
        ],
    );
    c.records = Records::Example;
    c
}

/// A compose case whose `--out` is refused: exit 2, naming what is there and
/// `--out -`.
fn refused_out(name: &'static str, out: &'static str, what: &'static str) -> Case {
    let mut c = compose(name, out);
    c.exit = 2;
    c.stderr = vec![what, "not a regular file", "left as it is", "`--out -`"];
    c
}

fn check(name: &'static str, manifest: String) -> Case {
    let mut c = Case::new(name, &["check", "{work}/m"]);
    c.setup = vec![Setup::File("m/mesh.toml", manifest.into_bytes())];
    c.exit = 1;
    c
}

fn explain(name: &'static str, principal: &'static str, records: Records) -> Case {
    let mut c = Case::new(
        name,
        &[
            "authority",
            "explain",
            principal,
            "--catalogue",
            "{catalogue}",
        ],
    );
    c.records = records;
    c.exit = 2;
    c
}

/// Cases that replace a device only if its guard is gone; the row after
/// them writes at /dev/null itself, so it runs only once they passed.
const DEVICE_GUARD: &str = "compose --out a character device";

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();

    let mut c = refused_out(
        "compose --out a FIFO",
        "fifo",
        "fifo is a FIFO (named pipe)",
    );
    c.setup = vec![Setup::Fifo("fifo")];
    cases.push(c);

    let mut c = refused_out("compose --out a symlink", "link", "link is a symbolic link");
    c.setup = vec![
        Setup::File("target.conf", b"keep me\n".to_vec()),
        Setup::Symlink("link", "target.conf"),
    ];
    cases.push(c);

    let mut c = refused_out(
        "compose --out a dangling symlink",
        "link",
        "a symbolic link",
    );
    c.setup = vec![Setup::Symlink("link", "nowhere.conf")];
    cases.push(c);

    let mut c = refused_out("compose --out DIR", "dir", "dir is a directory");
    c.setup = vec![Setup::File("dir/kept", b"kept\n".to_vec())];
    cases.push(c);

    let mut c = refused_out(DEVICE_GUARD, "null", "null is a character device");
    c.setup = vec![Setup::NullDevice("null")];
    cases.push(c);

    let mut c = refused_out("compose --out /dev/null", "/dev/null", "a character device");
    c.outside = vec!["/dev/null"];
    cases.push(c);

    let mut c = compose("compose --out an empty path", "");
    c.exit = 2;
    c.stderr = vec!["an empty path", "`-` for standard output"];
    cases.push(c);

    let mut c = compose("compose --out - prints the users file", "-");
    // The controller is a machine: named by its comment, admitted by nkey.
    c.stdout = vec!["accounts {", "# controller\n      {\n        nkey: \"U"];
    c.stderr = vec!["left out", "host_n4", "`mesh fleet load FILE` mints one"];
    c.prints_hashes = true;
    cases.push(c);

    let mut c = compose(
        "compose --out a new file in new dirs",
        "broker/conf/users.conf",
    );
    c.creates = vec!["broker/conf/users.conf"];
    c.stderr = vec!["wrote broker/conf/users.conf"];
    cases.push(c);

    // Every remedy names a command that exists.
    // A reader never makes a store: composing before any fleet was loaded
    // names the command that records one (and mints its credentials).
    let mut c = compose("compose before any store was made", "-");
    c.records = Records::None;
    c.exit = 2;
    c.stderr = vec!["no mesh store at", "`mesh fleet load FILE --catalogue DIR`"];
    cases.push(c);

    let mut c = explain("explain a node yet to enrol", "host_n4", Records::Example);
    c.exit = 0;
    c.stdout = vec![
        "credential: none",
        "`mesh fleet load FILE` mints one",
        "gets its own when it enrols",
    ];
    cases.push(c);

    let mut c = Case::new(
        "compose with a store path that is a directory",
        &[
            "authority",
            "compose",
            "--catalogue",
            "{catalogue}",
            "--store",
            "sqlite://{work}/db",
        ],
    );
    c.setup = vec![Setup::File("db/kept", b"kept\n".to_vec())];
    c.exit = 2;
    c.stderr = vec!["db is a directory, not a database file", "sqlite://PATH"];
    cases.push(c);

    let mut c = Case::new(
        "compose from a catalogue with errors",
        &["authority", "compose", "--catalogue", "{work}/m"],
    );
    c.setup = vec![Setup::File(
        "m/mesh.toml",
        b"[module]\nname = \"M\"\n".to_vec(),
    )];
    c.exit = 2;
    c.stdout = vec!["error[bad-name]"];
    c.stderr = vec!["the catalogue has 1 error", "`mesh check "];
    cases.push(c);

    // Terminal escapes in a line the source shows: an OSC title change and
    // a bell (TOML refuses them raw, so the line is shown).
    let mut c = check(
        "check a line with raw terminal escapes",
        "[module]\nname = \"m\"\n\u{1b}]0;pwned\u{7}x = 1\n".into(),
    );
    c.stdout = vec!["  3 | \\u{1b}]0;pwned\\u{7}x = 1\n"];
    cases.push(c);

    // A screen clear in a key the message quotes.
    let mut c = check(
        "check a key holding an escape",
        "[module]\nname = \"m\"\n[run]\ncommand = [\"m\"]\n\"co\\u001b[2Jmand\" = 1\n".into(),
    );
    c.stdout = vec!["unknown field `co\\u{1b}[2Jmand`"];
    cases.push(c);

    // An error quoting a path the operator gave, on stderr.
    let mut c = Case::new(
        "check a missing path whose name holds an escape",
        &["check", "{work}/\u{1b}[2Jnope"],
    );
    c.exit = 2;
    c.stderr = vec!["reading ", "/\\u{1b}[2Jnope"];
    cases.push(c);

    let mut c = Case::new(
        "check --format json of a manifest with terminal escapes",
        &["check", "--format", "json", "{work}/m"],
    );
    c.setup = vec![Setup::File(
        "m/mesh.toml",
        b"[module]\nname = \"m\"\n[run]\ncommand = [\"m\"]\n\"co\\u001b[2Jmand\" = 1\n".to_vec(),
    )];
    c.exit = 1;
    c.stdout = vec!["co\\u001b[2Jmand"];
    cases.push(c);

    let mut c = check(
        "check a 10 MB line",
        format!("[module]\nname = \"{}\"\n", "a".repeat(10_000_000)),
    );
    c.stdout = vec!["error[bad-name]", "…", "checked 1 manifest: 1 error"];
    c.max_output = 4 * 1024;
    cases.push(c);

    let names: Vec<String> = (0..5_000).map(|i| format!("\"Bad{i}\"")).collect();
    let mut c = check(
        "check 5,000 errors on one line",
        format!(
            "[module]\nname = \"m\"\n[events]\nemits = [{}]\n",
            names.join(", ")
        ),
    );
    c.stdout = vec![
        "... and 4,950 more errors in ",
        "checked 1 manifest: 5,000 errors",
    ];
    c.max_output = 64 * 1024;
    cases.push(c);

    // No mesh anywhere: a reader and a writer alike say how to point at
    // one, and make nothing.
    for (name, args) in [
        ("status with no mesh found", &["status"][..]),
        ("nodes with no mesh found", &["nodes"][..]),
        ("assign with no mesh found", &["assign", "x", "y"][..]),
    ] {
        let mut c = Case::new(name, args);
        c.store_env = false;
        c.nothing_new = true;
        c.exit = 2;
        c.stderr = vec![
            "no mesh found: no --dir given, MESH_DIR is not set, and no .mesh directory in ",
            "/work or above it",
            "run `mesh up` or `mesh init` here",
            "--dir DIR or MESH_DIR=DIR",
        ];
        cases.push(c);
    }
    // A writer pointed at a store that is not there makes none.
    for (name, args) in [
        ("assign to a missing store", &["assign", "echo", "n1"][..]),
        (
            "register into a missing store",
            &["catalogue", "register", "{catalogue}"][..],
        ),
        (
            "person add to a missing store",
            &["person", "add", "ada", "--tools", "*"][..],
        ),
        (
            "node forget in a missing store",
            &["node", "forget", "n1"][..],
        ),
    ] {
        let mut c = Case::new(name, args);
        c.nothing_new = true;
        c.exit = 2;
        c.stderr = vec![
            "no mesh store at sqlite://",
            "`mesh init` or `mesh up` makes a mesh",
            "--dir DIR, MESH_DIR=DIR or --store URL",
        ];
        cases.push(c);
    }

    let mut c = explain("explain a name without its prefix", "bob", Records::Example);
    c.stderr = vec![
        "no principal \"bob\"",
        "did you mean person_bob?",
        "person_<person>",
        "`mesh fleet load FILE`",
    ];
    cases.push(c);

    let mut c = explain("explain a typo", "module_n1_audit-lg", Records::Example);
    c.stderr = vec![
        "did you mean module_n1_audit-log?",
        "module_<node>_<module>",
    ];
    cases.push(c);

    let mut c = explain(
        "explain an unknown name at 2,000 nodes",
        "host_node",
        Records::Nodes(2_000),
    );
    c.stderr = vec![
        "no principal \"host_node\"",
        "did you mean one of host_node0",
        "host_<node>",
    ];
    c.max_output = 4 * 1024;
    cases.push(c);

    let mut c = explain(
        "explain far from any name at 2,000 nodes",
        "zzzzzzzz",
        Records::Nodes(2_000),
    );
    c.stderr = vec!["no principal \"zzzzzzzz\" in this mesh (principals are named controller"];
    c.max_output = 4 * 1024;
    cases.push(c);

    // Assignments: a typo is answered with the name meant, an unassignment
    // of what is not assigned with what is.
    let mut c = Case::new("assign a module typo", &["assign", "audit-lg", "n1"]);
    c.records = Records::Example;
    c.exit = 2;
    c.stderr = vec!["no module \"audit-lg\" registered; did you mean audit-log?"];
    cases.push(c);

    let mut c = Case::new("assign to a node typo", &["assign", "notifier", "n11"]);
    c.records = Records::Example;
    c.exit = 2;
    c.stderr = vec!["no node \"n11\" recorded; did you mean n1?"];
    cases.push(c);

    let mut c = Case::new("assign far from any module", &["assign", "zzzzzz", "n1"]);
    c.records = Records::Example;
    c.exit = 2;
    c.stderr = vec![
        "no module \"zzzzzz\" registered",
        "`mesh catalogue register DIR`",
    ];
    cases.push(c);

    let mut c = Case::new(
        "unassign from a node typo",
        &["unassign", "notifier", "n22"],
    );
    c.records = Records::Example;
    c.exit = 2;
    c.stderr = vec!["no node \"n22\" recorded; did you mean n2?"];
    cases.push(c);

    let mut c = Case::new("unassign a module typo", &["unassign", "notifer", "n2"]);
    c.records = Records::Example;
    c.exit = 2;
    c.stderr = vec!["no module \"notifer\" registered; did you mean notifier?"];
    cases.push(c);

    let mut c = Case::new(
        "unassign what is not assigned",
        &["unassign", "notifier", "n3"],
    );
    c.records = Records::Example;
    c.exit = 2;
    c.stderr = vec![
        "notifier is not assigned to n3; n3 runs firewall-admin, nftables",
        "`mesh modules` lists every assignment",
    ];
    cases.push(c);

    cases
}

#[test]
fn bad_operator_input_loses_leaks_and_panics_nothing() {
    let mut tally = Tally::default();
    let mut device_guard_held = false;
    for case in cases() {
        if case.outside.iter().any(|p| p.starts_with("/dev/")) && !device_guard_held {
            // Without the guard this row would replace the system's device.
            let root = unsafe { libc::geteuid() } == 0;
            if root {
                tally.skipped.push(case.name);
                continue;
            }
        }
        let v = support::run(&case);
        if case.name == DEVICE_GUARD {
            device_guard_held = !v.skipped && v.passed();
        }
        tally.add(&case, &v);
    }
    // The fleet file and the store: the other half of what an operator writes.
    fleet::run(&mut tally);
    let summary = tally.summary();
    println!("{summary}");
    assert!(
        tally.failures.is_empty(),
        "{summary}\n{}",
        tally.failures.join("\n")
    );
    assert_eq!(
        (tally.panics, tally.losses, tally.leaks),
        (0, 0, 0),
        "{summary}"
    );
    assert!(tally.cases >= 15, "{summary}");
}

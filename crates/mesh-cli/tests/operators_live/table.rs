//! Every operation × every role, as persons on machines of their own: each
//! `mesh` command runs in a mount namespace where the mesh's directory is
//! an empty tmpfs (it cannot read the controller's keys or the store), its
//! mesh found only by the context `mesh login` wrote in its own home.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mesh_core::operation::{Operation, Role};

use super::harness::{self, Mesh};

/// A person's machine: their home (cwd, config home, key) and what is
/// hidden from every command they run.
pub struct Machine {
    pub person: String,
    pub role: Role,
    pub home: tempfile::TempDir,
    hidden: PathBuf,
}

impl Machine {
    /// `program args…` run as on this machine: the mesh's directory hidden
    /// under an empty tmpfs in a mount namespace of its own.
    pub fn run(&self, program: &str, args: &[&str]) -> Output {
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(r#"mount -t tmpfs tmpfs "$1" && shift && exec "$@""#)
            .arg("sh")
            .arg(&self.hidden)
            .arg(program)
            .args(args);
        at_home(&mut cmd, self.home.path()).output().unwrap()
    }

    pub fn mesh(&self, args: &[&str]) -> Output {
        self.run(harness::mesh_bin(), args)
    }

    pub fn path(&self, file: &str) -> String {
        self.home.path().join(file).to_str().unwrap().to_string()
    }
}

pub use super::harness::at_home;

/// A person with `role`: their key made on their machine, recorded by the
/// mesh's administrator (on the controller's machine), logged in there.
pub fn machine(mesh: &Mesh, person: &str, role: Role) -> Machine {
    let m = Machine {
        person: person.to_string(),
        role,
        home: tempfile::tempdir().unwrap(),
        hidden: mesh.tmp.path().to_path_buf(),
    };
    // A catalogue of their own: one module, named for them.
    let manifest = m
        .home
        .path()
        .join(format!("catalogue/note-{person}/mesh.toml"));
    std::fs::create_dir_all(manifest.parent().unwrap()).unwrap();
    std::fs::write(
        &manifest,
        format!(
            "[module]\nname = \"note-{person}\"\ndescription = \"A module registered from {person}'s machine\"\n\n[run]\ncommand = [\"${{artifact:mesh-echo}}\"]\n"
        ),
    )
    .unwrap();
    // An artifact of theirs: more than two chunks, bytes of their own.
    let bytes: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ person.len() as u8)
        .collect();
    std::fs::write(m.path("artifact.bin"), bytes).unwrap();
    // Recorded by the admin with a role and no key: a one-time login token
    // alone on stdout, handed over as a file.
    let out = mesh.mesh(&["person", "add", person, "--role", role.as_str()]);
    assert!(out.status.success(), "{}", harness::out_text(&out));
    let token = String::from_utf8(out.stdout).unwrap();
    assert!(token.starts_with("meshp1."), "{token}");
    std::fs::write(m.path("login.token"), &token).unwrap();
    // On their machine the key is made, and only its public half leaves.
    let out = m.run(
        "sh",
        &[
            "-c",
            &format!("exec {} login < login.token", harness::mesh_bin()),
        ],
    );
    assert!(out.status.success(), "login: {}", harness::out_text(&out));
    let key = m.home.path().join(format!("config/mesh/{person}.seed"));
    let mode = std::fs::metadata(&key).map(|m| m.permissions().mode() & 0o777);
    assert_eq!(mode.ok(), Some(0o600), "{}", key.display());
    // Spent: the same token again (as another context) is refused.
    let again = m.run(
        "sh",
        &[
            "-c",
            &format!(
                "exec {} login --name again < login.token",
                harness::mesh_bin()
            ),
        ],
    );
    assert!(!again.status.success(), "a login token was spent twice");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("connecting with the login token"),
        "{}",
        harness::out_text(&again)
    );
    m
}

/// Whether a command's output and the records show its effect.
type Effect = Box<dyn Fn(&Mesh, &str) -> Result<(), String>>;

/// `person add NAME --role ROLE --nkey KEY` on the controller's machine:
/// the `mesh login` arguments it prints, with the seed file's path.
pub fn recorded(mesh: &Mesh, person: &str, role: &str, key: &str, seed: &str) -> Vec<String> {
    let said = harness::ok(
        mesh,
        &["person", "add", person, "--role", role, "--nkey", key],
    );
    said.lines()
        .find_map(|l| l.strip_prefix("on their machine: mesh "))
        .expect("person add says how to log in")
        .replace("SEED_FILE", seed)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// What each operation is asked with, for person `p`, and what shows it
/// took effect (its output, then the records as the controller's machine
/// reads them).
pub struct Row {
    pub op: Operation,
    pub args: Vec<String>,
    pub took_effect: Effect,
}

fn row(
    op: Operation,
    args: &[&str],
    took_effect: impl Fn(&Mesh, &str) -> Result<(), String> + 'static,
) -> Row {
    Row {
        op,
        args: args.iter().map(|s| s.to_string()).collect(),
        took_effect: Box::new(took_effect),
    }
}

fn starts(out: &str, prefix: &str) -> Result<(), String> {
    if out.starts_with(prefix) {
        Ok(())
    } else {
        Err(format!("expected output starting {prefix:?}, got {out:?}"))
    }
}

fn local_json(mesh: &Mesh, args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&harness::ok(mesh, args)).unwrap()
}

/// The table for person `p` (names of their own, so every role's rows
/// run after one another).
pub fn rows(m: &Machine, mesh: &Mesh) -> Vec<Row> {
    let p = m.person.clone();
    // The broker "moved" where it is: recorded and declared, nothing
    // restarted, so the rows after it run on the same bus.
    let port = mesh.port().to_string();
    let (secret, node, other) = (format!("s-{p}"), format!("x-{p}"), format!("p-{p}"));
    let value = m.path("value");
    let (s1, s2, n1, n2, n3, o1, o2) = (
        secret.clone(),
        secret.clone(),
        node.clone(),
        node.clone(),
        node.clone(),
        other.clone(),
        other.clone(),
    );
    vec![
        row(
            Operation::Status,
            &["status", "--output", "json"],
            |_, out| {
                let v: serde_json::Value = serde_json::from_str(out).map_err(|e| e.to_string())?;
                (v["controller"]["role"] == "active" && v["nodes"]["ready"] == 1)
                    .then_some(())
                    .ok_or(format!("status: {v}"))
            },
        ),
        row(
            Operation::Nodes,
            &["nodes", "--output", "json"],
            |_, out| {
                out.contains("\"node\": \"n1\"")
                    .then_some(())
                    .ok_or(out.to_string())
            },
        ),
        row(
            Operation::Modules,
            &["modules", "--output", "json"],
            |_, out| out.contains("ticker").then_some(()).ok_or(out.to_string()),
        ),
        row(
            Operation::Plan,
            &["plan", "assign", "echo", "n1"],
            |mesh, out| {
                starts(
                    out,
                    "plan: assign echo to n1\ndeclarations:\n  node n1:\n    start  echo",
                )?;
                // Planned, not made.
                let rows = local_json(mesh, &["modules", "--output", "json"]);
                (!rows.to_string().contains("\"echo\""))
                    .then_some(())
                    .ok_or(format!("a plan assigned echo: {rows}"))
            },
        ),
        row(
            Operation::Logs,
            &["logs", "ticker", "--lines", "3"],
            |_, out| {
                out.contains("mesh-ticker: tick")
                    .then_some(())
                    .ok_or(out.to_string())
            },
        ),
        row(
            Operation::Events,
            &[
                "events",
                "tail",
                "ticker.tick",
                "--all",
                "--count",
                "2",
                "--timeout",
                "10s",
            ],
            |_, out| {
                (out.lines().count() == 2 && out.contains("mesh.mod.ticker.event.tick"))
                    .then_some(())
                    .ok_or(out.to_string())
            },
        ),
        // The table makes no deployment: the read answers that there is none.
        row(Operation::Deployments, &["deployments"], |_, out| {
            starts(out, "no deployment recorded")
        }),
        row(Operation::Assign, &["assign", "echo", "n1"], |mesh, out| {
            starts(out, "assigned echo to n1")?;
            let rows = local_json(mesh, &["modules", "--output", "json"]);
            rows.as_array()
                .unwrap()
                .iter()
                .any(|r| r["module"] == "echo" && r["node"] == "n1")
                .then_some(())
                .ok_or(format!("echo not assigned: {rows}"))
        }),
        row(
            Operation::Unassign,
            &["unassign", "echo", "n1"],
            |mesh, out| {
                starts(out, "unassigned echo from n1")?;
                let rows = local_json(mesh, &["modules", "--output", "json"]);
                (!rows
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r["module"] == "echo" && r["node"] == "n1"))
                .then_some(())
                .ok_or(format!("echo still assigned: {rows}"))
            },
        ),
        row(
            Operation::SecretSet,
            &["secret", "set", &secret, "--from-file", &value],
            move |mesh, out| {
                starts(out, &format!("set secret {s1}"))?;
                let list = harness::ok(mesh, &["secret", "list", "--output", "json"]);
                list.contains(&s1).then_some(()).ok_or(list)
            },
        ),
        row(
            Operation::SecretRotate,
            &["secret", "rotate", &secret, "--from-file", &value],
            {
                let secret = secret.clone();
                move |_, out| starts(out, &format!("rotated secret {secret}"))
            },
        ),
        row(
            Operation::SecretRemove,
            &["secret", "remove", &secret],
            move |mesh, out| {
                starts(out, &format!("removed secret {s2}"))?;
                let list = harness::ok(mesh, &["secret", "list", "--output", "json"]);
                (!list.contains(&s2)).then_some(()).ok_or(list)
            },
        ),
        row(
            Operation::Audit,
            &["audit", "--output", "json"],
            |_, out| {
                serde_json::from_str::<Vec<serde_json::Value>>(out)
                    .map(|_| ())
                    .map_err(|e| format!("{e}: {out}"))
            },
        ),
        row(
            Operation::NodeAdd,
            &["node", "add", &node],
            move |mesh, out| {
                starts(out, "mesh2.")?;
                mesh.nodes()
                    .iter()
                    .any(|r| r["node"] == n1.as_str())
                    .then_some(())
                    .ok_or(format!("{n1} not recorded"))
            },
        ),
        row(
            Operation::NodeSet,
            &["node", "set", &node, "--address", "10.9.9.9"],
            move |mesh, out| {
                starts(out, &format!("set node {n2}"))?;
                let nodes = mesh.nodes();
                nodes
                    .iter()
                    .any(|r| r["node"] == n2.as_str() && r["address"] == "10.9.9.9")
                    .then_some(())
                    .ok_or(format!("{nodes:?}"))
            },
        ),
        row(
            Operation::NodeForget,
            &["node", "forget", &node],
            move |mesh, out| {
                starts(out, &format!("forgot node {n3}"))?;
                (!mesh.nodes().iter().any(|r| r["node"] == n3.as_str()))
                    .then_some(())
                    .ok_or(format!("{n3} still recorded"))
            },
        ),
        row(
            Operation::PersonAdd,
            &["person", "add", &other, "--role", "viewer"],
            move |mesh, out| {
                // A role and no key: their login token, made by the
                // controller, alone on stdout.
                starts(out, "meshp1.")?;
                let out = mesh.mesh(&["authority", "explain", &format!("person_{o1}")]);
                out.status
                    .success()
                    .then_some(())
                    .ok_or(format!("person_{o1} is no principal"))
            },
        ),
        row(
            Operation::PersonRemove,
            &["person", "remove", &other],
            move |mesh, out| {
                starts(out, &format!("person {o2} removed"))?;
                let out = mesh.mesh(&["authority", "explain", &format!("person_{o2}")]);
                (!out.status.success())
                    .then_some(())
                    .ok_or(format!("person_{o2} is still a principal"))
            },
        ),
        row(
            Operation::ArtifactPut,
            &[
                "artifact",
                "put",
                &m.path("artifact.bin"),
                // A module the table assigns nowhere: its newest version
                // (this upload's) is pinned by no assignment of the table.
                "--module",
                "greeter",
                "--name",
                &format!("extra-{p}"),
            ],
            {
                let name = format!("extra-{p}");
                move |mesh, out| {
                    starts(out, &format!("put artifact-store://greeter/{name}@sha256:"))?;
                    let list = harness::ok(mesh, &["artifact", "list", "--module", "greeter"]);
                    list.contains(name.as_str()).then_some(()).ok_or(list)
                }
            },
        ),
        row(Operation::Build, &["build", "hello"], |_, out| {
            starts(out, "queued build ")?;
            out.contains(" of hello@HEAD")
                .then_some(())
                .ok_or(out.to_string())
        }),
        row(
            Operation::Register,
            &["catalogue", "register", "catalogue"],
            {
                let module = format!("note-{p}");
                move |mesh, out| {
                    starts(out, &format!("registered 1 module(s): {module}"))?;
                    let registered = harness::ok(mesh, &["catalogue", "graph"]);
                    registered
                        .contains(module.as_str())
                        .then_some(())
                        .ok_or(registered)
                }
            },
        ),
        row(
            Operation::BrokerSetAddress,
            &["broker", "set-address", "--port", &port],
            {
                let port = port.clone();
                move |_, out| starts(out, &format!("broker addresses: tls://127.0.0.1:{port}"))
            },
        ),
    ]
}

/// The operations the table covers, in its order.
pub fn covered(m: &Machine, mesh: &Mesh) -> Vec<Operation> {
    rows(m, mesh).iter().map(|r| r.op).collect()
}

/// Runs `r` as `m`: allowed, it took effect; forbidden, the server
/// refused the publish on the person's own subject for it and the CLI
/// named the role it takes. A description of what went wrong, if anything.
pub fn check(mesh: &Mesh, m: &Machine, r: &Row) -> Option<String> {
    let args: Vec<&str> = r.args.iter().map(String::as_str).collect();
    let out = m.mesh(&args);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    );
    let what = format!("{} as {} ({})", r.op, m.person, m.role);
    if m.role.allows(r.op) {
        if !out.status.success() {
            return Some(format!("{what}: refused: {stderr}"));
        }
        return (r.took_effect)(mesh, &stdout)
            .err()
            .map(|e| format!("{what}: no effect: {e}"));
    }
    // An artifact's bytes go first, to the person's uploads: refused there.
    let subject = match r.op {
        Operation::ArtifactPut => format!("mesh.upload.{}.", m.person),
        op => format!("mesh.controller.op.{}.{op}: ", m.person),
    };
    let refusal = format!(
        "person {} may not ask for `{}` (it takes the {} role",
        m.person,
        r.op,
        r.op.role()
    );
    let said = stderr.contains(&format!("the broker refused publishing to {subject}"));
    if out.status.success() || !said || !stderr.contains(&refusal) {
        return Some(format!(
            "{what}: expected the server's refusal, got {:?}: {stdout}{stderr}",
            out.status.code()
        ));
    }
    None
}

/// Whether a file of the mesh's directory is out of a machine's reach.
pub fn hidden_from(m: &Machine, file: &Path) -> bool {
    let seen = m.run("cat", &[file.to_str().unwrap()]);
    !seen.status.success()
}

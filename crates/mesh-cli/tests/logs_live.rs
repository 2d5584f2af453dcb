//! `mesh logs`, live: a real controller, two real `mesh host` processes on
//! a permissioned TLS bus, the example `echo` module on the second node.
//! The log is read over the bus from n2's host as the controller, followed
//! while the module writes, and refused where it must be.

#[path = "join_live/harness.rs"]
mod harness;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use harness::{Backend, Mesh, mesh_bin, wait_until};

const LONG: Duration = Duration::from_secs(60);

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `mesh logs ARGS` against the mesh: (stdout, stderr), success asserted
/// either way.
fn logs(mesh: &Mesh, args: &[&str], ok: bool) -> (String, String) {
    let mut all = vec!["logs"];
    all.extend(args);
    let out = mesh.mesh(&all);
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.success(),
        ok,
        "mesh logs {args:?}: stdout {stdout}\nstderr {stderr}"
    );
    (stdout, stderr)
}

/// The follow process, killed when dropped.
struct Follow {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Drop for Follow {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Follow {
    fn start(mesh: &Mesh, args: &[&str]) -> Follow {
        let mut child = Command::new(mesh_bin())
            .arg("logs")
            .args(args)
            .args([
                "--dir",
                mesh.dir.to_str().unwrap(),
                "--store",
                &mesh.store_url,
            ])
            .env_remove("MESH_STORE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Follow { child, lines }
    }

    /// The printed lines up to and including the first holding `needle`.
    fn until(&self, needle: &str) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            match self.lines.recv_timeout(LONG) {
                Ok(l) => {
                    let done = l.contains(needle);
                    seen.push(l);
                    if done {
                        return seen;
                    }
                }
                Err(e) => panic!("--follow never printed {needle:?} ({e}); it printed {seen:?}"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_on_another_node_is_read_and_followed_over_the_bus() {
    let (mesh, _hosts) = Mesh::with_hosts(Backend::Sqlite, &["n1", "n2"]).await;
    mesh.assign("echo", "n2", true);
    let dir = mesh.module_dir("n2", "echo");
    let on_disk = || std::fs::read_to_string(dir.join("log")).unwrap_or_default();
    assert!(
        wait_until(LONG, || on_disk().contains("mesh-echo: emitted started")),
        "echo never started on n2; its log: {}",
        on_disk()
    );

    // The last lines, exactly as the file on n2 ends. The node is found
    // from the assignments when it is not named.
    let (out, _) = logs(&mesh, &["echo", "--node", "n2", "--lines", "2"], true);
    let file = on_disk();
    let last: Vec<&str> = file.lines().rev().take(2).collect::<Vec<_>>();
    assert_eq!(out.lines().rev().collect::<Vec<_>>(), last, "{out}");
    assert!(out.ends_with("mesh-echo: emitted started\n"), "{out}");
    let (found, _) = logs(&mesh, &["echo", "--lines", "5"], true);
    assert_eq!(
        found.lines().count(),
        file.lines().count().min(5),
        "{found}"
    );
    assert!(found.contains("connected to the bus as module echo on node n2"));

    // Following: a line the module writes after the command started.
    let follow = Follow::start(&mesh, &["echo", "--node", "n2", "--follow", "--lines", "1"]);
    follow.until("mesh-echo: emitted started");
    let addr = std::fs::read_to_string(dir.join("work/echo.addr")).unwrap();
    let mut tcp = TcpStream::connect(addr.trim()).unwrap();
    let said = "a line sent after --follow began";
    tcp.write_all(format!("{said}\n").as_bytes()).unwrap();
    let mut answer = [0u8; 64];
    let n = tcp.read(&mut answer).unwrap();
    assert!(answer[..n].starts_with(b"echo: "), "the module answered");
    let news = follow.until(&format!("emitted heard ({} bytes", said.len()));
    assert_eq!(news.len(), 1, "only what is new: {news:?}");
    drop(follow);

    // What is no logs request is answered as such, and the host goes on.
    let observer = mesh.observer().await;
    let subject = mesh_core::subjects::host_logs(&mesh_core::names::Name::new("n2").unwrap());
    for (bad, says) in [
        (&b"{nope"[..], "is not JSON"),
        (br#"{"module": "../../etc/passwd"}"#, "not a logs request"),
        (br#"{"module": "echo", "lines": 99999}"#, "at most 10000"),
    ] {
        let answer = observer.request(subject.clone(), bad.into()).await.unwrap();
        match mesh_core::tool::parse_reply(&answer.payload).unwrap() {
            mesh_core::tool::ToolReply::Error(e) => assert!(e.contains(says), "{e}"),
            ok => panic!("{:?} answered {ok:?}", String::from_utf8_lossy(bad)),
        }
    }

    // Refusals name what is wrong and what is there.
    let (_, err) = logs(&mesh, &["ecko", "--node", "n2"], false);
    assert!(
        err.contains(
            "node n2: module ecko is not assigned to node n2 (echo is); did you mean echo?"
        ),
        "{err}"
    );
    let (_, err) = logs(&mesh, &["ecko"], false);
    assert!(
        err.contains("module ecko is assigned to no node; did you mean echo (on n2)?"),
        "{err}"
    );
    let (_, err) = logs(&mesh, &["echo", "--node", "n9"], false);
    assert!(
        err.contains("no host answered for node n9 within 5s; is it running? (mesh nodes)"),
        "{err}"
    );

    // The grants behind it, with their causes, as explain shows them.
    let explain = |who: &str| {
        let out = Command::new(mesh_bin())
            .args(["authority", "explain", who, "--catalogue"])
            .arg(Mesh::examples())
            .args(["--store", &mesh.store_url])
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "explain {who}: {stderr}");
        stdout
    };
    let host = explain("host_n2");
    assert!(host.contains("mesh.host.n2.tool.logs"), "{host}");
    assert!(host.contains("serves its modules' logs"), "{host}");
    assert!(!host.contains("mesh.host.n1"), "{host}");
    let controller = explain("controller");
    assert!(controller.contains("mesh.host.*.tool.logs"), "{controller}");
}

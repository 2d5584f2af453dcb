//! The container driver's engine side against real Podman: an image built
//! here (a static probe program, `FROM scratch`) saved as an OCI archive,
//! loaded, and run through `run_argv` as the process driver would run it.
//!
//! Every test names its containers after a node of its own (the test
//! process's pid in it, so concurrent runs never meet), removes them all
//! when it ends, even by a panic, and checks none is left.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use mesh_core::names::Name;
use mesh_host::driver::container::{
    ContainerSpec, Image, Ulimits, container_name, load_archive, remove_others, require_engine,
    run_argv, stop,
};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

/// The probe: each argument a step. `env NAME`, `read PATH`, `write PATH`,
/// `limits`, `trap` (exit 0 on SIGTERM), `ignore` (ignore SIGTERM), `sleep`
/// (print `sleeping`, then wait for ever); anything else is echoed.
const PROBE_C: &str = r#"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
static void on_term(int s) { (void)s; static const char m[] = "got SIGTERM\n"; write(1, m, sizeof m - 1); _exit(0); }
int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "env") && i + 1 < argc) { const char *v = getenv(argv[++i]); printf("env %s=%s\n", argv[i], v ? v : "(unset)"); }
    else if (!strcmp(a, "read") && i + 1 < argc) { char b[256]; int fd = open(argv[++i], O_RDONLY); ssize_t n = fd < 0 ? 0 : read(fd, b, 255); b[n < 0 ? 0 : n] = 0; printf("read %s: %s\n", argv[i], b); }
    else if (!strcmp(a, "write") && i + 1 < argc) { int fd = open(argv[++i], O_WRONLY | O_APPEND); printf("write %s: %s\n", argv[i], fd < 0 ? strerror(errno) : "ok"); }
    else if (!strcmp(a, "limits")) { struct rlimit r; getrlimit(RLIMIT_NOFILE, &r); printf("nofile %llu:%llu\n", (unsigned long long)r.rlim_cur, (unsigned long long)r.rlim_max); getrlimit(RLIMIT_NPROC, &r); printf("nproc %llu:%llu\n", (unsigned long long)r.rlim_cur, (unsigned long long)r.rlim_max); }
    else if (!strcmp(a, "trap")) signal(SIGTERM, on_term);
    else if (!strcmp(a, "ignore")) signal(SIGTERM, SIG_IGN);
    else if (!strcmp(a, "sleep")) { printf("sleeping\n"); for (;;) pause(); }
    else printf("%s\n", a);
  }
  return 0;
}
"#;

struct Fixture {
    engine: PathBuf,
    /// Holds the probe and its Containerfile.
    dir: PathBuf,
    /// The probe image as an OCI archive.
    archive: PathBuf,
}

/// Builds the probe once per test binary: compiled statically and put in
/// an image with `podman build --timestamp 0`, so the same probe is the same
/// image id run after run (one image in the engine's store, which later and
/// concurrent runs share and never remove), saved as an OCI archive.
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let engine = match require_engine() {
            Ok(engine) => engine,
            Err(e) => panic!("install podman (scripts/setup): {e}"),
        };
        let dir = work_dir();
        std::fs::write(dir.join("probe.c"), PROBE_C).unwrap();
        let status = std::process::Command::new("cc")
            .args(["-static", "-Os", "-s", "-o"])
            .arg(dir.join("probe"))
            .arg(dir.join("probe.c"))
            .status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "cc -static could not build the probe (needs a C compiler and libc6-dev)"
        );
        std::fs::write(
            dir.join("Containerfile"),
            "FROM scratch\nCOPY probe /probe\nENTRYPOINT [\"/probe\"]\n",
        )
        .unwrap();
        let tag = "localhost/mesh-test-probe:latest";
        build(&engine, &dir, tag, 0);
        let archive = dir.join("probe.tar");
        save(&engine, tag, &archive);
        Fixture {
            engine,
            dir,
            archive,
        }
    })
}

/// This run's directory under cargo's target tmp dir; those of runs no
/// longer alive are removed first, so none piles up.
fn work_dir() -> PathBuf {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let prefix = "container-engine-";
    if let Ok(entries) = std::fs::read_dir(root) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let pid = name.to_str().and_then(|n| n.strip_prefix(prefix));
            if pid.is_some_and(|pid| !Path::new("/proc").join(pid).exists()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let dir = root.join(format!("{prefix}{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `podman build` of the probe's directory; returns the image id.
fn build(engine: &Path, dir: &Path, tag: &str, timestamp: u64) -> String {
    let timestamp = timestamp.to_string();
    let dir = dir.to_str().unwrap();
    // No intermediate image of the COPY step is kept: one image per build.
    let args = [
        "build",
        "-q",
        "--layers=false",
        "--timestamp",
        &timestamp,
        "-t",
        tag,
        dir,
    ];
    podman_ok(engine, &args).trim().to_string()
}

fn save(engine: &Path, image: &str, archive: &Path) {
    let archive = archive.to_str().unwrap();
    podman_ok(
        engine,
        &["save", "--format", "oci-archive", "-o", archive, image],
    );
}

fn podman(engine: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(engine)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("could not run {} {args:?}: {e}", engine.display()))
}

fn podman_ok(engine: &Path, args: &[&str]) -> String {
    let out = podman(engine, args);
    assert!(
        out.status.success(),
        "podman {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn name(s: &str) -> Name {
    Name::new(s).unwrap()
}

/// A node no other test or concurrent run uses.
fn node(test: &str) -> Name {
    name(&format!("t{}-{test}", std::process::id()))
}

/// The names of the containers labelled with `node`.
fn containers_of(engine: &Path, node: &Name) -> Vec<String> {
    let filter = format!("label=mesh.node={node}");
    let out = podman_ok(
        engine,
        &["ps", "-a", "--filter", &filter, "--format", "{{.Names}}"],
    );
    let mut names: Vec<String> = out.lines().map(String::from).collect();
    names.sort();
    names
}

fn exists(engine: &Path, container: &str) -> bool {
    podman(engine, &["container", "exists", container])
        .status
        .success()
}

/// The engine's state of `container` (`running`, `initialized`, …), or ""
/// when there is none.
fn state(engine: &Path, container: &str) -> String {
    let format = "--format={{.State.Status}}";
    let out = podman(engine, &["container", "inspect", format, container]);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Waits until the engine has recorded `container` as running. Its process
/// runs (and prints) before that: a signal to the client in between is not
/// forwarded (see `a_client_ended_while_starting_leaves_nothing_stop_misses`).
async fn wait_running(engine: &Path, container: &str) {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let state = state(engine, container);
        if state == "running" {
            return;
        }
        assert!(Instant::now() < until, "{container} is {state:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The processes with `arg` in their argv (a zombie has none: it is gone).
fn processes_with_arg(arg: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == arg.as_bytes()))
        })
        .collect()
}

/// Waits (a little) until no process has `arg` in its argv.
async fn processes_gone(arg: &str) -> Vec<u32> {
    let until = Instant::now() + Duration::from_secs(3);
    loop {
        let left = processes_with_arg(arg);
        if left.is_empty() || Instant::now() >= until {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Removes every container of its nodes when dropped, a panicking test's
/// included; [`Cleanup::finish`] checks that none was left to remove.
struct Cleanup {
    engine: PathBuf,
    nodes: Vec<Name>,
}

impl Cleanup {
    fn new(nodes: &[&Name]) -> Cleanup {
        Cleanup {
            engine: fixture().engine.clone(),
            nodes: nodes.iter().map(|n| (*n).clone()).collect(),
        }
    }

    fn finish(self) {
        for node in &self.nodes {
            let left = containers_of(&self.engine, node);
            assert!(left.is_empty(), "containers left of {node}: {left:?}");
        }
    }
}

impl Drop for Cleanup {
    /// Never panics (it may run during one): what it cannot do, it skips.
    fn drop(&mut self) {
        for node in &self.nodes {
            let filter = format!("label=mesh.node={node}");
            let Ok(out) = std::process::Command::new(&self.engine)
                .args(["ps", "-a", "-q", "--filter", &filter])
                .output()
            else {
                continue;
            };
            for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = std::process::Command::new(&self.engine)
                    .args(["rm", "-f", "-t", "0", "--ignore", id])
                    .output();
            }
        }
    }
}

/// The host key the test's containers are labelled with.
const HOST: &str = "UTESTHOST";

fn spec(node: &Name, module: &str, args: &[&str]) -> ContainerSpec {
    ContainerSpec {
        node: node.clone(),
        module: name(module),
        host: HOST.into(),
        sequence: 7,
        image: Image::Archive(fixture().archive.clone()),
        args: args.iter().map(|s| s.to_string()).collect(),
        env_names: Vec::new(),
        mounts: Vec::new(),
        workdir: None,
        stop_grace: Duration::from_secs(10),
        ulimits: Ulimits::of_host(),
        secret_env: None,
    }
}

async fn image_id() -> String {
    let f = fixture();
    load_archive(&f.engine, &f.archive).await.unwrap()
}

/// A `podman run` client as the process driver runs one: its own process
/// group, exactly the given environment (plus PATH), output collected.
struct Client {
    child: Child,
    pid: u32,
    output: Arc<Mutex<Vec<String>>>,
}

impl Client {
    fn spawn(spec: &ContainerSpec, image: &str, env: &BTreeMap<String, String>) -> Client {
        spec.check().unwrap();
        let argv = run_argv(&fixture().engine, spec, image);
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env_clear()
            .envs(env)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd.spawn().unwrap();
        let pid = child.id().unwrap();
        let output = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        for (stream, prefix) in [
            (
                Box::new(stdout) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
                "",
            ),
            (Box::new(stderr), "stderr: "),
        ] {
            let output = output.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stream).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    output.lock().unwrap().push(format!("{prefix}{line}"));
                }
            });
        }
        Client { child, pid, output }
    }

    fn lines(&self) -> Vec<String> {
        self.output.lock().unwrap().clone()
    }

    async fn wait_for_line(&self, line: &str) {
        let until = Instant::now() + Duration::from_secs(20);
        while !self.lines().iter().any(|l| l == line) {
            assert!(Instant::now() < until, "no {line:?} in {:?}", self.lines());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on the client's own process group (its pid, > 1).
        let rc = unsafe { libc::kill(-(self.pid as i32), signal) };
        assert_eq!(rc, 0, "kill -{signal} -{}", self.pid);
    }

    /// The client's exit code (128 + signal for a container killed by one).
    async fn exit(&mut self, limit: Duration) -> Option<i32> {
        let status = tokio::time::timeout(limit, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("client still running after {limit:?}: {:?}", self.lines()))
            .unwrap();
        status.code()
    }
}

#[tokio::test]
async fn an_archive_loads_to_the_same_image_id_twice() {
    let f = fixture();
    // An image of this test's own (its timestamp makes its id), so the
    // first load imports it, and removing it cannot hit another test's.
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    // Seconds; within the 1970s to 2000s, which the layer's tar can write.
    let stamp = u64::try_from(stamp % 1_000_000_000).unwrap() + 1;
    let tag = format!("localhost/mesh-test-load:p{}", std::process::id());
    let built = build(&f.engine, &f.dir, &tag, stamp);
    let named = f.dir.join("load-named.tar");
    let nameless = f.dir.join("load-nameless.tar");
    save(&f.engine, &tag, &named);
    save(&f.engine, &built, &nameless);
    podman_ok(&f.engine, &["rmi", &tag]);
    assert!(
        !podman(&f.engine, &["image", "exists", &built])
            .status
            .success()
    );

    let first = load_archive(&f.engine, &named).await.unwrap();
    let second = load_archive(&f.engine, &named).await.unwrap();
    assert_eq!(first, built);
    assert_eq!(second, built);
    // Nameless, an archive loads as `sha256:<id>`: the same image.
    assert_eq!(load_archive(&f.engine, &nameless).await.unwrap(), built);
    podman_ok(&f.engine, &["rmi", "-f", &built]);

    let bad = f.dir.join("not-an-archive.tar");
    std::fs::write(&bad, "garbage").unwrap();
    let e = load_archive(&f.engine, &bad).await.unwrap_err().to_string();
    assert!(e.contains("load failed (exited with status 125)"), "{e}");
}

#[tokio::test]
async fn a_module_runs_with_its_labels_env_and_read_only_files() {
    let engine = &fixture().engine;
    let node = node("run");
    let cleanup = Cleanup::new(&[&node]);
    let id = image_id().await;
    let files = tempfile::tempdir().unwrap();
    let key = files.path().join("module.nk");
    let conf = files.path().join("app.conf");
    std::fs::write(&key, "SUAKEY").unwrap();
    std::fs::write(&conf, "conf-content").unwrap();
    let secret = format!("s3cr3t-{}", std::process::id());
    let mut s = spec(
        &node,
        "web",
        &[
            "env",
            "MESH_TEST_SECRET",
            "env",
            "MESH_NOT_DECLARED",
            "read",
            "/run/mesh/nkey",
            "read",
            "/etc/app/app.conf",
            "write",
            "/run/mesh/nkey",
            "write",
            "/etc/app/app.conf",
            "limits",
            "trap",
            "sleep",
        ],
    );
    s.env_names = vec!["MESH_TEST_SECRET".into()];
    s.mounts = vec![
        (key.clone(), "/run/mesh/nkey".into()),
        (conf.clone(), "/etc/app/app.conf".into()),
    ];
    let env = BTreeMap::from([
        ("MESH_TEST_SECRET".to_string(), secret.clone()),
        ("MESH_NOT_DECLARED".to_string(), "host-only".to_string()),
    ]);
    let mut client = Client::spawn(&s, &id, &env);
    client.wait_for_line("sleeping").await;
    let lines = client.lines();
    let limits = s.ulimits;
    for expected in [
        format!("env MESH_TEST_SECRET={secret}"),
        "env MESH_NOT_DECLARED=(unset)".to_string(),
        "read /run/mesh/nkey: SUAKEY".to_string(),
        "read /etc/app/app.conf: conf-content".to_string(),
        "write /run/mesh/nkey: Read-only file system".to_string(),
        "write /etc/app/app.conf: Read-only file system".to_string(),
        format!("nofile {}:{}", limits.nofile.soft, limits.nofile.hard),
        format!("nproc {}:{}", limits.nproc.soft, limits.nproc.hard),
    ] {
        assert!(lines.contains(&expected), "no {expected:?} in {lines:?}");
    }

    // The value reached the container through podman's environment; its
    // argv, which anyone on the host may read, names the variable only.
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", client.pid)).unwrap();
    let argv: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    assert!(argv.contains(&"MESH_TEST_SECRET".to_string()), "{argv:?}");
    assert!(!argv.iter().any(|a| a.contains(&secret)), "{argv:?}");

    let container = container_name(&node, &name("web"), HOST);
    let inspected = podman_ok(engine, &["container", "inspect", &container]);
    let inspected: serde_json::Value = serde_json::from_str(&inspected).unwrap();
    let labels = &inspected[0]["Config"]["Labels"];
    assert_eq!(labels["mesh.node"], node.as_str(), "{labels}");
    assert_eq!(labels["mesh.module"], "web", "{labels}");
    assert_eq!(labels["mesh.sequence"], "7", "{labels}");
    assert_eq!(inspected[0]["HostConfig"]["NetworkMode"], "host");
    assert_eq!(inspected[0]["OCIRuntime"], "runc");

    let started = Instant::now();
    stop(engine, &container, s.stop_grace).await.unwrap();
    let took = started.elapsed();
    assert_eq!(client.exit(Duration::from_secs(10)).await, Some(0));
    assert!(took < Duration::from_secs(5), "stop took {took:?}");
    // Read by a task of its own, maybe after the exit was seen.
    client.wait_for_line("got SIGTERM").await;
    assert!(!exists(engine, &container));
    eprintln!("stop of a container that ends on SIGTERM: {took:?}");
    cleanup.finish();
}

#[tokio::test]
async fn stop_gives_the_grace_then_kills_and_removes() {
    let engine = &fixture().engine;
    let node = node("grace");
    let cleanup = Cleanup::new(&[&node]);
    let id = image_id().await;
    let mut s = spec(&node, "stubborn", &["ignore", "sleep"]);
    s.stop_grace = Duration::from_secs(2);
    let mut client = Client::spawn(&s, &id, &BTreeMap::new());
    client.wait_for_line("sleeping").await;
    let container = container_name(&node, &s.module, &s.host);
    let started = Instant::now();
    stop(engine, &container, s.stop_grace).await.unwrap();
    let took = started.elapsed();
    assert!(
        took >= s.stop_grace && took < s.stop_grace + Duration::from_secs(5),
        "stop took {took:?}"
    );
    // 128 + SIGKILL: the container was killed once the grace passed.
    assert_eq!(client.exit(Duration::from_secs(10)).await, Some(137));
    assert!(!exists(engine, &container));
    // Stopping what is gone is no error.
    stop(engine, &container, s.stop_grace).await.unwrap();
    eprintln!("stop of a container that ignores SIGTERM, grace 2 s: {took:?}");
    cleanup.finish();
}

#[tokio::test]
async fn sigterm_to_the_client_group_reaches_the_container() {
    let engine = &fixture().engine;
    let node = node("sigterm");
    let cleanup = Cleanup::new(&[&node]);
    let id = image_id().await;
    // `plain` has no handler: as PID 1 it would ignore SIGTERM; under the
    // init it dies of it, as a process module would.
    let trapping = spec(&node, "trapping", &["trap", "sleep"]);
    let plain = spec(&node, "plain", &["sleep"]);
    let mut clients = [
        Client::spawn(&trapping, &id, &BTreeMap::new()),
        Client::spawn(&plain, &id, &BTreeMap::new()),
    ];
    for (c, s) in clients.iter().zip([&trapping, &plain]) {
        c.wait_for_line("sleeping").await;
        wait_running(engine, &container_name(&node, &s.module, &s.host)).await;
    }
    let started = Instant::now();
    for c in &clients {
        c.signal(libc::SIGTERM);
    }
    let [trapping_client, plain_client] = &mut clients;
    assert_eq!(trapping_client.exit(Duration::from_secs(10)).await, Some(0));
    trapping_client.wait_for_line("got SIGTERM").await;
    // 128 + SIGTERM.
    assert_eq!(plain_client.exit(Duration::from_secs(10)).await, Some(143));
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "took {took:?}");
    // The client's --rm is done by the time it exits.
    for s in [&trapping, &plain] {
        assert!(!exists(engine, &container_name(&node, &s.module, &s.host)));
    }
    eprintln!("SIGTERM to the clients' groups until both exited: {took:?}");
    cleanup.finish();
}

#[tokio::test]
async fn a_killed_client_leaves_its_container_to_stop_by_name() {
    let engine = &fixture().engine;
    let node = node("killed");
    let cleanup = Cleanup::new(&[&node]);
    let id = image_id().await;
    let s = spec(&node, "orphan", &["trap", "sleep"]);
    let container = container_name(&node, &s.module, &s.host);
    let mut client = Client::spawn(&s, &id, &BTreeMap::new());
    client.wait_for_line("sleeping").await;
    wait_running(engine, &container).await;
    client.signal(libc::SIGKILL);
    assert_eq!(client.exit(Duration::from_secs(10)).await, None);
    // conmon runs in its own session: the container outlives its client.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(state(engine, &container), "running");

    // A new run of the same module replaces it rather than failing.
    let mut again = Client::spawn(&s, &id, &BTreeMap::new());
    again.wait_for_line("sleeping").await;
    let started = Instant::now();
    stop(engine, &container, s.stop_grace).await.unwrap();
    let took = started.elapsed();
    assert_eq!(again.exit(Duration::from_secs(10)).await, Some(0));
    assert!(!exists(engine, &container));
    eprintln!("stop by name after a replacing run: {took:?}");

    // And a container whose client was killed is stopped by name alone.
    let mut third = Client::spawn(&s, &id, &BTreeMap::new());
    third.wait_for_line("sleeping").await;
    wait_running(engine, &container).await;
    third.signal(libc::SIGKILL);
    assert_eq!(third.exit(Duration::from_secs(10)).await, None);
    assert!(exists(engine, &container));
    stop(engine, &container, s.stop_grace).await.unwrap();
    assert!(!exists(engine, &container));
    cleanup.finish();
}

#[tokio::test]
async fn remove_others_takes_exactly_the_undeclared_containers_of_the_node() {
    let engine = &fixture().engine;
    let mine = node("mine");
    let theirs = node("theirs");
    let cleanup = Cleanup::new(&[&mine, &theirs]);
    let id = image_id().await;
    let specs = [
        spec(&mine, "keep", &["trap", "sleep"]),
        spec(&mine, "gone-a", &["trap", "sleep"]),
        spec(&mine, "gone-b", &["trap", "sleep"]),
        spec(&theirs, "gone-a", &["trap", "sleep"]),
        // Node `mine` of another mesh on this machine: another host key.
        ContainerSpec {
            host: "UANOTHERMESH".into(),
            ..spec(&mine, "gone-c", &["trap", "sleep"])
        },
        // The same node and module in that other mesh (every `mesh up`'s
        // node is `local`): a container of its own, running beside ours,
        // never replacing it.
        ContainerSpec {
            host: "UANOTHERMESH".into(),
            ..spec(&mine, "keep", &["trap", "sleep"])
        },
    ];
    let mut clients: Vec<Client> = specs
        .iter()
        .map(|s| Client::spawn(s, &id, &BTreeMap::new()))
        .collect();
    for c in &clients {
        c.wait_for_line("sleeping").await;
    }
    // A leftover with no client, as a host killed at once leaves them.
    wait_running(engine, &container_name(&mine, &name("gone-b"), HOST)).await;
    clients[2].signal(libc::SIGKILL);
    assert_eq!(clients[2].exit(Duration::from_secs(10)).await, None);

    let started = Instant::now();
    let removed = remove_others(engine, &mine, HOST, &[name("keep")])
        .await
        .unwrap();
    let took = started.elapsed();
    let gone_a = container_name(&mine, &name("gone-a"), HOST);
    let gone_b = container_name(&mine, &name("gone-b"), HOST);
    assert_eq!(removed, [gone_a.clone(), gone_b.clone()]);
    assert_eq!(clients[1].exit(Duration::from_secs(10)).await, Some(0));
    assert_eq!(
        containers_of(engine, &mine),
        [
            container_name(&mine, &name("gone-c"), "UANOTHERMESH"),
            container_name(&mine, &name("keep"), "UANOTHERMESH"),
            container_name(&mine, &name("keep"), HOST)
        ]
    );
    assert_eq!(
        containers_of(engine, &theirs),
        [container_name(&theirs, &name("gone-a"), HOST)]
    );
    assert!(
        remove_others(engine, &mine, HOST, &[name("keep")])
            .await
            .unwrap()
            .is_empty()
    );
    eprintln!("remove_others of two (one client-less): {took:?}");

    for (s, c) in specs.iter().zip(clients.iter_mut()) {
        if s.module.as_str() == "keep" || s.node == theirs || s.host != HOST {
            stop(
                engine,
                &container_name(&s.node, &s.module, &s.host),
                s.stop_grace,
            )
            .await
            .unwrap();
            assert_eq!(c.exit(Duration::from_secs(10)).await, Some(0));
        }
    }
    cleanup.finish();
}

#[tokio::test]
async fn a_client_ended_while_starting_leaves_nothing_stop_misses() {
    let engine = &fixture().engine;
    let node = node("early");
    let cleanup = Cleanup::new(&[&node]);
    let id = image_id().await;
    // The container's processes run before the client records them as
    // running. A client ended in between leaves the engine believing the
    // container never started (`initialized`), while its processes run; a
    // SIGTERM then is not forwarded and the client exits at once (status 0
    // measured). Signalled as soon as the probe prints, either may happen.
    let mut runs = Vec::new();
    for (module, signal) in [("killed", libc::SIGKILL), ("termed", libc::SIGTERM)] {
        let marker = format!("marker-{node}-{module}");
        let s = spec(&node, module, &[&marker, "trap", "sleep"]);
        let client = Client::spawn(&s, &id, &BTreeMap::new());
        runs.push((s, marker, client, signal));
    }
    for (_, _, client, signal) in &runs {
        let until = Instant::now() + Duration::from_secs(20);
        while !client.lines().iter().any(|l| l == "sleeping") {
            assert!(Instant::now() < until, "{:?}", client.lines());
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        client.signal(*signal);
    }
    for (s, marker, client, _) in &mut runs {
        let code = client.exit(Duration::from_secs(10)).await;
        let container = container_name(&node, &s.module, &s.host);
        let state = state(engine, &container);
        let left = processes_with_arg(marker).len();
        stop(engine, &container, Duration::from_secs(2))
            .await
            .unwrap();
        assert!(!exists(engine, &container));
        let after = processes_gone(marker).await;
        assert!(after.is_empty(), "{container}: processes left {after:?}");
        eprintln!(
            "{container}: client exit {code:?}; engine state then {state:?}, {left} processes; none after stop"
        );
    }
    cleanup.finish();
}

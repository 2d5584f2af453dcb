//! What a node is declared, live: a real broker on the composed users file,
//! a real `mesh controller`, a real `mesh host`. A module that cannot be
//! composed is left out and named — never its whole node; a broker holder's
//! user list is composed with each declaration; a burst of changes is one
//! declaration.

#[path = "join_live/harness.rs"]
mod harness;

use std::path::{Path, PathBuf};
use std::time::Duration;

use harness::{Backend, Daemon, Mesh, wait_bound, wait_until};
use mesh_core::names::Name;

const LONG: Duration = Duration::from_secs(60);

/// A module that runs `sleep`: a process the host can run anywhere.
fn sleeper(name: &str, extra: &str) -> String {
    format!(
        "[module]\nname = \"{name}\"\ndescription = \"sleeps\"\n\n[run]\ncommand = [\"sleep\", \"3600\"]\n{extra}"
    )
}

/// A catalogue directory of `manifests` (name → text).
fn catalogue(dir: &Path, manifests: &[(&str, String)]) -> PathBuf {
    let root = dir.join("catalogue");
    for (name, text) in manifests {
        std::fs::create_dir_all(root.join(name)).unwrap();
        std::fs::write(root.join(name).join("mesh.toml"), text).unwrap();
    }
    root
}

/// A mesh with its controller and one host `n1`, enrolled and bound, and
/// `manifests` registered.
async fn mesh_with(manifests: &[(&str, String)]) -> (Mesh, Daemon, PathBuf) {
    let mut mesh = Mesh::new(Backend::Sqlite);
    mesh.start_controller();
    let cat = catalogue(mesh.tmp.path(), manifests);
    mesh.register(&cat);
    let token = mesh.node_add("n1", "1h");
    let host = mesh.host("n1", Some(&token));
    let js = async_nats::jetstream::new(mesh.observer().await);
    wait_bound(&js, &["n1"], LONG).await;
    (mesh, host, cat)
}

/// `mesh modules --output json`: (module, state) on n1.
fn states(mesh: &Mesh) -> Vec<(String, String)> {
    let out = mesh.mesh(&["modules", "--output", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    rows.iter()
        .filter(|r| r["node"] == "n1")
        .map(|r| {
            (
                r["module"].as_str().unwrap().to_string(),
                r["state"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn running(mesh: &Mesh, module: &str) -> bool {
    states(mesh)
        .iter()
        .any(|(m, s)| m == module && s == "running")
}

/// n1's newest recorded declaration (its sequence and body), if any.
async fn newest(mesh: &Mesh) -> Option<(i64, serde_json::Value)> {
    let store = mesh_store::Store::open_existing(&mesh.store_url)
        .await
        .unwrap();
    let d = store
        .latest_declaration(&Name::new("n1").unwrap())
        .await
        .unwrap();
    store.close().await;
    let d = d?;
    let env: serde_json::Value = serde_json::from_str(&d.body).unwrap();
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(env["declaration"].as_str().unwrap())
        .unwrap();
    Some((d.version, serde_json::from_slice(&bytes).unwrap()))
}

/// The modules of n1's newest recorded declaration, and its sequence.
async fn declared(mesh: &Mesh) -> Option<(i64, Vec<String>)> {
    let (version, decl) = newest(mesh).await?;
    let modules = decl["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect();
    Some((version, modules))
}

async fn wait_declared(mesh: &Mesh, f: impl Fn(&[String]) -> bool) -> (i64, Vec<String>) {
    let deadline = std::time::Instant::now() + LONG;
    loop {
        if let Some((v, ms)) = declared(mesh).await
            && f(&ms)
        {
            return (v, ms);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "n1 was never declared as expected; newest: {:?}",
            declared(mesh).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A store edited behind the CLI's back so one module holds a seat nobody
/// declares: the controller still starts, declares n1's other module, and
/// names the one it leaves out. (Before: the registered catalogue no longer
/// derived, and the controller refused to start.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_that_no_longer_derives_is_left_out_and_the_mesh_goes_on() {
    let (mut mesh, _host, _) = mesh_with(&[
        ("keep", sleeper("keep", "")),
        ("broken", sleeper("broken", "")),
    ])
    .await;
    mesh.assign("keep", "n1", true);
    mesh.assign("broken", "n1", true);
    assert!(
        wait_until(LONG, || running(&mesh, "keep") && running(&mesh, "broken")),
        "{:?}",
        states(&mesh)
    );

    let store = mesh_store::Store::open(&mesh.store_url).await.unwrap();
    store
        .register_module(
            &Name::new("broken").unwrap(),
            &sleeper("broken", "\n[holds]\nseats = [\"ghost\"]\n"),
        )
        .await
        .unwrap();
    store.close().await;
    mesh.controller.as_mut().unwrap().stop();
    mesh.start_controller();

    let (_, modules) = wait_declared(&mesh, |ms| !ms.iter().any(|m| m == "broken")).await;
    assert_eq!(modules, ["keep"]);
    assert!(
        wait_until(LONG, || !states(&mesh)
            .iter()
            .any(|(m, s)| m == "broken" && s == "running")),
        "{:?}",
        states(&mesh)
    );
    assert!(running(&mesh, "keep"), "{:?}", states(&mesh));
    let log = mesh.controller().log();
    assert!(
        log.contains("module left out of every declaration") && log.contains("broken"),
        "{log}"
    );
    let out = mesh.mesh(&["status", "--output", "json"]);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let actions = status["needs_action"].as_array().unwrap();
    let action = actions
        .iter()
        .find(|a| a["what"] == "module broken is left out of the declaration of n1")
        .unwrap_or_else(|| panic!("{actions:#?}"));
    let next = action["next"].as_str().unwrap();
    assert!(
        next.contains("ghost") && next.contains("mesh catalogue register"),
        "{next}"
    );
}

/// `mesh assign --wait` of a module whose placeholder cannot be filled
/// says why at once instead of timing out on the controller, and the
/// node's other module is still declared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assign_wait_answers_with_why_a_module_is_left_out() {
    let (mesh, _host, _) = mesh_with(&[
        ("keep", sleeper("keep", "")),
        (
            "db",
            sleeper(
                "db",
                "\n[[seat]]\nname = \"db\"\nscope = \"mesh\"\nprotocol = \"pg\"\n\n[holds]\nseats = [\"db\"]\n",
            ),
        ),
        (
            "app",
            sleeper(
                "app",
                "env = { DB = \"${seat:db:5432}\" }\n\n[uses]\nseats = [\"db\"]\n",
            ),
        ),
    ])
    .await;
    mesh.assign("keep", "n1", true);
    let started = std::time::Instant::now();
    let out = mesh.mesh(&["assign", "app", "n1", "--wait", "--timeout", "50s"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(
            "app on n1: left out of the declaration: module app: ${seat:db:5432} cannot be filled"
        ) && stdout.contains("assign its holder first"),
        "{stdout}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "answered, not timed out"
    );
    assert!(
        wait_until(LONG, || running(&mesh, "keep")),
        "{:?}",
        states(&mesh)
    );
    let (_, modules) = wait_declared(&mesh, |ms| ms.iter().any(|m| m == "keep")).await;
    assert_eq!(modules, ["keep"]);
}

/// The `mesh-broker` holder's `bus-users` is composed from the records with
/// each declaration: the first declaration after a person is added names
/// them. (Before: a copy read from disk, one composition behind, and
/// nothing declared the holder again when the composer wrote.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_holder_is_declared_the_newest_user_list() {
    let bus = sleeper(
        "bus",
        "\n[holds]\nseats = [\"mesh-broker\"]\n\n[[file]]\nname = \"bus-users\"\npath = \"users.conf\"\n",
    );
    let (mesh, _host, _) = mesh_with(&[("bus", bus)]).await;
    mesh.assign("bus", "n1", true);
    // The holder runs with its key recorded, and nothing else changes.
    let file = mesh.module_dir("n1", "bus").join("work/users.conf");
    assert!(
        wait_until(LONG, || running(&mesh, "bus")
            && std::fs::read_to_string(&file)
                .is_ok_and(|t| t.contains("# module_n1_bus"))),
        "the holder's users file names the holder once its key is recorded:\n{}",
        std::fs::read_to_string(&file).unwrap_or_default()
    );
    let (before, _) = newest(&mesh).await.unwrap();
    let person = nkeys::KeyPair::new_user().public_key();
    let out = mesh.mesh(&[
        "person",
        "add",
        "ada",
        "--tools",
        "*",
        "--nkey",
        &person,
        "--no-wait",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = std::time::Instant::now() + LONG;
    let decl = loop {
        if let Some((v, decl)) = newest(&mesh).await
            && v > before
        {
            break decl;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "adding a person declared the broker holder nothing new"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let users = decl["modules"][0]["files"][0]["content"].as_str().unwrap();
    assert!(
        users.contains(&person),
        "the first declaration after the change:\n{users}"
    );
    assert!(
        wait_until(LONG, || std::fs::read_to_string(&file)
            .is_ok_and(|t| t.contains(&person))),
        "the host wrote it"
    );

    // A token's enrolment user is in the holder's file while the token
    // lives, and gone from it once it expires: nothing in the records moves
    // then, yet the holder is declared the file without it.
    let token = mesh.node_add("n9", "3s");
    let enrol_key = nkeys::KeyPair::from_seed(
        mesh_core::token::Token::decode(&token)
            .unwrap()
            .enrolment_seed
            .expose(),
    )
    .unwrap()
    .public_key();
    assert!(
        wait_until(LONG, || std::fs::read_to_string(&file)
            .is_ok_and(|t| t.contains(&enrol_key))),
        "the live token's user is declared to the holder"
    );
    assert!(
        wait_until(LONG, || std::fs::read_to_string(&file)
            .is_ok_and(|t| !t.contains(&enrol_key))),
        "the expired token's user stays in the holder's file:\n{}",
        std::fs::read_to_string(&file).unwrap_or_default()
    );
}

/// Modules assigned one after another, faster than the controller's quiet
/// time, reach the node as one declaration holding all of them — never a
/// one-module declaration before the full one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_assignments_is_one_declaration() {
    let names = ["a1", "a2", "a3", "a4", "a5"];
    let manifests: Vec<(&str, String)> = names.iter().map(|n| (*n, sleeper(n, ""))).collect();
    let (mesh, _host, _) = mesh_with(&manifests).await;
    let store = mesh_store::Store::open(&mesh.store_url).await.unwrap();
    let n1 = Name::new("n1").unwrap();
    for (i, m) in names.iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(80)).await;
        }
        store.assign(&n1, &Name::new(*m).unwrap()).await.unwrap();
    }
    store.close().await;
    let (version, modules) = wait_declared(&mesh, |ms| ms.len() == names.len()).await;
    assert_eq!(modules, names);
    assert_eq!(version, 1, "one declaration for the burst");
}

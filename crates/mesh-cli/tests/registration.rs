//! `mesh catalogue register` against a real store: the catalogue is checked
//! as it would be after the registration, with every registered manifest in
//! view, and a rename is recorded as a row the controller resolves.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mesh_core::names::Name;

fn mesh_bin() -> &'static str {
    env!("CARGO_BIN_EXE_mesh")
}

/// A genesis and its store in a temp dir.
struct Fixture {
    tmp: tempfile::TempDir,
    dir: PathBuf,
    store_url: String,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("mesh");
        let store_url = format!("sqlite://{}", dir.join("mesh.db").display());
        let f = Fixture {
            tmp,
            dir,
            store_url,
        };
        let out = f.mesh(&["init"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        f
    }

    fn mesh(&self, args: &[&str]) -> Output {
        Command::new(mesh_bin())
            .args(args)
            .args([
                "--dir",
                self.dir.to_str().unwrap(),
                "--store",
                &self.store_url,
            ])
            .current_dir(self.tmp.path())
            .env_remove("MESH_STORE")
            .env_remove("MESH_DIR")
            .output()
            .unwrap()
    }

    /// A catalogue directory `name` of `files` (relative path → text).
    fn catalogue(&self, name: &str, files: &[(&str, &str)]) -> PathBuf {
        let root = self.tmp.path().join(name);
        for (path, text) in files {
            let p = root.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        root
    }

    fn register(&self, catalogue: &Path) -> Output {
        self.mesh(&["catalogue", "register", catalogue.to_str().unwrap()])
    }

    async fn store(&self) -> mesh_store::Store {
        mesh_store::Store::open_existing(&self.store_url)
            .await
            .unwrap()
    }

    /// The registered manifest text of `module`.
    async fn registered(&self, module: &str) -> Option<String> {
        let s = self.store().await;
        let m = s.module(&Name::new(module).unwrap()).await.unwrap();
        s.close().await;
        m.map(|m| m.manifest_source)
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

const PRODUCER: &str = r#"[module]
name = "producer"
description = "makes things"

[run]
command = ["producer"]

[events]
emits = ["made"]
"#;

const WATCHER: &str = r#"[module]
name = "watcher"
description = "watches what is made"

[run]
command = ["watcher"]

[events]
consumes = ["producer.made"]
"#;

const OWNER: &str = r#"[module]
name = "owner"
description = "declares the jobs seat"

[run]
command = ["owner"]

[[seat]]
name = "jobs"
scope = "mesh"
protocol = ""
emits = ["done"]
"#;

const HOLDER: &str = r#"[module]
name = "holder"
description = "holds the jobs seat"

[run]
command = ["holder"]

[holds]
seats = ["jobs"]
"#;

/// A registration that would leave a registered subscription matching
/// nothing, or a registered hold on a seat nobody declares, is refused
/// naming the line it breaks; nothing of it is registered.
#[tokio::test]
async fn a_registration_that_breaks_what_is_registered_is_refused_naming_it() {
    let f = Fixture::new();
    let first = f.catalogue(
        "first",
        &[
            ("producer/mesh.toml", PRODUCER),
            ("watcher/mesh.toml", WATCHER),
            ("owner/mesh.toml", OWNER),
            ("holder/mesh.toml", HOLDER),
        ],
    );
    let out = f.register(&first);
    assert!(out.status.success(), "{}", stderr(&out));

    // The producer alone checks clean, but the registered watcher consumes
    // what it no longer emits.
    let renamed = PRODUCER.replace("emits = [\"made\"]", "emits = [\"built\"]");
    let alone = f.catalogue("dangling", &[("producer/mesh.toml", &renamed)]);
    let check = Command::new(mesh_bin())
        .args(["check", alone.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", stdout(&check));
    let out = f.register(&alone);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let (o, e) = (stdout(&out), stderr(&out));
    assert!(
        e.contains("would break the registered catalogue: 1 error")
            && e.contains("nothing was registered"),
        "{e}"
    );
    assert!(o.contains("registered:watcher:9"), "{o}");
    assert!(o.contains("producer.made"), "{o}");
    assert_eq!(f.registered("producer").await.as_deref(), Some(PRODUCER));

    // The owner stops declaring the seat the registered holder holds.
    let moved = OWNER.replace("name = \"jobs\"", "name = \"tasks\"");
    let orphan = f.catalogue("orphan", &[("owner/mesh.toml", &moved)]);
    let out = f.register(&orphan);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let o = stdout(&out);
    assert!(
        o.contains("registered:holder:9:10")
            && o.contains("`jobs` is claimed in [holds] but no module declares that seat"),
        "{o}"
    );
    assert_eq!(f.registered("owner").await.as_deref(), Some(OWNER));

    // Registered together with a holder that follows the rename, it passes.
    let holder_moved = HOLDER.replace("\"jobs\"", "\"tasks\"");
    let both = f.catalogue(
        "both",
        &[
            ("owner/mesh.toml", &moved),
            ("holder/mesh.toml", &holder_moved),
        ],
    );
    let out = f.register(&both);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(f.registered("owner").await.as_deref(), Some(moved.as_str()));
}

/// A rename in `aliases.toml` is recorded with the registration, and the
/// catalogue the controller reads from the store resolves it: the holder
/// that still names the old seat derives the new seat's subjects.
#[tokio::test]
async fn a_seat_rename_is_recorded_and_the_registered_catalogue_resolves_it() {
    let f = Fixture::new();
    let moved = OWNER.replace("name = \"jobs\"", "name = \"tasks\"");
    let cat = f.catalogue(
        "renamed",
        &[
            ("aliases.toml", "[seats]\njobs = \"tasks\"\n"),
            ("owner/mesh.toml", &moved),
            ("holder/mesh.toml", HOLDER),
        ],
    );
    let out = f.register(&cat);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = f.mesh(&["node", "add", "n1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = f.mesh(&["assign", "holder", "n1"]);
    assert!(out.status.success(), "{}", stderr(&out));

    let store = f.store().await;
    let aliases = store.seat_aliases().await.unwrap();
    assert_eq!(
        aliases,
        [(Name::new("jobs").unwrap(), Name::new("tasks").unwrap())]
    );
    holder_speaks_for_tasks(&store).await;
    store.close().await;

    // Registering the catalogue again changes nothing and keeps the rename.
    let out = f.register(&cat);
    assert!(out.status.success(), "{}", stderr(&out));
    let store = f.store().await;
    assert_eq!(store.seat_aliases().await.unwrap().len(), 1);
    store.close().await;
}

/// The records derive with nothing left out, and the holder on n1, which
/// names the seat `jobs`, publishes the events of `tasks` it was renamed to.
async fn holder_speaks_for_tasks(store: &mesh_store::Store) {
    let derived = mesh_state::derive(store, &Default::default())
        .await
        .expect("the registered catalogue derives");
    assert!(derived.left_out.is_empty(), "{:?}", derived.left_out);
    let holder = derived
        .principals
        .iter()
        .find(|p| p.name == "module_n1_holder")
        .expect("the holder's principal");
    assert!(
        holder
            .permissions
            .publish_subjects()
            .contains("mesh.seat.tasks.event.done"),
        "{:#?}",
        holder.permissions.publish
    );
}

/// `--store-file` (or `MESH_STORE_FILE`) reads the store's URL from a file,
/// so a password in it is on no command line; a missing or empty file is
/// named, never its content.
#[tokio::test]
async fn the_store_url_may_come_from_a_file() {
    let f = Fixture::new();
    let url_file = f.tmp.path().join("store.url");
    std::fs::write(&url_file, format!("{}\n", f.store_url)).unwrap();
    let run = |args: &[&str], env: Option<&Path>| {
        let mut c = Command::new(mesh_bin());
        c.args(args)
            .args(["--dir", f.dir.to_str().unwrap()])
            .current_dir(f.tmp.path())
            .env_remove("MESH_STORE")
            .env_remove("MESH_STORE_FILE");
        if let Some(p) = env {
            c.env("MESH_STORE_FILE", p);
        }
        c.output().unwrap()
    };
    let out = run(
        &[
            "node",
            "add",
            "n1",
            "--store-file",
            url_file.to_str().unwrap(),
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run(&["nodes", "--output", "json"], Some(&url_file));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("\"n1\""), "{}", stdout(&out));
    let missing = f.tmp.path().join("nope.url");
    let out = run(&["nodes"], Some(&missing));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("reading the store URL from"),
        "{}",
        stderr(&out)
    );
    std::fs::write(&url_file, "\n").unwrap();
    let out = run(&["nodes"], Some(&url_file));
    assert!(
        stderr(&out).contains("holds no store URL"),
        "{}",
        stderr(&out)
    );
    // Both ways at once is refused by the parser, naming them.
    let out = run(
        &["nodes", "--store", "sqlite://x", "--store-file", "y"],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--store-file"), "{}", stderr(&out));
}

/// A module holding a seat that a registered module declares registers on
/// its own: the catalogue is checked with what is registered in view, not
/// the incoming files alone.
#[tokio::test]
async fn a_holder_of_a_registered_seat_registers_on_its_own() {
    let f = Fixture::new();
    let out = f.register(&f.catalogue("owner", &[("owner/mesh.toml", OWNER)]));
    assert!(out.status.success(), "{}", stderr(&out));
    let alone = f.catalogue("holder", &[("holder/mesh.toml", HOLDER)]);
    // On its own the holder names a seat nobody declares...
    let check = Command::new(mesh_bin())
        .args(["check", alone.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        stdout(&check).contains("unknown-seat"),
        "{}",
        stdout(&check)
    );
    // ...but the registered owner declares it.
    let out = f.register(&alone);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(stdout(&out), "registered 1 module(s): holder\n");
    assert_eq!(f.registered("holder").await.as_deref(), Some(HOLDER));
    let out = f.mesh(&["plan", "register", alone.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    // A hold on a seat nobody declares, registered or incoming, is still
    // refused, where it is written.
    let stray = f.catalogue(
        "stray",
        &[(
            "stray/mesh.toml",
            &HOLDER
                .replace("holder", "stray")
                .replace("\"jobs\"", "\"chores\""),
        )],
    );
    let out = f.register(&stray);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("`chores` is claimed in [holds] but no module declares that seat"),
        "{}",
        stdout(&out)
    );
    assert!(
        stderr(&out).contains("the catalogue has 1 error with the registered catalogue in view")
            && stderr(&out).contains("nothing was registered"),
        "{}",
        stderr(&out)
    );
    assert_eq!(f.registered("stray").await, None);
}

/// Registering again so that an assigned module holds a mesh-scoped seat
/// another assigned module holds is refused as `mesh assign` refuses a
/// second holder, naming the first; nothing of it is registered.
#[tokio::test]
async fn a_registration_that_makes_a_second_holder_is_refused_naming_the_first() {
    let f = Fixture::new();
    let plain = HOLDER.replace("[holds]\nseats = [\"jobs\"]\n", "");
    let first = f.catalogue(
        "first",
        &[
            (
                "owner/mesh.toml",
                &format!("{OWNER}\n[holds]\nseats = [\"jobs\"]\n"),
            ),
            ("holder/mesh.toml", &plain),
        ],
    );
    let out = f.register(&first);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    for args in [
        &["node", "add", "n1"][..],
        &["node", "add", "n2"],
        &["assign", "owner", "n1"],
        &["assign", "holder", "n2"],
    ] {
        let out = f.mesh(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    }
    let again = f.catalogue("again", &[("holder/mesh.toml", HOLDER)]);
    let out = f.register(&again);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "would make module holder on node n2 a second holder of seat `jobs`, which module owner holds on node n1"
        ),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        f.registered("holder").await.as_deref(),
        Some(plain.as_str())
    );
}

/// `mesh fleet load` registers its catalogue as `mesh catalogue register`
/// does: what it would break in the registered catalogue is refused (and
/// nothing of the fleet recorded), and the seats and renames are recorded
/// with the manifests, so a fleet-loaded holder naming a renamed seat is
/// derived, not left out.
#[tokio::test]
async fn a_fleet_load_registers_its_catalogue_as_registration_does() {
    let f = Fixture::new();
    let first = f.catalogue(
        "first",
        &[
            ("producer/mesh.toml", PRODUCER),
            ("watcher/mesh.toml", WATCHER),
        ],
    );
    let out = f.register(&first);
    assert!(out.status.success(), "{}", stderr(&out));
    let fleet = f.tmp.path().join("fleet.toml");
    std::fs::write(&fleet, "[[node]]\nname = \"n1\"\nmodules = [\"holder\"]\n").unwrap();
    let load = |catalogue: &Path| {
        f.mesh(&[
            "fleet",
            "load",
            fleet.to_str().unwrap(),
            "--catalogue",
            catalogue.to_str().unwrap(),
        ])
    };

    // The producer stops emitting what the registered watcher consumes.
    let renamed = PRODUCER.replace("emits = [\"made\"]", "emits = [\"built\"]");
    let breaking = f.catalogue(
        "breaking",
        &[
            ("producer/mesh.toml", &renamed),
            ("owner/mesh.toml", OWNER),
            ("holder/mesh.toml", HOLDER),
        ],
    );
    let out = load(&breaking);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("would break the registered catalogue: 1 error"),
        "{}",
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("registered:watcher:9"),
        "{}",
        stdout(&out)
    );
    assert_eq!(f.registered("producer").await.as_deref(), Some(PRODUCER));
    assert_eq!(f.registered("holder").await, None);
    let store = f.store().await;
    assert!(store.nodes().await.unwrap().is_empty(), "nothing recorded");
    store.close().await;

    // A catalogue renaming jobs to tasks, its holder still naming jobs.
    let moved = OWNER.replace("name = \"jobs\"", "name = \"tasks\"");
    let renaming = f.catalogue(
        "renaming",
        &[
            ("aliases.toml", "[seats]\njobs = \"tasks\"\n"),
            ("owner/mesh.toml", &moved),
            ("holder/mesh.toml", HOLDER),
        ],
    );
    let out = load(&renaming);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let store = f.store().await;
    assert_eq!(
        store.seat_aliases().await.unwrap(),
        [(Name::new("jobs").unwrap(), Name::new("tasks").unwrap())]
    );
    let seat = store.seat(&Name::new("tasks").unwrap()).await.unwrap();
    assert_eq!(
        seat.and_then(|s| s.declared_by)
            .map(|m| m.to_string())
            .as_deref(),
        Some("owner")
    );
    holder_speaks_for_tasks(&store).await;
    store.close().await;

    // A fleet whose catalogue holds only what a registered module declares
    // loads on its own too.
    let alone = f.catalogue("alone", &[("holder/mesh.toml", HOLDER)]);
    let out = load(&alone);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
}

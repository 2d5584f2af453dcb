//! The composer against a real TLS nats-server that includes the users file
//! it writes: what it reports live, the broker serves; what the broker does
//! not serve, it never reports live.

use std::collections::BTreeMap;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mesh_bus::{BusConfig, ClientCredential, Secret};
use mesh_controller::composer::{
    ComposeError, Composer, ComposerConfig, ComposerStatus, Outcome, PublishError, Reloader,
    Snapshot, SourceError,
};
use mesh_core::authority::{self, CONTROLLER};
use mesh_core::catalogue::{Aliases, Catalogue};
use mesh_core::names::Name;
use mesh_core::records::{ControllerSpec, Records};
use mesh_core::subjects;
use mesh_core::users_file::{self, UserCredential};
use mesh_testkit::NatsServer;

/// Long enough for a loaded 2-core machine; a wait that runs out fails.
const WAIT: Duration = Duration::from_secs(30);

/// The records a test changes, and the seeds of the principals it made.
struct Mesh {
    records: Records,
    credentials: BTreeMap<String, UserCredential>,
    seeds: BTreeMap<String, String>,
}

impl Mesh {
    fn new() -> Mesh {
        let mut m = Mesh {
            records: Records::default(),
            credentials: BTreeMap::new(),
            seeds: BTreeMap::new(),
        };
        m.credential(CONTROLLER);
        m
    }

    fn credential(&mut self, principal: &str) {
        let kp = nkeys::KeyPair::new_user();
        self.credentials
            .insert(principal.into(), UserCredential::NKey(kp.public_key()));
        self.seeds.insert(principal.into(), kp.seed().unwrap());
    }

    /// A node and its host's credential; returns the host's principal name.
    fn add_host(&mut self, node: &str) -> String {
        let node = Name::new(node).unwrap();
        let name = authority::host_principal(&node).name;
        self.records.nodes.push(node);
        self.credential(&name);
        name
    }

    fn snapshot(&self) -> Snapshot {
        let catalogue = Catalogue::build(vec![], Aliases::new());
        let principals =
            authority::derive(&catalogue, &self.records, &ControllerSpec::default()).unwrap();
        (principals, self.credentials.clone())
    }
}

struct Bed {
    server: NatsServer,
    mesh: Arc<Mutex<Mesh>>,
}

impl Bed {
    /// A broker whose first users file admits the controller only, as
    /// genesis leaves it.
    fn start() -> Bed {
        let mesh = Mesh::new();
        let (principals, credentials) = mesh.snapshot();
        let first = users_file::compose(&principals, &credentials).unwrap();
        let server = NatsServer::builder()
            .tls(true)
            .config("include users.conf")
            .file("users.conf", first.text)
            .start()
            .expect("nats-server starts");
        Bed {
            server,
            mesh: Arc::new(Mutex::new(mesh)),
        }
    }

    fn bus(&self, principal: &str, seed: String) -> BusConfig {
        BusConfig {
            url: self.server.url(),
            principal: principal.into(),
            credential: ClientCredential::NKey(Secret::new(seed)),
            ca_file: Some(self.server.certificates().unwrap().ca_pem.clone()),
            inbox_prefix: Some(subjects::inbox_prefix(principal)),
            pin: None,
        }
    }

    fn config(&self, reloader: Reloader) -> ComposerConfig {
        let seed = self.mesh.lock().unwrap().seeds[CONTROLLER].clone();
        ComposerConfig::new(
            self.server.dir().join("users.conf"),
            reloader,
            self.bus(CONTROLLER, seed),
        )
    }

    fn spawn(&self, config: ComposerConfig) -> Composer {
        let mesh = self.mesh.clone();
        let source = move || {
            let s = mesh.lock().unwrap().snapshot();
            std::future::ready(Ok::<_, SourceError>(s))
        };
        Composer::spawn(config, source).0
    }

    fn add_host(&self, node: &str) -> String {
        self.mesh.lock().unwrap().add_host(node)
    }

    /// Connects as `principal` with its seed; the server's answer.
    async fn connect(&self, principal: &str) -> Result<(), mesh_bus::ConnectError> {
        let seed = self.mesh.lock().unwrap().seeds[principal].clone();
        let client = mesh_bus::connect(&self.bus(principal, seed)).await?;
        client.flush().await.unwrap();
        Ok(())
    }
}

async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, f)
        .await
        .expect("the composer answered in time")
}

async fn live(c: &Composer, generation: u64) -> ComposerStatus {
    within(c.live(generation)).await.unwrap()
}

async fn ended(c: &Composer, generation: u64) -> ComposerStatus {
    within(c.outcome(generation)).await.unwrap()
}

fn is_refusal(e: &mesh_bus::ConnectError) -> bool {
    let text = format!("{e:?}").to_lowercase();
    text.contains("authorization")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_twenty_hosts_is_one_reload_and_every_host_connects() {
    let bed = Bed::start();
    let composer = bed.spawn(bed.config(Reloader::Pid(bed.server.pid())));
    live(&composer, 0).await;

    let mut hosts = Vec::new();
    let mut last = 0;
    for i in 0..20 {
        hosts.push(bed.add_host(&format!("n{i:02}")));
        last = composer.trigger();
        // Changes a store write apart, as enrolments arrive: back to back
        // they would pile up in the trigger channel and coalesce by
        // themselves, proving nothing about the quiet period.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let s = live(&composer, last).await;
    eprintln!(
        "after the burst: compositions {}, writes {}, signals {}, live {}, not live {}",
        s.compositions, s.writes, s.signals, s.live, s.not_live
    );
    // The first composition at start, then the burst: at most one more
    // split by the scheduler.
    assert!(s.compositions <= 3, "{s:?}");
    assert!(s.signals <= 3, "{s:?}");
    assert_eq!(s.not_live, 0, "{s:?}");
    for h in &hosts {
        bed.connect(h)
            .await
            .unwrap_or_else(|e| panic!("{h} is refused after the composition is live: {e:?}"));
    }
}

/// A process that is not the broker, killed on drop.
struct NotTheBroker(Child);

impl Drop for NotTheBroker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn a_reload_that_does_not_take_is_not_live(reloader: impl FnOnce(&Bed) -> Reloader) {
    let bed = Bed::start();
    let mut config = bed.config(reloader(&bed));
    let seeds: Arc<Mutex<Vec<String>>> = Arc::default();
    let kept = seeds.clone();
    config.canary_keys = Arc::new(move || {
        let kp = nkeys::KeyPair::new_user();
        kept.lock().unwrap().push(kp.seed().unwrap());
        kp
    });
    config.confirm_within = Duration::from_millis(1500);
    // No retry during the test: each outcome is one composition's.
    config.retry_after = Duration::from_secs(3600);
    let composer = bed.spawn(config);
    let host = bed.add_host("n1");
    let g = composer.trigger();
    let s = ended(&composer, g).await;
    let Some(Outcome::NotLive { error, .. }) = &s.last else {
        panic!("reported {:?}", s.last)
    };
    assert!(
        matches!(
            **error,
            ComposeError::Publish(PublishError::NotConfirmed { .. })
        ),
        "{error:?}"
    );
    // What an operator reads names no canary seed.
    let mut said = format!("{error:?}");
    let mut cause: Option<&dyn std::error::Error> = Some(&**error);
    while let Some(c) = cause {
        said.push_str(&c.to_string());
        cause = c.source();
    }
    for seed in seeds.lock().unwrap().iter() {
        assert!(!said.contains(&seed[2..]), "a seed in {said}");
    }
    assert_eq!(s.live, 0, "{s:?}");
    assert_eq!(s.live_generation, None, "{s:?}");
    assert!(s.not_live >= 1, "{s:?}");
    assert!(s.writes >= 1, "the file was written: {s:?}");
    // The broker indeed still serves the old file.
    let e = bed.connect(&host).await.unwrap_err();
    assert!(is_refusal(&e), "{e:?}");

    // Nothing changed since, but nothing is live either: the same records
    // are published again, never taken for unchanged.
    let g = composer.trigger();
    let again = ended(&composer, g).await;
    assert!(
        matches!(again.last, Some(Outcome::NotLive { .. })),
        "{:?}",
        again.last
    );
    assert_eq!(again.writes, s.writes + 1, "{again:?}");
    assert_eq!((again.live, again.unchanged), (0, 0), "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_is_not_signalled_leaves_the_composition_not_live() {
    a_reload_that_does_not_take_is_not_live(|_| Reloader::None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signalling_a_process_that_is_not_the_broker_leaves_the_composition_not_live() {
    // `sleep` ignores nothing: SIGHUP ends it, the broker hears nothing.
    let other = NotTheBroker(Command::new("sleep").arg("600").spawn().unwrap());
    let pid = other.0.id();
    a_reload_that_does_not_take_is_not_live(|_| Reloader::Pid(pid)).await;
    drop(other);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_composition_that_is_not_live_is_tried_again_without_a_trigger() {
    let bed = Bed::start();
    let mut config = bed.config(Reloader::None);
    config.confirm_within = Duration::from_millis(200);
    config.retry_after = Duration::from_millis(100);
    let composer = bed.spawn(config);
    // Only the composition at start was asked for.
    let s = within(composer.wait_for(|s| s.not_live >= 3))
        .await
        .unwrap();
    assert_eq!(s.live, 0, "{s:?}");
    assert!(s.writes >= 3, "each try writes the file again: {s:?}");
}

/// A broker that watches its file, played by the test: it reloads once the
/// file names `key`, a moment after the composer wrote it.
async fn reload_when_written(bed: &Bed, key: &str) {
    let path = bed.server.dir().join("users.conf");
    within(async {
        while !std::fs::read_to_string(&path).unwrap().contains(key) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // Later than the canary's first tries: they are refused, and retried.
    tokio::time::sleep(Duration::from_millis(300)).await;
    bed.server.reload().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_reloads_by_itself_a_moment_later_is_waited_for() {
    let bed = Bed::start();
    // Before the start: the composition at start is the one with the host.
    let host = bed.add_host("n1");
    let key = match &bed.mesh.lock().unwrap().credentials[&host] {
        UserCredential::NKey(k) => k.clone(),
        UserCredential::Password(_) => unreachable!(),
    };
    let composer = bed.spawn(bed.config(Reloader::None));
    let (s, ()) = tokio::join!(live(&composer, 0), reload_when_written(&bed, &key));
    assert!(matches!(s.last, Some(Outcome::Live { .. })), "{:?}", s.last);
    assert_eq!(
        (s.writes, s.signals, s.live),
        (1, 0, 1),
        "nothing is sent: {s:?}"
    );
    bed.connect(&host).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_command_makes_the_composition_live() {
    let bed = Bed::start();
    let reloader = Reloader::Command {
        program: mesh_testkit::nats_server_binary().unwrap(),
        args: vec![
            "--signal".into(),
            format!("reload={}", bed.server.pid()).into(),
        ],
    };
    let composer = bed.spawn(bed.config(reloader));
    live(&composer, 0).await;
    let host = bed.add_host("n1");
    // A node whose host has not enrolled yet: named, and left out.
    bed.mesh
        .lock()
        .unwrap()
        .records
        .nodes
        .push(Name::new("n2").unwrap());
    let s = live(&composer, composer.trigger()).await;
    let Some(Outcome::Live { omitted, .. }) = &s.last else {
        panic!("{:?}", s.last)
    };
    assert_eq!(omitted, &["host_n2"]);
    bed.connect(&host).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_composition_writes_and_signals_nothing() {
    let bed = Bed::start();
    let composer = bed.spawn(bed.config(Reloader::Pid(bed.server.pid())));
    let before = live(&composer, 0).await;
    let path = bed.server.dir().join("users.conf");
    let text = std::fs::read_to_string(&path).unwrap();

    let g = composer.trigger();
    let after = ended(&composer, g).await;
    assert!(
        matches!(after.last, Some(Outcome::Unchanged { generation, .. }) if generation == g),
        "{:?}",
        after.last
    );
    assert_eq!(after.compositions, before.compositions + 1);
    assert_eq!(after.unchanged, before.unchanged + 1);
    assert_eq!(
        (after.writes, after.signals, after.live, after.not_live),
        (before.writes, before.signals, before.live, before.not_live)
    );
    // Its records are served already: a waiter for it is answered.
    assert_eq!(after.live_generation, Some(g));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_canary_is_refused_once_a_newer_composition_is_live() {
    let bed = Bed::start();
    let seeds: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut config = bed.config(Reloader::Pid(bed.server.pid()));
    let kept = seeds.clone();
    // The test keeps each canary's seed to try it later; the controller
    // keeps none beyond its composition.
    config.canary_keys = Arc::new(move || {
        let kp = nkeys::KeyPair::new_user();
        kept.lock().unwrap().push(kp.seed().unwrap());
        kp
    });
    let composer = bed.spawn(config);
    let first = live(&composer, 0).await;
    let Some(Outcome::Live { canary: older, .. }) = &first.last else {
        panic!("{:?}", first.last)
    };

    bed.add_host("n1");
    let g = composer.trigger();
    let second = live(&composer, g).await;
    let Some(Outcome::Live { canary: newer, .. }) = &second.last else {
        panic!("{:?}", second.last)
    };
    assert_ne!(older, newer);

    let seeds = seeds.lock().unwrap().clone();
    assert_eq!(seeds.len(), 2);
    let as_canary = |seed: &str| {
        let mut cfg = bed.bus("canary", seed.to_string());
        cfg.inbox_prefix = Some("_INBOX.canary".into());
        cfg
    };
    let e = mesh_bus::connect(&as_canary(&seeds[0])).await.unwrap_err();
    assert!(is_refusal(&e), "{e:?}");
    mesh_bus::connect(&as_canary(&seeds[1]))
        .await
        .expect("the newest canary is admitted");
}

/// A clustered bus over machines, played by two servers, each including a
/// users file of its own machine: the composer shares each composition
/// through the store, and the other machine's controller (its mirror)
/// writes it for its own server. Live only once both servers admit the
/// canary; without the mirror, the other server is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_composition_is_live_only_once_the_other_machine_serves_it() {
    let bed = Bed::start();
    let certs = bed.server.certificates().unwrap();
    let first = std::fs::read_to_string(bed.server.dir().join("users.conf")).unwrap();
    // The other machine's server: the same certificate, its own file.
    let other = NatsServer::builder()
        .config(format!(
            "tls {{ cert_file: {:?}, key_file: {:?} }}\ninclude users.conf",
            certs.cert_pem.display().to_string(),
            certs.key_pem.display().to_string()
        ))
        .file("users.conf", first)
        .start()
        .expect("the other server starts");
    let other_url = format!("tls://127.0.0.1:{}", other.port());
    let other_file = other.dir().join("users.conf");
    let tmp = tempfile::tempdir().unwrap();
    let store_url = format!("sqlite://{}", tmp.path().join("mesh.db").display());
    let store = mesh_store::Store::open(&store_url).await.unwrap();

    let mut config = bed.config(Reloader::Pid(bed.server.pid()));
    config.servers = vec![bed.server.url(), other_url.clone()];
    config.confirm_within = Duration::from_secs(2);
    config.retry_after = Duration::from_millis(200);
    let sharing = store.clone();
    config.share = Some(Arc::new(move |text: String| {
        let store = sharing.clone();
        Box::pin(async move {
            store
                .share_users_file(&text)
                .await
                .map_err(|e| Box::new(e) as SourceError)
        })
    }));
    let composer = bed.spawn(config);
    let host = bed.add_host("n1");
    let g = composer.trigger();
    // No controller on the other machine yet: its server still serves
    // genesis's file, and says so by name.
    let s = ended(&composer, g).await;
    match s.last {
        Some(Outcome::NotLive { error, .. }) => match &*error {
            ComposeError::Publish(PublishError::NotAdmittedBy { server, .. }) => {
                assert_eq!(*server, other_url)
            }
            e => panic!("not live for another reason: {e:?}"),
        },
        other => panic!("live without the other server: {other:?}"),
    }
    let shared = store.shared_users_file().await.unwrap().expect("shared");
    assert!(shared.text.contains(&host_key(&bed, &host)));

    // The other machine's controller keeps its file at the store's.
    let mirror = tokio::spawn(mesh_controller::composer::mirror::mirror(
        store.clone(),
        other_file.clone(),
        Reloader::Pid(other.pid()),
        Duration::from_millis(50),
    ));
    let s = live(&composer, g).await;
    mirror.abort();
    let written = std::fs::read_to_string(&other_file).unwrap();
    let revision = store.shared_users_file_revision().await.unwrap().unwrap();
    assert!(
        written.starts_with(&format!("# shared revision {revision}: ")),
        "{}",
        written.lines().next().unwrap_or_default()
    );
    assert!(s.not_live >= 1, "{s:?}");
    // Both servers admit the new host.
    bed.connect(&host).await.unwrap();
    let seed = bed.mesh.lock().unwrap().seeds[&host].clone();
    let mut cfg = bed.bus(&host, seed);
    cfg.url = other_url;
    mesh_bus::connect(&cfg)
        .await
        .expect("the other machine's server admits the new host")
        .flush()
        .await
        .unwrap();
}

/// The public key the records hold for `principal`.
fn host_key(bed: &Bed, principal: &str) -> String {
    match &bed.mesh.lock().unwrap().credentials[principal] {
        UserCredential::NKey(k) => k.clone(),
        other => panic!("{other:?}"),
    }
}

//! The server shared by the test binary: the artifact store, objects
//! stored once, and a reader per object granted exactly that object.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, object_store::ObjectInfo};
use async_nats::{Client, ConnectOptions};
use mesh_bus::Refusals;
use mesh_bus::artifacts::{self, Ensured, FetchError, Stored, Wanted};
use mesh_core::names::Name;
use mesh_core::subjects::{self, artifact};
use mesh_testkit::NatsServer;
use rand::RngCore as _;
use sha2::{Digest, Sha256};
use tempfile::TempDir;

/// Every fetch is given this long: a refusal or a mismatch must come far sooner.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(30);
pub const BIG: usize = 64 * 1024 * 1024;

/// An object a reader is granted, as its declaration would name it.
pub struct Object {
    pub name: String,
    pub nuid: String,
    pub size: u64,
    pub sha256: String,
    /// Its bytes (for a forged meta: the bytes its chunks really hold).
    pub file: PathBuf,
    pub reader: &'static str,
}

impl Object {
    pub fn wanted(&self) -> Wanted<'_> {
        Wanted {
            name: &self.name,
            nuid: &self.nuid,
            size: self.size,
            sha256: &self.sha256,
        }
    }
}

pub struct Fixture {
    pub server: NatsServer,
    pub files: TempDir,
    pub small: Object,
    pub big: Object,
    pub gone: Object,
    pub absent: Object,
    pub forged: Object,
    pub bloated: Object,
    pub garbled: Object,
    pub vanishing: Object,
}

static FIXTURE: OnceLock<Fixture> = OnceLock::new();

extern "C" fn remove_fixture_at_exit() {
    if let Some(f) = FIXTURE.get() {
        f.server.kill_and_remove();
        // A TempDir in a static is never dropped.
        let _ = std::fs::remove_dir_all(f.files.path());
    }
}

/// The shared server, its objects stored and its readers granted. Set up
/// on a thread of its own: the first caller is inside a test's runtime.
pub fn fixture() -> &'static Fixture {
    FIXTURE.get_or_init(|| {
        let f = std::thread::spawn(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap()
                .block_on(set_up())
        })
        .join()
        .expect("the fixture is set up");
        // SAFETY: registering a plain extern "C" fn that only reads the static.
        unsafe { libc::atexit(remove_fixture_at_exit) };
        f
    })
}

pub fn password(user: &str) -> String {
    format!("pw-{user}-0123456789")
}

/// The users file: `admin` may do everything; each reader exactly
/// `reader_grants` of its object.
fn users(readers: &[&Object]) -> String {
    let list = |subjects: &[String]| {
        subjects
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut text = format!(
        "authorization {{ users = [\n  {{ user: \"admin\", password: {:?}, permissions: {{ publish: \">\", subscribe: \">\" }} }}\n",
        password("admin")
    );
    for o in readers {
        let g = artifacts::reader_grants(o.reader, &o.name, &o.nuid).unwrap();
        text.push_str(&format!(
            "  {{ user: {:?}, password: {:?}, permissions: {{ publish: {{ allow: [{}] }}, subscribe: {{ allow: [{}] }} }} }}\n",
            o.reader,
            password(o.reader),
            list(&g.publish),
            list(&g.subscribe)
        ));
    }
    text.push_str("] }\n");
    text
}

/// Connects as `user` under its own inbox prefix, its refusals heard.
pub async fn connect(
    server: &NatsServer,
    user: &str,
) -> Result<(Client, Refusals), async_nats::ConnectError> {
    let refusals = Refusals::new();
    let heard = refusals.clone();
    let client = ConnectOptions::with_user_and_password(user.into(), password(user))
        .custom_inbox_prefix(subjects::inbox_prefix(user))
        .event_callback(move |event| {
            let heard = heard.clone();
            async move { heard.note(&event) }
        })
        .connect(server.url())
        .await?;
    Ok((client, refusals))
}

pub fn random_file(dir: &Path, file: &str, len: usize) -> (PathBuf, String) {
    let mut bytes = vec![0u8; len];
    rand::rng().fill_bytes(&mut bytes);
    let path = dir.join(file);
    std::fs::write(&path, &bytes).unwrap();
    (path, hex::encode(Sha256::digest(&bytes)))
}

pub fn name(artifact: &str, sha256: &str) -> String {
    artifact::object_name(
        &Name::new("test").unwrap(),
        &Name::new(artifact).unwrap(),
        sha256,
    )
}

pub async fn put_random(
    js: &jetstream::Context,
    dir: &Path,
    artifact: &str,
    len: usize,
) -> (Stored, PathBuf) {
    let (path, sha) = random_file(dir, artifact, len);
    let stored = artifacts::put(js, &name(artifact, &sha), &path)
        .await
        .unwrap();
    assert!(!stored.existed);
    (stored, path)
}

fn object(s: &Stored, file: PathBuf, reader: &'static str) -> Object {
    Object {
        name: s.name.clone(),
        nuid: s.nuid.clone(),
        size: s.size,
        sha256: s.sha256.clone(),
        file,
        reader,
    }
}

/// Publishes a name's first meta, saying what `body` says.
pub async fn publish_meta(js: &jetstream::Context, name: &str, body: Vec<u8>) {
    js.publish(artifact::meta(name), body.into())
        .await
        .unwrap()
        .await
        .unwrap();
    // Readable once the bucket has sourced it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while artifacts::stat(&js.client(), name)
        .await
        .is_ok_and(|s| s.is_none())
    {
        assert!(Instant::now() < deadline, "{name} never reached the bucket");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// An object deleted as an operator holding the whole API can: its chunks
/// purged, and — for a name to stay spent, since an object store client's
/// delete rolls up, which neither stream takes — its one meta in the metas
/// stream replaced by a deleted one.
pub async fn delete(js: &jetstream::Context, name: &str) {
    Deletion::prepare(js, name).await.run().await;
}

/// A deletion whose lookups are done: [`Deletion::run`] purges the
/// chunks in its first round trip (a test racing a fetch needs the cut
/// to land while the bytes still come).
pub struct Deletion {
    js: jetstream::Context,
    name: String,
    info: ObjectInfo,
    bucket: jetstream::stream::Stream,
    metas: jetstream::stream::Stream,
}

impl Deletion {
    pub async fn prepare(js: &jetstream::Context, name: &str) -> Deletion {
        let subject = artifact::meta(name);
        let metas = js.get_stream(artifact::METAS_STREAM).await.unwrap();
        let info: ObjectInfo = serde_json::from_slice(
            &metas
                .get_last_raw_message_by_subject(&subject)
                .await
                .unwrap()
                .payload,
        )
        .unwrap();
        let bucket = js.get_stream(artifact::STREAM).await.unwrap();
        Deletion {
            js: js.clone(),
            name: name.to_string(),
            info,
            bucket,
            metas,
        }
    }

    pub async fn run(self) {
        let Deletion {
            js,
            name,
            mut info,
            bucket,
            metas,
        } = self;
        let chunks = artifact::chunks(&artifact::Nuid::new(&info.nuid).unwrap());
        bucket.purge().filter(chunks).await.unwrap();
        let subject = artifact::meta(&name);
        metas.purge().filter(&subject).await.unwrap();
        info.deleted = true;
        js.publish(subject, serde_json::to_vec(&info).unwrap().into())
            .await
            .unwrap()
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while artifacts::stat(&js.client(), &name)
            .await
            .unwrap()
            .is_some()
        {
            assert!(Instant::now() < deadline, "{name} still stored");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

async fn set_up() -> Fixture {
    let server = NatsServer::builder()
        .config("include users.conf")
        .file("users.conf", users(&[]))
        .start()
        .unwrap();
    let files = tempfile::tempdir().unwrap();
    let dir = files.path();
    let (admin, _) = connect(&server, "admin").await.unwrap();
    let js = jetstream::new(admin);
    assert_eq!(
        artifacts::ensure_bucket(&js).await.unwrap(),
        Ensured::Created
    );

    let (small, small_file) = put_random(&js, dir, "small", 300 * 1024).await;
    let started = Instant::now();
    let (big, big_file) = put_random(&js, dir, "big", BIG).await;
    eprintln!("put 64 MiB: {:?}", started.elapsed());
    let (gone, gone_file) = put_random(&js, dir, "gone", 10 * 1024).await;
    let (vanishing, vanishing_file) = put_random(&js, dir, "vanishing", BIG / 2).await;

    // Metas that lie about their chunks (those of `real`): one names other
    // content of the same size, one a size a byte short.
    let (real, real_file) = put_random(&js, dir, "real", 5000).await;
    let (_, other_sha) = random_file(dir, "other", 5000);
    let real_bytes = std::fs::read(&real_file).unwrap();
    let short_sha = hex::encode(Sha256::digest(&real_bytes[..4999]));
    let mut lies = Vec::new();
    for (artifact, sha, size) in [("forged", &other_sha, 5000), ("bloated", &short_sha, 4999)] {
        let raw = hex::decode(sha).unwrap();
        let info = ObjectInfo {
            name: name(artifact, sha),
            description: None,
            metadata: Default::default(),
            headers: None,
            options: None,
            bucket: artifact::BUCKET.into(),
            nuid: real.nuid.clone(),
            size,
            chunks: 1,
            modified: None,
            digest: Some(format!("SHA-256={}", base64_url(&raw))),
            deleted: false,
        };
        publish_meta(&js, &info.name, serde_json::to_vec(&info).unwrap()).await;
        lies.push(Stored {
            name: info.name.clone(),
            size: size as u64,
            sha256: sha.clone(),
            nuid: real.nuid.clone(),
            existed: false,
        });
    }
    let garbled = Stored {
        name: name("garbled", &"0".repeat(64)),
        size: 1,
        sha256: "0".repeat(64),
        nuid: "Garbled0".into(),
        existed: false,
    };
    publish_meta(
        &js,
        &garbled.name,
        b"{\"name\": 5, \"size\": \"x\"}".to_vec(),
    )
    .await;
    let absent = Stored {
        name: name("absent", &"1".repeat(64)),
        nuid: "Absent0".into(),
        ..garbled.clone()
    };

    let f = Fixture {
        small: object(&small, small_file, "reader_small"),
        big: object(&big, big_file, "reader_big"),
        gone: object(&gone, gone_file, "reader_gone"),
        absent: object(&absent, dir.join("none"), "reader_absent"),
        forged: object(&lies[0], real_file.clone(), "reader_forged"),
        bloated: object(&lies[1], real_file, "reader_bloated"),
        garbled: object(&garbled, dir.join("none"), "reader_garbled"),
        vanishing: object(&vanishing, vanishing_file, "reader_vanishing"),
        server,
        files,
    };
    let readers = [
        &f.small,
        &f.big,
        &f.gone,
        &f.absent,
        &f.forged,
        &f.bloated,
        &f.garbled,
        &f.vanishing,
    ];
    f.server.write_file("users.conf", &users(&readers)).unwrap();
    f.server.reload().unwrap();
    // A failed reload is only logged: the readers connecting proves it took.
    let deadline = Instant::now() + Duration::from_secs(10);
    while connect(&f.server, "reader_garbled").await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the readers were not admitted:\n{}",
            f.server.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    f
}

fn base64_url(raw: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE.encode(raw)
}

pub async fn reader(o: &Object) -> (Client, Refusals) {
    connect(&fixture().server, o.reader).await.unwrap()
}

pub async fn admin() -> jetstream::Context {
    jetstream::new(connect(&fixture().server, "admin").await.unwrap().0)
}

/// Nothing was left in `dir`: no destination, no partial file.
pub fn assert_empty(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

pub async fn fetch_as(
    o: &Object,
    want: &Wanted<'_>,
    dest: &Path,
) -> Result<artifacts::Fetched, FetchError> {
    let (client, refusals) = reader(o).await;
    artifacts::fetch(&client, &refusals, want, dest, FETCH_TIMEOUT).await
}

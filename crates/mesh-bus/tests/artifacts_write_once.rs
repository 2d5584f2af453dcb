//! Write-once is the server's doing, not the writer's courtesy (DESIGN §6
//! Artifacts): on a real nats-server, a principal granted what a build
//! machine is granted — every meta and chunk subject — cannot make a
//! stored name point at other chunks, with or without a roll-up, nor purge
//! or extend what a reader gets; and a store an older mesh made is changed
//! in place, its objects kept and written once from then on.

use std::path::Path;
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::header::NATS_ROLLUP;
use async_nats::jetstream::{self, ErrorCode, object_store};
use mesh_bus::Refusals;
use mesh_bus::artifacts::{self, Ensured, PutError, Stored, Wanted};
use mesh_core::names::Name;
use mesh_core::subjects::artifact;
use mesh_testkit::NatsServer;
use rand::RngCore as _;
use sha2::{Digest, Sha256};

/// A build machine's artifact grants (authority's
/// `only_the_build_machine_role_writes_the_artifact_store`), and an admin.
const USERS: &str = r#"authorization { users = [
  { user: "admin", password: "admin-pw", permissions: { publish: ">", subscribe: ">" } }
  { user: "builder", password: "builder-pw", permissions: {
      publish: { allow: ["$O.ARTIFACTS.C.>", "$O.ARTIFACTS.M.>", "$JS.API.DIRECT.GET.OBJ_ARTIFACTS.$O.ARTIFACTS.M.>"] },
      subscribe: { allow: ["_INBOX.>"] } } }
] }
"#;

fn server() -> NatsServer {
    NatsServer::builder()
        .config("include users.conf")
        .file("users.conf", USERS)
        .start()
        .unwrap()
}

async fn connect(server: &NatsServer, user: &str) -> jetstream::Context {
    let client =
        async_nats::ConnectOptions::with_user_and_password(user.into(), format!("{user}-pw"))
            .connect(server.url())
            .await
            .unwrap();
    jetstream::new(client)
}

fn random_file(dir: &Path, artifact: &str, len: usize) -> (std::path::PathBuf, String, String) {
    let mut bytes = vec![0u8; len];
    rand::rng().fill_bytes(&mut bytes);
    let path = dir.join(artifact);
    std::fs::write(&path, &bytes).unwrap();
    let sha = hex::encode(Sha256::digest(&bytes));
    let name = artifact::object_name(
        &Name::new("test").unwrap(),
        &Name::new(artifact).unwrap(),
        &sha,
    );
    (path, sha, name)
}

/// Publishes `body` on `subject` and returns the server's refusal: its
/// JetStream error code and text, answered in the publish's own ack.
async fn refused(
    js: &jetstream::Context,
    subject: String,
    rollup: Option<&str>,
    body: Vec<u8>,
) -> (ErrorCode, String) {
    let mut headers = HeaderMap::new();
    if let Some(r) = rollup {
        headers.insert(NATS_ROLLUP, r);
    }
    let err = js
        .publish_with_headers(subject.clone(), headers, body.into())
        .await
        .unwrap()
        .await
        .expect_err(&format!("{subject} (roll-up {rollup:?}) was stored"));
    let j = std::error::Error::source(&err)
        .and_then(|s| s.downcast_ref::<jetstream::Error>())
        .unwrap_or_else(|| panic!("not the server's answer: {err}"));
    (j.error_code(), j.to_string())
}

async fn fetches(js: &jetstream::Context, s: &Stored, file: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let want = Wanted {
        name: &s.name,
        nuid: &s.nuid,
        size: s.size,
        sha256: &s.sha256,
    };
    let dest = dir.path().join("got");
    let got = artifacts::fetch(
        &js.client(),
        &Refusals::new(),
        &want,
        &dest,
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert_eq!(got.sha256, s.sha256);
    assert!(std::fs::read(&dest).unwrap() == std::fs::read(file).unwrap());
}

/// `s`'s meta with another nuid, size and digest: what would repoint it.
fn repointed(s: &Stored) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "name": s.name, "bucket": artifact::BUCKET, "nuid": "Other0chunks",
        "size": 3, "chunks": 1, "deleted": false,
        "digest": format!("SHA-256={}=", "A".repeat(43)),
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_meta_of_a_stored_name_is_refused_and_the_first_still_resolves() {
    let server = server();
    let admin = connect(&server, "admin").await;
    let builder = connect(&server, "builder").await;
    artifacts::ensure_bucket(&admin).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (path, _, name) = random_file(dir.path(), "bin", 300 * 1024);
    let stored = artifacts::put(&builder, &name, &path).await.unwrap();
    assert!(!stored.existed);

    let started = Instant::now();
    let meta = artifact::meta(&name);
    let (code, text) = refused(&builder, meta.clone(), None, repointed(&stored)).await;
    assert_eq!(code, ErrorCode::STREAM_STORE_FAILED, "{text}");
    assert!(
        text.contains("maximum messages per subject exceeded"),
        "{text}"
    );
    for rollup in ["sub", "all"] {
        let (code, text) = refused(&builder, meta.clone(), Some(rollup), repointed(&stored)).await;
        assert_eq!(code, ErrorCode::STREAM_ROLLUP_FAILED, "{text}");
        assert!(text.contains("rollup not permitted"), "{text}");
    }
    // Each answered in its publish's ack, not after a timeout.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    // The name still resolves to its first meta, and reads whole.
    let now = artifacts::stat(&builder.client(), &name)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (now.nuid.as_str(), now.size, now.sha256.as_deref()),
        (
            stored.nuid.as_str(),
            stored.size,
            Some(stored.sha256.as_str())
        )
    );
    fetches(&admin, &stored, &path).await;
    // An identical put again is success, naming the stored object.
    let again = artifacts::put(&builder, &name, &path).await.unwrap();
    assert!(again.existed, "{again:?}");
    assert_eq!(again.nuid, stored.nuid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_objects_chunks_are_never_purged_and_a_chunk_added_is_never_read() {
    let server = server();
    let admin = connect(&server, "admin").await;
    let builder = connect(&server, "builder").await;
    artifacts::ensure_bucket(&admin).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (path, _, name) = random_file(dir.path(), "lib", 2 * 128 * 1024 + 17);
    let stored = artifacts::put(&builder, &name, &path).await.unwrap();
    let chunks = artifact::chunks(&artifact::Nuid::new(&stored.nuid).unwrap());
    // A roll-up on the chunk subject would leave one chunk of the object.
    let (code, text) = refused(&builder, chunks.clone(), Some("sub"), b"x".to_vec()).await;
    assert_eq!(code, ErrorCode::STREAM_ROLLUP_FAILED, "{text}");
    // A chunk added after the object's own cannot be refused (a writer
    // chooses its chunk subject), and is never read.
    builder
        .publish(chunks, b"appended".to_vec().into())
        .await
        .unwrap()
        .await
        .unwrap();
    fetches(&admin, &stored, &path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_store_is_changed_in_place_its_objects_kept_and_written_once() {
    let server = server();
    let admin = connect(&server, "admin").await;
    // The store as an object store client (and mesh before) made it: one
    // stream taking its metas and roll-ups, objects written by that client.
    let bucket = admin
        .create_object_store(object_store::Config {
            bucket: artifact::BUCKET.into(),
            storage: jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (old_path, old_sha, old_name) = random_file(dir.path(), "old", 200_000);
    let info = bucket
        .put(
            old_name.as_str(),
            &mut tokio::fs::File::open(&old_path).await.unwrap(),
        )
        .await
        .unwrap();
    let old = Stored {
        name: old_name.clone(),
        size: 200_000,
        sha256: old_sha,
        nuid: info.nuid,
        existed: false,
    };
    let (gone_path, _, gone_name) = random_file(dir.path(), "gone", 1000);
    bucket
        .put(
            gone_name.as_str(),
            &mut tokio::fs::File::open(&gone_path).await.unwrap(),
        )
        .await
        .unwrap();
    bucket.delete(&gone_name).await.unwrap();

    // A command leaves it to the controller.
    assert_eq!(
        artifacts::ensure_bucket_made_with(&admin, 1).await.unwrap(),
        Ensured::Present
    );
    // The controller changes it in place.
    let Ensured::Changed(steps) = artifacts::ensure_bucket(&admin).await.unwrap() else {
        panic!("the older store was not changed");
    };
    let steps: Vec<String> = steps.iter().map(|s| s.describe()).collect();
    assert_eq!(
        steps,
        [
            "update stream OBJ_ARTIFACTS (subjects, sources, allow_rollup)",
            "create stream ARTIFACT_METAS",
            "copy the metas of OBJ_ARTIFACTS into ARTIFACT_METAS",
        ]
    );
    assert_eq!(
        artifacts::ensure_bucket(&admin).await.unwrap(),
        Ensured::Present
    );

    // Its objects read as before, and are now written once.
    let builder = connect(&server, "builder").await;
    fetches(&admin, &old, &old_path).await;
    let (code, text) = refused(&builder, artifact::meta(&old_name), None, repointed(&old)).await;
    assert_eq!(code, ErrorCode::STREAM_STORE_FAILED, "{text}");
    let again = artifacts::put(&builder, &old_name, &old_path)
        .await
        .unwrap();
    assert!(again.existed && again.nuid == old.nuid, "{again:?}");
    // A name deleted before stays spent.
    let err = artifacts::put(&builder, &gone_name, &gone_path)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, PutError::Deleted { name } if *name == gone_name),
        "{err}"
    );
    // A new object is written once too.
    let (new_path, _, new_name) = random_file(dir.path(), "new", 5000);
    let new = artifacts::put(&builder, &new_name, &new_path)
        .await
        .unwrap();
    fetches(&admin, &new, &new_path).await;
    let (code, _) = refused(&builder, artifact::meta(&new_name), None, repointed(&new)).await;
    assert_eq!(code, ErrorCode::STREAM_STORE_FAILED);
}

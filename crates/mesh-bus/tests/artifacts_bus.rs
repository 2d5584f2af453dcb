//! The artifact store on a real nats-server: writes are once per name and
//! content, and a reader holding exactly the grants for one object reads it
//! (64 MiB through flow control) and nothing else — the server refuses,
//! at once — and never gets a partial or mismatching file.
//!
//! One server serves the binary: objects are stored once, then the users
//! file gives each reader the grants of its one object.

#[path = "artifacts_bus/fixture.rs"]
mod fixture;

use std::time::{Duration, Instant};

use async_nats::ConnectOptions;
use async_nats::jetstream;
use futures::StreamExt as _;
use mesh_bus::artifacts::{
    self, BusError, Ensured, FetchError, MetaError, Mismatched, PutError, Stored, Wanted,
};
use mesh_bus::{Denied, Refusals};
use mesh_core::subjects::{self, artifact};
use mesh_testkit::NatsServer;
use sha2::{Digest, Sha256};

use fixture::{
    FETCH_TIMEOUT, Object, admin, assert_empty, connect, fetch_as, fixture, name, password,
    put_random, random_file, reader,
};

async fn fetches_whole(o: &Object) {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("artifact");
    let started = Instant::now();
    let got = fetch_as(o, &o.wanted(), &dest).await.unwrap();
    eprintln!("fetch {} bytes: {:?}", o.size, started.elapsed());
    assert_eq!((got.size, got.sha256.as_str()), (o.size, o.sha256.as_str()));
    assert!(
        std::fs::read(&dest).unwrap() == std::fs::read(&o.file).unwrap(),
        "bytes differ"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "a partial file is left"
    );
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_fetches_its_small_object() {
    fetches_whole(&fixture().small).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_fetches_64_mib_through_flow_control() {
    fetches_whole(&fixture().big).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_object_is_refused_by_the_server_at_once() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("artifact");
    let started = Instant::now();
    // reader_small knows the big object's name, nuid, size and digest.
    let err = fetch_as(&f.small, &f.big.wanted(), &dest)
        .await
        .unwrap_err();
    let took = started.elapsed();
    match &err {
        FetchError::Refused { name, refusal } => {
            assert_eq!(name, &f.big.name);
            assert_eq!(refusal.denied, Denied::Publish);
            assert_eq!(refusal.subject, artifact::meta_get(&f.big.name));
        }
        other => panic!("expected a refusal, got {other}"),
    }
    // The refusal ended the wait: no request or fetch timeout elapsed.
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert!(err.to_string().contains("is not granted"), "{err}");
    assert_empty(dir.path());
}

/// Creates a consumer on `subject` with `filter` as reader_small; the
/// server's answer, or the refusal.
async fn create_consumer(
    subject: &str,
    filter: &str,
) -> Result<serde_json::Value, mesh_bus::Refusal> {
    let (client, refusals) = reader(&fixture().small).await;
    let mut watch = refusals.watch();
    let body = serde_json::json!({
        "stream_name": artifact::STREAM,
        "config": {"name": "probe", "deliver_subject": client.new_inbox(),
                   "filter_subject": filter, "ack_policy": "none",
                   "inactive_threshold": 1_000_000_000u64},
        "action": "create",
    });
    tokio::select! {
        reply = client.request(subject.to_string(), body.to_string().into()) => {
            Ok(serde_json::from_slice(&reply.unwrap().payload).unwrap())
        }
        refusal = watch.refused(|r| r.subject == subject) => Err(refusal),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readers_grants_reach_no_other_object() {
    let f = fixture();
    let own = artifact::Nuid::new(&f.small.nuid).unwrap();
    let big = artifact::Nuid::new(&f.big.nuid).unwrap();
    let started = Instant::now();
    // Another object's chunks, under the filtered form or the unfiltered one.
    for subject in [
        artifact::consumer_create("probe", &big),
        format!("$JS.API.CONSUMER.CREATE.{}", artifact::STREAM),
        format!("$JS.API.CONSUMER.CREATE.{}.probe", artifact::STREAM),
    ] {
        let refused = create_consumer(&subject, &artifact::chunks(&big))
            .await
            .unwrap_err();
        assert_eq!(refused.subject, subject);
    }
    // Its own create subject with another object's filter in the body: the
    // server answers, refusing the mismatch (10131).
    let answer = create_consumer(
        &artifact::consumer_create("probe", &own),
        &artifact::chunks(&big),
    )
    .await
    .unwrap();
    assert_eq!(answer["error"]["err_code"], 10131, "{answer}");
    // And its own object, as granted.
    let answer = create_consumer(
        &artifact::consumer_create("probe", &own),
        &artifact::chunks(&own),
    )
    .await
    .unwrap();
    assert!(answer.get("error").is_none(), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_digest_is_a_mismatch_and_leaves_nothing() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("artifact");
    let wrong = "ab".repeat(32);
    let want = Wanted {
        sha256: &wrong,
        ..f.small.wanted()
    };
    match fetch_as(&f.small, &want, &dest).await.unwrap_err() {
        FetchError::Mismatch {
            what,
            expected,
            got,
            ..
        } => {
            assert_eq!(what, Mismatched::Sha256);
            assert_eq!((expected, got), (wrong, f.small.sha256.clone()));
        }
        other => panic!("expected a mismatch, got {other}"),
    }
    let want = Wanted {
        size: f.small.size + 1,
        ..f.small.wanted()
    };
    let err = fetch_as(&f.small, &want, &dest).await.unwrap_err();
    assert!(
        matches!(
            err,
            FetchError::Mismatch {
                what: Mismatched::Size,
                ..
            }
        ),
        "{err}"
    );
    // Stored again under another nuid than declared: said before any
    // consumer is asked for (which the grant would refuse).
    let want = Wanted {
        nuid: "Stale0",
        ..f.small.wanted()
    };
    let err = fetch_as(&f.small, &want, &dest).await.unwrap_err();
    assert!(
        matches!(
            err,
            FetchError::Mismatch {
                what: Mismatched::Nuid,
                ..
            }
        ),
        "{err}"
    );
    assert_empty(dir.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_meta_that_disagrees_with_the_declaration_is_not_read() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    // The chunks hold exactly the declared bytes, but the store's meta
    // names other content: the store is not what the declaration was made from.
    let real = hex::encode(Sha256::digest(std::fs::read(&f.forged.file).unwrap()));
    let want = Wanted {
        sha256: &real,
        ..f.forged.wanted()
    };
    match fetch_as(&f.forged, &want, &dir.path().join("a"))
        .await
        .unwrap_err()
    {
        FetchError::Mismatch { what, got, .. } => {
            assert_eq!(what, Mismatched::Sha256);
            assert_eq!(got, f.forged.sha256);
        }
        other => panic!("expected a mismatch, got {other}"),
    }
    assert_empty(dir.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_lost_on_the_way_is_a_gap_not_a_file() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    // A client whose subscriptions hold one message drops what arrives
    // while it writes: deliveries go missing as on a slow consumer.
    let refusals = Refusals::new();
    let client =
        ConnectOptions::with_user_and_password(f.big.reader.into(), password(f.big.reader))
            .custom_inbox_prefix(subjects::inbox_prefix(f.big.reader))
            .subscription_capacity(1)
            .connect(f.server.url())
            .await
            .unwrap();
    let err = artifacts::fetch(
        &client,
        &refusals,
        &f.big.wanted(),
        &dir.path().join("a"),
        FETCH_TIMEOUT,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, FetchError::Gap { .. }), "{err}");
    assert_empty(dir.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bytes_are_checked_not_only_the_meta() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("artifact");
    // The meta names the declared digest; the chunks hold other bytes.
    match fetch_as(&f.forged, &f.forged.wanted(), &dest)
        .await
        .unwrap_err()
    {
        FetchError::Mismatch { what, got, .. } => {
            assert_eq!(what, Mismatched::Sha256);
            let real = hex::encode(Sha256::digest(std::fs::read(&f.forged.file).unwrap()));
            assert_eq!(got, real);
        }
        other => panic!("expected a mismatch, got {other}"),
    }
    // The meta names the declared size; the chunks hold more: the download
    // stops as soon as it exceeds it.
    match fetch_as(&f.bloated, &f.bloated.wanted(), &dest)
        .await
        .unwrap_err()
    {
        FetchError::Mismatch { what, got, .. } => {
            assert_eq!(what, Mismatched::Size);
            assert_eq!(got, "more than 4999");
        }
        other => panic!("expected a mismatch, got {other}"),
    }
    assert_empty(dir.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_or_never_stored_object_is_missing_naming_it() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("artifact");
    let js = admin().await;
    fixture::delete(&js, &f.gone.name).await;
    let err = fetch_as(&f.gone, &f.gone.wanted(), &dest)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FetchError::Missing { name, deleted: true } if *name == f.gone.name),
        "{err}"
    );
    assert!(
        err.to_string().contains(&f.gone.name)
            && err.to_string().contains("not in the artifact store"),
        "{err}"
    );
    let err = fetch_as(&f.absent, &f.absent.wanted(), &dest)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FetchError::Missing { name, deleted: false } if *name == f.absent.name),
        "{err}"
    );
    assert_empty(dir.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_deleted_while_it_is_read_ends_the_fetch() {
    let f = fixture();
    let o = &f.vanishing;
    let dir = tempfile::tempdir().unwrap();
    let (client, refusals) = reader(o).await;
    let (want, dest) = (o.wanted(), dir.path().join("a"));
    // Every lookup before the fetch starts: once under way, the purge of
    // the chunks is the deletion's first round trip.
    let deletion = fixture::Deletion::prepare(&admin().await, &o.name).await;
    let fetch = artifacts::fetch(&client, &refusals, &want, &dest, FETCH_TIMEOUT);
    let delete = async {
        // Bytes in the partial file: the fetch is under way.
        let under_way = || {
            std::fs::read_dir(dir.path())
                .unwrap()
                .any(|e| e.unwrap().metadata().unwrap().len() > 0)
        };
        while !under_way() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        deletion.run().await;
    };
    let started = Instant::now();
    let (fetched, ()) = tokio::join!(fetch, delete);
    match fetched.unwrap_err() {
        FetchError::Truncated { got, size, .. } => assert!(got < size, "{got} of {size}"),
        other => panic!("expected the fetch cut short, got {other}"),
    }
    // Said by the server's heartbeats, long before the caller's timeout.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_empty(dir.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_meta_is_an_error() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let err = fetch_as(&f.garbled, &f.garbled.wanted(), &dir.path().join("a"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            FetchError::Bus {
                source: BusError::Meta(MetaError::Malformed(_)),
                ..
            }
        ),
        "{err}"
    );
    assert_empty(dir.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_is_written_once() {
    let f = fixture();
    let js = admin().await;
    let again = artifacts::put(&js, &f.small.name, &f.small.file)
        .await
        .unwrap();
    assert!(again.existed);
    assert_eq!(
        (again.nuid.as_str(), again.size, again.sha256.as_str()),
        (f.small.nuid.as_str(), f.small.size, f.small.sha256.as_str())
    );

    let dir = tempfile::tempdir().unwrap();
    let (a, a_sha) = random_file(dir.path(), "a", 2000);
    let (b, _) = random_file(dir.path(), "b", 2000);
    let a_name = name("written-once", &a_sha);
    // Other bytes under a name: refused before the store is asked.
    match artifacts::put(&js, &a_name, &b).await.unwrap_err() {
        PutError::NotItsContent { name, .. } => assert_eq!(name, a_name),
        other => panic!("{other}"),
    }
    // Another writer's meta under it names other bytes: ours is refused,
    // naming it.
    let other = serde_json::json!({
        "name": a_name, "bucket": artifact::BUCKET, "nuid": f.small.nuid,
        "size": 2000, "chunks": 1, "deleted": false,
        "digest": format!("SHA-256={}=", "A".repeat(43)),
    });
    fixture::publish_meta(&js, &a_name, serde_json::to_vec(&other).unwrap()).await;
    let err = artifacts::put(&js, &a_name, &a).await.unwrap_err();
    assert!(
        matches!(&err, PutError::OtherContent { name, .. } if *name == a_name),
        "{err}"
    );
    assert!(err.to_string().contains(&a_name), "{err}");
    for bad in ["x", "test/a/sha256-00", &a_name.to_uppercase()] {
        let err = artifacts::put(&js, bad, &a).await.unwrap_err();
        assert!(matches!(err, PutError::BadName { .. }), "{bad}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_puts_store_one_object() {
    fixture();
    let js = admin().await;
    let dir = tempfile::tempdir().unwrap();
    let (path, sha) = random_file(dir.path(), "c", 3 * 128 * 1024);
    let n = name("concurrent", &sha);
    let puts = (0..8).map(|_| artifacts::put(&js, &n, &path));
    let stored: Vec<Stored> = futures::future::join_all(puts)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        stored.iter().filter(|s| !s.existed).count(),
        1,
        "{stored:#?}"
    );
    assert!(
        stored.iter().all(|s| s.nuid == stored[0].nuid),
        "{stored:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_are_read_and_written_as_other_clients_do() {
    let f = fixture();
    let js = admin().await;
    let (client, _) = connect(&f.server, "admin").await.unwrap();
    let store = js.get_object_store(artifact::BUCKET).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // async-nats reads ours.
    let mut read = Vec::new();
    let mut object = store.get(&f.small.name).await.unwrap();
    tokio::io::AsyncReadExt::read_to_end(&mut object, &mut read)
        .await
        .unwrap();
    assert!(read == std::fs::read(&f.small.file).unwrap());
    // Its own put rolls the meta up, which would let a second meta replace
    // a first: the server refuses it (objects it stored before the store
    // was changed are read: `artifacts_write_once.rs`).
    let (path, sha) = random_file(dir.path(), "theirs", 200_000);
    let theirs = name("theirs", &sha);
    let err = store
        .put(
            theirs.as_str(),
            &mut tokio::fs::File::open(&path).await.unwrap(),
        )
        .await
        .unwrap_err();
    let chain = std::iter::successors(Some(&err as &dyn std::error::Error), |e| e.source())
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join(": ");
    assert!(chain.contains("rollup not permitted"), "{chain}");
    assert_eq!(artifacts::stat(&client, &theirs).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_list_holds_what_is_stored_and_not_what_was_deleted() {
    let f = fixture();
    let js = admin().await;
    let dir = tempfile::tempdir().unwrap();
    let (kept, _) = put_random(&js, dir.path(), "kept", 1000).await;
    let (dropped, path) = put_random(&js, dir.path(), "dropped", 1000).await;
    fixture::delete(&js, &dropped.name).await;
    let listing = artifacts::list(&js).await.unwrap();
    let listed = &listing.objects;
    for s in [
        &kept,
        &artifacts::put(&js, &f.big.name, &f.big.file).await.unwrap(),
    ] {
        let l = listed
            .iter()
            .find(|l| l.name == s.name)
            .unwrap_or_else(|| panic!("{} listed", s.name));
        assert_eq!(
            (l.size, l.nuid.as_str(), l.sha256.as_deref()),
            (s.size, s.nuid.as_str(), Some(s.sha256.as_str()))
        );
        assert!(l.modified.is_some());
    }
    assert!(!listed.iter().any(|l| l.name == dropped.name));
    // The garbled meta is named, not a reason to list nothing.
    let bad: Vec<_> = listing.unreadable.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(bad, [f.garbled.name.as_str()]);
    // A deleted name stays spent: written once.
    let err = artifacts::put(&js, &dropped.name, &path).await.unwrap_err();
    assert!(
        matches!(&err, PutError::Deleted { name } if *name == dropped.name),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("remove its meta from stream ARTIFACT_METAS"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_is_created_once_and_a_sealed_stream_is_named() {
    let server = NatsServer::start().unwrap();
    let js = jetstream::new(async_nats::connect(server.url()).await.unwrap());
    assert_eq!(
        artifacts::ensure_bucket(&js).await.unwrap(),
        Ensured::Created
    );
    assert_eq!(
        artifacts::ensure_bucket(&js).await.unwrap(),
        Ensured::Present
    );
    // A wiped store converges at the next start.
    js.delete_stream(artifact::STREAM).await.unwrap();
    js.delete_stream(artifact::METAS_STREAM).await.unwrap();
    assert_eq!(
        artifacts::ensure_bucket(&js).await.unwrap(),
        Ensured::Created
    );
    let mut names: Vec<String> = js.stream_names().map(Result::unwrap).collect().await;
    names.sort();
    assert_eq!(names, [artifact::METAS_STREAM, artifact::STREAM]);
    // A stream nothing can be stored in any more is named, not worked around.
    let mut sealed = js
        .get_stream(artifact::METAS_STREAM)
        .await
        .unwrap()
        .cached_info()
        .config
        .clone();
    sealed.sealed = true;
    js.update_stream(sealed).await.unwrap();
    let err = artifacts::ensure_bucket(&js).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("stream ARTIFACT_METAS is sealed: nothing can be stored in it"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_leaves_no_consumer_behind() {
    // A server of its own: no other test's consumers to tell apart.
    let server = NatsServer::start().unwrap();
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = jetstream::new(client.clone());
    artifacts::ensure_bucket(&js).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (path, sha) = random_file(dir.path(), "f", 4 * 128 * 1024);
    let stored = artifacts::put(&js, &name("leaves", &sha), &path)
        .await
        .unwrap();
    let want = Wanted {
        name: &stored.name,
        nuid: &stored.nuid,
        size: stored.size,
        sha256: &stored.sha256,
    };
    let dest = dir.path().join("got");
    artifacts::fetch(&client, &Refusals::new(), &want, &dest, FETCH_TIMEOUT)
        .await
        .unwrap();
    // No delete right is needed: the server removes it once unwatched.
    let stream = js.get_stream(artifact::STREAM).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let names: Vec<String> = stream.consumer_names().map(Result::unwrap).collect().await;
        if names.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "still there: {names:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

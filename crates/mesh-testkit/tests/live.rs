//! The test kit's servers are real: each test talks to what it started.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use mesh_testkit::{NatsServer, PgCluster, fresh_database, pid_alive};

async fn connect(server: &NatsServer) -> async_nats::Client {
    let mut opts = async_nats::ConnectOptions::new();
    if let Some(c) = server.certificates() {
        opts = opts
            .add_root_certificates(c.ca_pem.clone())
            .require_tls(true);
    }
    opts.connect(server.url())
        .await
        .expect("connect to the test server")
}

#[tokio::test]
async fn jetstream_publish_durable_consume_ack_round_trip() {
    let server = NatsServer::start().unwrap();
    let client = connect(&server).await;
    let js = jetstream::new(client);
    js.create_stream(stream::Config {
        name: "ROUND".into(),
        subjects: vec!["round.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    js.publish("round.trip", "hello".into())
        .await
        .unwrap()
        .await
        .unwrap();

    let s = js.get_stream("ROUND").await.unwrap();
    let c = s
        .create_consumer(consumer::pull::Config {
            durable_name: Some("reader".into()),
            ack_policy: consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut msgs = c.fetch().max_messages(1).messages().await.unwrap();
    let msg = msgs.next().await.expect("one message").unwrap();
    assert_eq!(msg.payload.as_ref(), b"hello");
    msg.double_ack().await.expect("the server confirms the ack");

    let info = s.consumer_info("reader").await.unwrap();
    assert_eq!(
        info.num_ack_pending, 0,
        "the ack was recorded by the server"
    );
    assert_eq!(info.delivered.stream_sequence, 1);
    assert_eq!(info.ack_floor.stream_sequence, 1);
}

#[tokio::test]
async fn tls_server_is_reached_over_tls_only() {
    let server = NatsServer::builder().tls(true).start().unwrap();
    assert!(server.url().starts_with("tls://"));
    let client = connect(&server).await;
    client.flush().await.unwrap();
    assert!(client.server_info().tls_required, "server demands TLS");
    // A client that does not trust the generated CA is refused at the handshake.
    let untrusting = async_nats::ConnectOptions::new()
        .require_tls(true)
        .connect(server.url())
        .await;
    assert!(
        untrusting.is_err(),
        "a client without the CA must not connect"
    );
}

#[tokio::test]
async fn included_file_and_reload_take_effect() {
    let server = NatsServer::builder()
        .config("include users.conf")
        .file(
            "users.conf",
            "authorization { users = [ { user: a, password: pa } ] }\n",
        )
        .start()
        .unwrap();
    let a = async_nats::ConnectOptions::with_user_and_password("a".into(), "pa".into())
        .connect(server.url())
        .await
        .expect("user a from the included file connects");
    let b = async_nats::ConnectOptions::with_user_and_password("b".into(), "pb".into())
        .connect(server.url())
        .await;
    assert!(b.is_err(), "b is not in the file yet");

    server
        .write_file(
            "users.conf",
            "authorization { users = [ { user: a, password: pa }, { user: b, password: pb } ] }\n",
        )
        .unwrap();
    let pid = server.pid();
    server.reload().unwrap();
    let mut connected = None;
    for _ in 0..100 {
        if let Ok(c) = async_nats::ConnectOptions::with_user_and_password("b".into(), "pb".into())
            .connect(server.url())
            .await
        {
            connected = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(connected.is_some(), "b connects after the reload");
    assert_eq!(server.pid(), pid, "reloaded, not restarted");
    a.flush().await.expect("a's connection survived the reload");
    assert!(server.wait_for_log("Reloaded server configuration", Duration::from_secs(5)));
}

#[tokio::test]
async fn restart_keeps_port_and_store() {
    let mut server = NatsServer::start().unwrap();
    let (port, first_pid) = (server.port(), server.pid());
    {
        let js = jetstream::new(connect(&server).await);
        js.create_stream(stream::Config {
            name: "KEEP".into(),
            subjects: vec!["keep".into()],
            ..Default::default()
        })
        .await
        .unwrap();
        js.publish("keep", "x".into()).await.unwrap().await.unwrap();
    }
    server.restart().unwrap();
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), first_pid);
    assert!(!pid_alive(first_pid), "the old process is gone");
    let js = jetstream::new(connect(&server).await);
    let mut s = js.get_stream("KEEP").await.expect("the stream survived");
    assert_eq!(s.info().await.unwrap().state.messages, 1);
}

#[test]
fn dropping_a_nats_server_leaves_no_process() {
    let server = NatsServer::start().unwrap();
    let pid = server.pid();
    let dir = server.dir().to_path_buf();
    assert!(pid_alive(pid));
    drop(server);
    assert!(!pid_alive(pid), "nats-server pid {pid} outlived its handle");
    assert!(!dir.exists(), "its directory was removed");
}

#[test]
fn parallel_servers_get_distinct_ports() {
    let servers: Vec<NatsServer> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| s.spawn(|| NatsServer::start().unwrap()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut ports: Vec<u16> = servers.iter().map(NatsServer::port).collect();
    ports.sort();
    ports.dedup();
    assert_eq!(ports.len(), 4, "{ports:?}");
}

#[tokio::test]
async fn postgres_is_real() {
    let db = fresh_database().unwrap();
    let pool = sqlx::PgPool::connect(db.url()).await.unwrap();
    let (version,): (String,) = sqlx::query_as("SELECT version()")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(version.starts_with("PostgreSQL "), "{version}");
    pool.close().await;
}

#[tokio::test]
async fn fresh_databases_are_separate() {
    let (a, b) = (fresh_database().unwrap(), fresh_database().unwrap());
    assert_ne!(a.name(), b.name());
    let pa = sqlx::PgPool::connect(a.url()).await.unwrap();
    sqlx::query("CREATE TABLE only_in_a (x int)")
        .execute(&pa)
        .await
        .unwrap();
    let pb = sqlx::PgPool::connect(b.url()).await.unwrap();
    let (n,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'only_in_a'",
    )
    .fetch_one(&pb)
    .await
    .unwrap();
    assert_eq!(n, 0);
}

#[test]
fn dropping_a_postgres_cluster_leaves_no_process() {
    let cluster = PgCluster::start().unwrap();
    let pid = cluster.pid().unwrap();
    assert!(pid_alive(pid));
    cluster.stop().unwrap();
    assert!(!pid_alive(pid));
    cluster.start_again().unwrap();
    let pid = cluster.pid().unwrap();
    drop(cluster);
    assert!(!pid_alive(pid), "postgres pid {pid} outlived its handle");
}

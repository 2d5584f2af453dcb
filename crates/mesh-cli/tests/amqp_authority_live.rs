//! Authority proven against a real RabbitMQ (TLS on, no guest): every
//! principal of the mesh `authority_live` proves on NATS is made a user
//! through the management API the controller uses, with the permissions
//! `mesh-core` renders from the same grants; the controller declares the
//! exchange and queues; then every grant is used (and its message seen
//! arriving) and every row of the same table of forbidden operations, with
//! what only AMQP could allow (configuring, the default exchange, other
//! exchanges), is refused — each refusal the channel's 403 ACCESS_REFUSED,
//! awaited (a publisher confirm, a declare-ok, a bind-ok, a consume-ok that
//! never comes), never inferred from silence.

mod authority_table;

use std::time::Duration;

use futures::StreamExt;
use lapin::options::{
    BasicCancelOptions, BasicConsumeOptions, BasicPublishOptions, ConfirmSelectOptions,
    ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
    QueuePurgeOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ExchangeKind};
use mesh_core::authority::amqp::{self, EXCHANGE, Rendered, binding_key};
use mesh_core::authority::{self, Principal};
use mesh_core::jetstream;
use mesh_core::records::ControllerSpec;
use mesh_testkit::AmqpMesh;
use mesh_testkit::bus::concrete;
use mesh_testkit::rabbitmq::ADMIN;

use authority_table::{FORBIDDEN, Op};

const WAIT: Duration = Duration::from_secs(10);

/// The mesh of `authority_table` on RabbitMQ.
async fn start_mesh() -> AmqpMesh {
    let (catalogue, records) = authority_table::mesh();
    let spec = ControllerSpec::default();
    let principals = authority::derive(&catalogue, &records, &spec).unwrap();
    let objects = jetstream::derive(&catalogue, &records, &spec).unwrap();
    AmqpMesh::start(principals, objects).await
}

/// The test's own administrator, hearing every routing key of the exchange.
struct Observer {
    conn: Connection,
    publisher: Channel,
    heard: lapin::Consumer,
}

impl Observer {
    async fn start(mesh: &AmqpMesh) -> Observer {
        let conn = mesh.connect(ADMIN).await;
        let ch = conn.create_channel().await.unwrap();
        let heard = own_queue_consumer(&ch, "#").await.unwrap();
        let publisher = conn.create_channel().await.unwrap();
        publisher
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        Observer {
            conn,
            publisher,
            heard,
        }
    }

    async fn publish(&self, key: &str, payload: &[u8]) {
        publish(&self.publisher, EXCHANGE, key, payload)
            .await
            .unwrap_or_else(|e| panic!("the observer publishes {key}: {e}"));
    }

    /// Waits for `payload` under `key`; other messages are passed over.
    async fn hears(&mut self, key: &str, payload: &[u8]) {
        expect_delivery(&mut self.heard, key, payload, "the observer").await;
    }
}

async fn expect_delivery(consumer: &mut lapin::Consumer, key: &str, payload: &[u8], who: &str) {
    let found = tokio::time::timeout(WAIT, async {
        while let Some(d) = consumer.next().await {
            let d = d.unwrap();
            if d.data == payload {
                return Some(d.routing_key.to_string());
            }
        }
        None
    })
    .await;
    match found {
        Ok(Some(k)) => assert_eq!(k, key, "{who}: the routing key"),
        Ok(None) => panic!("{who}: the consumer ended before {key}"),
        Err(_) => panic!("{who}: no delivery of {key} within {WAIT:?}"),
    }
}

/// A server-named exclusive queue bound to the exchange with `key`, consumed.
async fn own_queue_consumer(ch: &Channel, key: &str) -> Result<lapin::Consumer, lapin::Error> {
    let q = ch
        .queue_declare(
            "".into(),
            QueueDeclareOptions {
                exclusive: true,
                auto_delete: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    ch.queue_bind(
        q.name().clone(),
        EXCHANGE.into(),
        key.into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await?;
    consume(ch, q.name().as_str()).await
}

async fn consume(ch: &Channel, queue: &str) -> Result<lapin::Consumer, lapin::Error> {
    ch.basic_consume(
        queue.into(),
        "".into(),
        BasicConsumeOptions {
            no_ack: true,
            ..BasicConsumeOptions::default()
        },
        FieldTable::default(),
    )
    .await
}

/// A publish on a confirming channel, awaited: the broker's ack, or the
/// error that closed the channel.
async fn publish(ch: &Channel, exchange: &str, key: &str, payload: &[u8]) -> Result<(), String> {
    let confirm = ch
        .basic_publish(
            exchange.into(),
            key.into(),
            BasicPublishOptions::default(),
            payload,
            BasicProperties::default(),
        )
        .await
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(WAIT, confirm).await {
        Ok(Ok(c)) if c.is_ack() => Ok(()),
        Ok(Ok(c)) => Err(format!("not acknowledged: {c:?}")),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => {
            panic!("no confirm or refusal of {key} within {WAIT:?}: silence is not an answer")
        }
    }
}

async fn confirming(conn: &Connection) -> Channel {
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    ch
}

/// The refusal must be the broker's 403 naming `what`.
fn refused<T>(who: &str, doing: &str, result: Result<T, String>, what: &str) {
    match result {
        Ok(_) => panic!("{who} was allowed to {doing}"),
        Err(e) => {
            assert!(
                e.contains("ACCESS_REFUSED") && e.contains(what),
                "{who} {doing}: expected ACCESS_REFUSED naming {what:?}, got {e}"
            );
        }
    }
}

fn text<T>(r: Result<T, lapin::Error>) -> Result<T, String> {
    r.map_err(|e| e.to_string())
}

#[derive(Default)]
struct Tally {
    allowed: usize,
    refused: usize,
    nats_only: usize,
    /// Rows refused on NATS by allow_responses, left to the asker on AMQP.
    answers: usize,
}

async fn allowed(mesh: &AmqpMesh, p: &Principal, observer: &mut Observer, tally: &mut Tally) {
    let conn = mesh.connect(&p.name).await;
    let r = amqp::render(p, &mesh.objects);
    let queues = amqp::topology(&mesh.objects);
    for (i, x) in r.renderings.iter().enumerate() {
        let payload = format!("{} {} {i}", p.name, x.subject).into_bytes();
        match &x.rendered {
            Rendered::TopicWrite { .. } => {
                let key = concrete(&x.subject);
                let ch = confirming(&conn).await;
                publish(&ch, EXCHANGE, &key, &payload)
                    .await
                    .unwrap_or_else(|e| panic!("{} publishing {key} ({}): {e}", p.name, x.grant));
                observer.hears(&key, &payload).await;
            }
            // Proven by the controller's declaring every queue.
            Rendered::TopicRead { .. } if x.grant == "binds" => {}
            Rendered::TopicRead { .. } => {
                let ch = conn.create_channel().await.unwrap();
                let key = binding_key(&x.subject);
                let mut c = own_queue_consumer(&ch, &key)
                    .await
                    .unwrap_or_else(|e| panic!("{} binding {key}: {e}", p.name));
                let sent = concrete(&x.subject);
                observer.publish(&sent, &payload).await;
                expect_delivery(&mut c, &sent, &payload, &p.name).await;
                let _ = ch.close(200, "done".into()).await;
            }
            Rendered::ReadQueue { queue } => {
                let ch = conn.create_channel().await.unwrap();
                let mut c = consume(&ch, queue)
                    .await
                    .unwrap_or_else(|e| panic!("{} consuming {queue}: {e}", p.name));
                let spec = queues.iter().find(|q| &q.name == queue).unwrap();
                let sent = concrete(&spec.bindings[0]);
                observer.publish(&sent, &payload).await;
                expect_delivery(&mut c, &sent, &payload, &p.name).await;
                ch.basic_cancel(c.tag(), BasicCancelOptions::default())
                    .await
                    .unwrap();
                let _ = ch.close(200, "done".into()).await;
            }
            Rendered::NatsOnly { .. } => {
                tally.nats_only += 1;
                continue;
            }
        }
        tally.allowed += 1;
    }
    let _ = conn.close(200, "done".into()).await;
}

/// The shared table's rows for `p`, each on a channel of its own (a refusal
/// closes it).
async fn forbidden(mesh: &AmqpMesh, p: &Principal, tally: &mut Tally) {
    let conn = mesh.connect(&p.name).await;
    for (_, op, subject) in FORBIDDEN.iter().filter(|(w, _, _)| *w == p.name) {
        if subject.starts_with('$') {
            // JetStream's API: no such thing on AMQP.
            tally.nats_only += 1;
            continue;
        }
        match op {
            Op::Pub
                if subject.starts_with("_INBOX.") && p.permissions.allow_responses.is_some() =>
            {
                // NATS ties an answer to the request it answers; AMQP cannot
                // without the default exchange (which reaches every queue),
                // so an answerer may write into inboxes and the asker takes
                // only the answer to the id it sent (amqp::render).
                let ch = confirming(&conn).await;
                publish(&ch, EXCHANGE, subject, b"unasked")
                    .await
                    .unwrap_or_else(|e| {
                        panic!("{}: an answerer writes inboxes on AMQP: {e}", p.name)
                    });
                tally.answers += 1;
                continue;
            }
            Op::Pub => {
                let ch = confirming(&conn).await;
                let r = publish(&ch, EXCHANGE, subject, b"forbidden").await;
                refused(
                    &p.name,
                    &format!("publish {subject}"),
                    r,
                    &format!("access to topic '{subject}' in exchange '{EXCHANGE}'"),
                );
            }
            Op::Sub => {
                let ch = conn.create_channel().await.unwrap();
                let deliver = subject.strip_prefix("mesh.deliver.");
                match deliver.map(|c| format!("{}{c}", amqp::QUEUE_PREFIX)) {
                    Some(queue) => {
                        // A queue not made yet (an enrolling node's) is
                        // refused as one that is: permission comes first.
                        refused(
                            &p.name,
                            &format!("consume {queue}"),
                            text(consume(&ch, &queue).await),
                            &format!("access to queue '{queue}'"),
                        );
                    }
                    None => {
                        let key = binding_key(subject);
                        refused(
                            &p.name,
                            &format!("bind {key}"),
                            text(own_queue_consumer(&ch, &key).await),
                            &format!("access to topic '{key}' in exchange '{EXCHANGE}'"),
                        );
                    }
                }
            }
        }
        tally.refused += 1;
    }
    let _ = conn.close(200, "done".into()).await;
}

/// What only an AMQP principal could try: configuring, the default exchange
/// (it reaches every queue by name), other exchanges, another's queue.
async fn amqp_only(mesh: &AmqpMesh, p: &Principal, tally: &mut Tally) {
    let conn = mesh.connect(&p.name).await;
    let who = p.name.as_str();
    let controller = p.name == authority::CONTROLLER;
    let node_queue = format!("{}n1", amqp::QUEUE_PREFIX);
    let ch = confirming(&conn).await;
    refused(
        who,
        "publish through the default exchange",
        publish(&ch, "", &node_queue, b"forbidden").await,
        "access to exchange 'amq.default'",
    );
    let ch = confirming(&conn).await;
    refused(
        who,
        "publish to amq.topic",
        publish(&ch, "amq.topic", "mesh.control.report.n1", b"forbidden").await,
        "access to exchange 'amq.topic'",
    );
    let ch = conn.create_channel().await.unwrap();
    let q = ch
        .queue_declare(
            "".into(),
            QueueDeclareOptions {
                exclusive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    refused(
        who,
        "bind to amq.fanout",
        text(
            ch.queue_bind(
                q.name().clone(),
                "amq.fanout".into(),
                "".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await,
        ),
        "access to exchange 'amq.fanout'",
    );
    tally.refused += 3;
    if controller {
        return;
    }
    let own = format!("{}{}", amqp::QUEUE_PREFIX, "made-by-another");
    let ch = conn.create_channel().await.unwrap();
    refused(
        who,
        "declare a queue",
        text(
            ch.queue_declare(
                own.as_str().into(),
                QueueDeclareOptions {
                    durable: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await,
        ),
        &format!("access to queue '{own}'"),
    );
    let ch = conn.create_channel().await.unwrap();
    refused(
        who,
        "declare the exchange",
        text(
            ch.exchange_declare(
                EXCHANGE.into(),
                ExchangeKind::Topic,
                ExchangeDeclareOptions {
                    durable: true,
                    ..ExchangeDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await,
        ),
        &format!("access to exchange '{EXCHANGE}'"),
    );
    let control = format!("{}controller_control", amqp::QUEUE_PREFIX);
    let ch = conn.create_channel().await.unwrap();
    refused(
        who,
        "delete the controller's queue",
        text(
            ch.queue_delete(control.as_str().into(), QueueDeleteOptions::default())
                .await,
        ),
        &format!("access to queue '{control}'"),
    );
    let ch = conn.create_channel().await.unwrap();
    refused(
        who,
        "purge the controller's queue",
        text(
            ch.queue_purge(control.as_str().into(), QueuePurgeOptions::default())
                .await,
        ),
        &format!("access to queue '{control}'"),
    );
    tally.refused += 4;
    let _ = conn.close(200, "done".into()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_permission_matrix() {
    let mesh = start_mesh().await;
    let mut observer = Observer::start(&mesh).await;
    let mut tally = Tally::default();
    for p in &mesh.principals {
        allowed(&mesh, p, &mut observer, &mut tally).await;
        forbidden(&mesh, p, &mut tally).await;
        amqp_only(&mesh, p, &mut tally).await;
    }
    // Every row of the shared table named a principal of this mesh and ran.
    let rows = FORBIDDEN
        .iter()
        .filter(|(w, _, _)| mesh.principals.iter().any(|p| p.name == *w))
        .count();
    assert_eq!(rows, FORBIDDEN.len());
    assert!(
        tally.allowed + tally.refused >= 100,
        "{}",
        tally.allowed + tally.refused
    );
    observer.conn.close(200, "done".into()).await.unwrap();
    println!(
        "amqp authority: {} allowed, {} refused, 0 wrong ({} grants and rows of JetStream's API have no AMQP counterpart; {} unasked answers left to the asker)",
        tally.allowed, tally.refused, tally.nats_only, tally.answers
    );
}

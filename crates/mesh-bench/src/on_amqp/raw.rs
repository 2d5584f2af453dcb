//! Raw RabbitMQ on the same broker in the same run: N durable queues each
//! keeping one message (as a node's declaration queue does), N persistent
//! messages published with publisher confirms, each consumed and acked —
//! what the mesh's fan-out is a fraction of. The raw user is made through
//! the management API with every permission.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt as _;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, ExchangeKind};
use mesh_controller::Genesis;
use mesh_core::authority::amqp::{self, AmqpPermissions};
use serde::Serialize;
use tokio::sync::Mutex;

use crate::stats::Spread;

const USER: &str = "bench_raw";
const EXCHANGE: &str = "bench.raw";
/// Channels the consumers are spread over.
const CHANNELS: usize = 16;

#[derive(Debug, Clone, Serialize)]
pub struct RawAmqp {
    pub messages: usize,
    /// Per message: ms from the first publish to its ack sent, after its
    /// confirm.
    pub acked: Spread,
    /// ms from the first publish to the last confirm.
    pub confirmed_ms: f64,
    pub missing: usize,
}

pub async fn run(
    genesis: &Genesis,
    management: &mesh_bus::amqp::Management,
    n: usize,
) -> anyhow::Result<RawAmqp> {
    let password = hex::encode(rand::random::<[u8; 16]>());
    let hash = amqp::password_hash(rand::random(), password.as_bytes());
    let all = AmqpPermissions {
        user: USER.into(),
        configure: ".*".into(),
        write: ".*".into(),
        read: ".*".into(),
        topic_write: ".*".into(),
        topic_read: ".*".into(),
        renderings: Vec::new(),
    };
    let m = management.clone();
    tokio::task::spawn_blocking(move || {
        m.put_user(USER, &hash, false)?;
        m.set_permissions(&all)
    })
    .await??;
    let config = mesh_bus::amqp::AmqpConfig {
        host: "127.0.0.1".into(),
        port: genesis.port,
        user: USER.into(),
        password: mesh_bus::Secret::new(password),
        trust: mesh_bus::amqp::Trust::Pin(mesh_bus::CertPin::from_hex(&genesis.cert_sha256)?),
    };
    let conn = mesh_bus::amqp::connect(&config).await?;
    let ch = conn.create_channel().await?;
    ch.exchange_declare(
        EXCHANGE.into(),
        ExchangeKind::Topic,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await?;
    let mut args = FieldTable::default();
    args.insert("x-max-length".into(), AMQPValue::LongLongInt(1));
    args.insert(
        "x-overflow".into(),
        AMQPValue::LongString("drop-head".into()),
    );
    for i in 0..n {
        let q = format!("{EXCHANGE}.{i}");
        ch.queue_declare(
            q.as_str().into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            args.clone(),
        )
        .await?;
        ch.queue_bind(
            q.as_str().into(),
            EXCHANGE.into(),
            format!("raw.{i}").as_str().into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    }
    // The consumers, bound before anything is published.
    let acked = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let count = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(std::sync::OnceLock::<Instant>::new());
    let mut consuming = Vec::new();
    for c in 0..CHANNELS {
        let cch = conn.create_channel().await?;
        cch.basic_qos(256, BasicQosOptions::default()).await?;
        for i in (c..n).step_by(CHANNELS) {
            let q = format!("{EXCHANGE}.{i}");
            let mut deliveries = cch
                .basic_consume(
                    q.as_str().into(),
                    format!("raw-{i}").as_str().into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await?;
            let (acked, count, start) = (acked.clone(), count.clone(), start.clone());
            consuming.push(tokio::spawn(async move {
                if let Some(Ok(d)) = deliveries.next().await
                    && d.ack(BasicAckOptions::default()).await.is_ok()
                {
                    let at = start
                        .get()
                        .map_or(0.0, |s| s.elapsed().as_secs_f64() * 1000.0);
                    acked.lock().await.push(at);
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
    }
    let pch = conn.create_channel().await?;
    pch.confirm_select(ConfirmSelectOptions::default()).await?;
    let t0 = Instant::now();
    let _ = start.set(t0);
    let mut confirms = Vec::with_capacity(n);
    for i in 0..n {
        let c = pch
            .basic_publish(
                EXCHANGE.into(),
                format!("raw.{i}").as_str().into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..Default::default()
                },
                b"raw",
                BasicProperties::default().with_delivery_mode(2),
            )
            .await?;
        confirms.push(c);
    }
    for c in confirms {
        let confirmation = c.await?;
        anyhow::ensure!(
            confirmation.is_ack(),
            "the broker did not take a raw message"
        );
    }
    let confirmed_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while count.load(Ordering::Relaxed) < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for t in consuming {
        t.abort();
    }
    let got = acked.lock().await.clone();
    let missing = n.saturating_sub(got.len());
    let _ = conn.close(200, "raw done".into()).await;
    let m = management.clone();
    let _ = tokio::task::spawn_blocking(move || m.delete_user(USER))
        .await
        .context("removing the raw user")?;
    Ok(RawAmqp {
        messages: n,
        acked: Spread::of(got),
        confirmed_ms,
        missing,
    })
}

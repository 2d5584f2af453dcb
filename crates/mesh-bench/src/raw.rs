//! Raw JetStream on the same server in the same run: N subjects published
//! into a stream holding one message per subject (as NODES does), each
//! consumed by its own durable push consumer and double-acked (as a host
//! does). What the mesh's fan-out is a fraction of.
//!
//! The raw user is spliced into the users file the controller composed
//! last (the controller is stopped by then, so nothing rewrites it), with
//! no permissions: everything allowed, in the mesh's own account.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use async_nats::jetstream::{self, consumer::AckPolicy, consumer::push, stream};
use futures::StreamExt as _;
use mesh_bus::{BusConfig, CertPin, ClientCredential, Secret};
use mesh_controller::{Genesis, genesis};
use serde::Serialize;
use tokio::sync::Mutex;

use crate::mesh::{Broker, connect_retrying};
use crate::stats::Spread;

const STREAM: &str = "BENCH_RAW";
/// Connections the consumers are spread over.
pub const CONNECTIONS: usize = 64;

#[derive(Debug, Clone, Serialize)]
pub struct RawResult {
    pub messages: usize,
    pub connections: usize,
    /// Per message: ms from the first publish to its ack confirmed.
    pub acked: Spread,
    pub missing: usize,
}

/// Adds a user with `key` and no restriction to the users file text.
fn with_raw_user(text: &str, key: &str) -> anyhow::Result<String> {
    let end = "    ]\n  }\n}\n";
    let body = text
        .strip_suffix(end)
        .context("the users file does not end as the composer writes it")?;
    Ok(format!(
        "{body}      # mesh-bench: raw JetStream\n      {{\n        nkey: \"{key}\"\n      }}\n{end}"
    ))
}

pub async fn run(genesis: &Genesis, broker: &Broker, n: usize) -> anyhow::Result<RawResult> {
    let users = genesis.path(genesis::USERS_FILE);
    let text = std::fs::read_to_string(&users).context("reading the users file")?;
    let kp = nkeys::KeyPair::new_user();
    std::fs::write(&users, with_raw_user(&text, &kp.public_key())?)?;
    broker.reload()?;
    let bus = BusConfig {
        url: genesis.local_url(),
        principal: "bench-raw".into(),
        credential: ClientCredential::NKey(Secret::new(kp.seed()?)),
        ca_file: None,
        inbox_prefix: None,
        pin: Some(CertPin::from_hex(&genesis.cert_sha256)?),
    };
    let result = measure(&bus, n).await;
    // The file as it was: the next composition would replace it anyway.
    std::fs::write(&users, text)?;
    broker.reload()?;
    result
}

async fn measure(bus: &BusConfig, n: usize) -> anyhow::Result<RawResult> {
    let connections = n.clamp(1, CONNECTIONS);
    let mut clients = Vec::with_capacity(connections);
    for _ in 0..connections {
        clients.push(connect_retrying(bus, Duration::from_secs(30)).await?);
    }
    let js = jetstream::new(clients[0].clone());
    let _ = js.delete_stream(STREAM).await;
    let stream = js
        .create_stream(stream::Config {
            name: STREAM.into(),
            subjects: vec!["bench.raw.>".into()],
            max_messages_per_subject: 1,
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .context("creating the raw stream")?;

    // Consumers, each bound by its own subscription before anything is
    // published.
    let consumers = futures::stream::iter(0..n)
        .map(|i| {
            let stream = stream.clone();
            let js = jetstream::new(clients[i % connections].clone());
            async move {
                stream
                    .create_consumer(push::Config {
                        durable_name: Some(format!("raw-{i}")),
                        deliver_subject: format!("bench.deliver.{i}"),
                        filter_subject: format!("bench.raw.{i}"),
                        ack_policy: AckPolicy::Explicit,
                        ..Default::default()
                    })
                    .await
                    .context("creating a raw consumer")?;
                let consumer: jetstream::consumer::Consumer<push::Config> = js
                    .get_consumer_from_stream(format!("raw-{i}"), STREAM)
                    .await
                    .context("binding a raw consumer")?;
                let messages = consumer.messages().await.context("subscribing")?;
                anyhow::Ok((i, messages))
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;

    let start = Arc::new(Mutex::new(None::<Instant>));
    let done = Arc::new(AtomicUsize::new(0));
    let all_done = Arc::new(tokio::sync::Notify::new());
    let times = Arc::new(std::sync::Mutex::new(Vec::with_capacity(n)));
    let mut tasks = tokio::task::JoinSet::new();
    for c in consumers {
        let (_, mut messages) = c?;
        let (start, done, all_done, times) =
            (start.clone(), done.clone(), all_done.clone(), times.clone());
        tasks.spawn(async move {
            if let Some(Ok(m)) = messages.next().await
                && m.double_ack().await.is_ok()
            {
                let t0 = start.lock().await.unwrap_or_else(Instant::now);
                times
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(t0.elapsed().as_secs_f64() * 1000.0);
                if done.fetch_add(1, Ordering::SeqCst) + 1 == n {
                    all_done.notify_one();
                }
            }
        });
    }

    let payload = vec![b'x'; 600];
    *start.lock().await = Some(Instant::now());
    let mut acks = Vec::with_capacity(n);
    for i in 0..n {
        let js = jetstream::new(clients[i % connections].clone());
        acks.push(
            js.publish(format!("bench.raw.{i}"), payload.clone().into())
                .await
                .context("publishing")?,
        );
    }
    for a in acks {
        a.await.context("a raw publish was not stored")?;
    }
    let within = Duration::from_secs(60) + Duration::from_millis(10 * n as u64);
    let finished = tokio::time::timeout(within, all_done.notified()).await;
    tasks.abort_all();
    let times = std::mem::take(&mut *times.lock().unwrap_or_else(|p| p.into_inner()));
    let missing = n - times.len();
    if finished.is_err() && times.is_empty() {
        bail!("no raw message was delivered and acknowledged within {within:?}");
    }
    let _ = js.delete_stream(STREAM).await;
    for c in clients {
        let _ = c.drain().await;
    }
    Ok(RawResult {
        messages: n,
        connections,
        acked: Spread::of(times),
        missing,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_raw_user_goes_inside_the_account() {
        let text = "accounts {\n  MESH: {\n    jetstream: enabled\n    users: [\n      {\n        nkey: \"UA\"\n      }\n    ]\n  }\n}\n";
        let out = super::with_raw_user(text, "UB").unwrap();
        assert!(
            out.ends_with("        nkey: \"UB\"\n      }\n    ]\n  }\n}\n"),
            "{out}"
        );
        assert!(super::with_raw_user("nonsense", "UB").is_err());
    }
}

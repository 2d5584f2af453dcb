//! Running an enrolled host: connect as `host_<node>` (retrying while the
//! broker refuses or cannot be reached), heartbeat on core NATS, bind the
//! node's push consumer on NODES and take its declarations.

use std::future::Future;
use std::time::Duration;

use async_nats::Event;
use mesh_bus::seam::{Bus, NatsSide};
use mesh_bus::{BusConfig, ConnectError};
use mesh_core::enrolment::Heartbeat;
use mesh_core::subjects;

use std::sync::Arc;

use crate::apply::{Applier, ApplyError};
use crate::backoff::Backoff;
use crate::dial::{self, GaveUp};
use crate::driver::{Driver, DriverError, DriverOptions};
use crate::state::{HostState, StateError, unix_ms};

#[derive(Debug, Clone)]
pub struct HostOptions {
    pub heartbeat_every: Duration,
    /// First ceiling of the jittered backoff (connect, bind, reconnect).
    pub backoff_start: Duration,
    /// Its cap.
    pub backoff_max: Duration,
    /// How modules are run (`no_op` for simulated hosts).
    pub driver: DriverOptions,
    /// Where other nodes reach this node (`--advertise`): reported until
    /// recorded, and again when it changes.
    pub advertise: Option<String>,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            heartbeat_every: mesh_core::liveness::HEARTBEAT_EVERY,
            backoff_start: Duration::from_millis(250),
            backoff_max: Duration::from_secs(10),
            driver: DriverOptions::default(),
            advertise: None,
        }
    }
}

/// How long one connect attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the stop waits for a declaration being applied.
const APPLY_AT_STOP: Duration = Duration::from_secs(15);

/// How long the stop waits for the bus connection to drain.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error(
        "the broker at {url} presented a certificate that does not match the pinned fingerprint (sha256 {expected}, presented {got}); the address reaches another server, or the broker's certificate changed: check the address, or forget the node and enrol it again with a new token"
    )]
    CertificateMismatch {
        url: String,
        expected: String,
        got: String,
    },
    #[error(transparent)]
    Connect(ConnectError),
    #[error("{path} names no bus address; enrol again into an empty directory")]
    NoAddress { path: std::path::PathBuf },
    #[error("could not start the process driver")]
    Driver(#[from] DriverError),
    #[error(transparent)]
    Apply(#[from] ApplyError),
}

/// Runs the host until `shutdown` resolves; then drains and returns `Ok`.
/// Only what retrying cannot fix ends it early: a pin mismatch, a broken
/// state directory.
pub async fn run(
    state: &HostState,
    opts: &HostOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), HostError> {
    let mut configs: Vec<BusConfig> = state
        .bus_urls
        .iter()
        .map(|u| state.bus_config_for(u))
        .collect::<Result<_, _>>()?;
    let on_amqp = configs
        .first()
        .is_some_and(|c| mesh_bus::seam::kind_of(c).ok() == Some(mesh_core::bus::BusKind::Amqp));
    tokio::pin!(shutdown);
    // Before anything else: what a previous run left behind is killed now,
    // not after the broker answers.
    let driver = Driver::new(&state.dir, opts.driver.clone()).await?;
    let refusals = mesh_bus::Refusals::new();
    let applier = Arc::new(Applier::new(
        state,
        driver,
        opts.advertise.clone(),
        refusals.clone(),
    )?);
    applier.remove_undeclared_containers().await;
    if on_amqp {
        let ended =
            crate::run_amqp::run(state, opts, &configs, applier.clone(), shutdown.as_mut()).await?;
        match ended {
            crate::run_amqp::Ended::Stopped => return Ok(()),
            // Onto NATS with the same key, the modules still running.
            crate::run_amqp::Ended::Moved => {
                configs = applier
                    .bus_addresses()
                    .iter()
                    .map(|u| state.bus_config_for(u))
                    .collect::<Result<_, _>>()?;
            }
        }
    }

    let mut backoff = Backoff::new(opts.backoff_start, opts.backoff_max);
    let node = state.node.clone();
    // Every (re)connection after the first: the host reports again, so a
    // broker restarted (or a controller that lost reports) hears it.
    let (reconnected_tx, reconnected) = tokio::sync::mpsc::unbounded_channel::<()>();
    let reconnects = mesh_bus::Reconnects::new(opts.backoff_start, opts.backoff_max);
    let closed = mesh_bus::Closed::new();
    let connecting = dial::connect_until(&configs, None, &mut backoff, CONNECT_TIMEOUT, |o| {
        let node = node.clone();
        let reconnected_tx = reconnected_tx.clone();
        let heard = reconnects.clone();
        let refused = refusals.clone();
        let closed = closed.clone();
        reconnects
            .apply(o.max_reconnects(None))
            .event_callback(move |event| {
                let node = node.clone();
                let reconnected = reconnected_tx.clone();
                heard.note(&event);
                refused.note(&event);
                let closed = closed.clone();
                async move {
                    log_event(&node, &event);
                    // After its line: the stop returns once it is said.
                    closed.note(&event);
                    if matches!(event, Event::Connected) {
                        let _ = reconnected.send(());
                    }
                }
            })
    });
    let client = tokio::select! {
        c = connecting => c.map_err(|g| match g {
            GaveUp::Pin { url, expected, got } => HostError::CertificateMismatch { url, expected, got },
            GaveUp::Fatal(e) | GaveUp::Deadline { last: e, .. } => HostError::Connect(e),
            GaveUp::NoAddress => HostError::NoAddress { path: state.dir.join(crate::state::HOST_FILE) },
        })?,
        () = &mut shutdown => {
            applier.driver().stop_all().await;
            return Ok(());
        }
    };
    tracing::info!(node = %state.node, principal = %state.principal(), "connected to the bus");

    let bus = Arc::new(Bus::Nats(NatsSide::new(client.clone())));
    let work = serve(&bus, state, opts, &applier, reconnected, true);
    tokio::select! {
        _ = work => {}
        () = &mut shutdown => {}
    }
    stop_modules(state, &applier).await;
    // Bounded: with the broker gone the client reconnects for ever, and a
    // drain would wait for it (a Ctrl-C in a terminal kills the broker of
    // `mesh up` too, if it shares the process group).
    if client.connection_state() != async_nats::connection::State::Connected {
        // Nothing reaches a broker that is not there.
        return Ok(());
    }
    // Closed before this returns: whoever runs the broker may stop it
    // next.
    if let Err(e) = mesh_bus::drain_and_close(&client, &closed, DRAIN_LIMIT).await {
        tracing::warn!(reason = %dial::chain(&e), "the bus connection did not close cleanly");
    }
    Ok(())
}

/// The host's stop: a declaration being applied is finished (and
/// acknowledged) first, then the modules go with their host.
pub(crate) async fn stop_modules(state: &HostState, applier: &Applier) {
    tracing::info!(node = %state.node, "shutting down");
    if tokio::time::timeout(APPLY_AT_STOP, applier.idle())
        .await
        .is_err()
    {
        tracing::warn!(waited = ?APPLY_AT_STOP, "a declaration is still being applied; stopping anyway");
    }
    applier.driver().stop_all().await;
    tracing::info!(node = %state.node, "modules stopped");
}

fn log_event(node: &mesh_core::names::Name, event: &Event) {
    match event {
        Event::Connected => tracing::info!(node = %node, "bus connection (re)established"),
        Event::Disconnected => tracing::warn!(node = %node, "bus connection lost; reconnecting"),
        // The host's own stop.
        Event::Draining | Event::Closed => {
            tracing::info!(node = %node, event = %event, "bus connection")
        }
        other => tracing::warn!(node = %node, event = %other, "bus connection"),
    }
}

/// Everything a connected host does: the last declaration resumed, then
/// heartbeats, declarations taken, reports on changes (and after each
/// reconnection `reconnected` tells of), fetches retried, the logs tool.
pub(crate) async fn serve(
    bus: &Arc<Bus>,
    state: &HostState,
    opts: &HostOptions,
    applier: &Arc<Applier>,
    reconnected: tokio::sync::mpsc::UnboundedReceiver<()>,
    first: bool,
) {
    match first {
        true => applier.resume(bus).await,
        // The declaration applied stays; a broker restarted (or a
        // controller that lost reports) hears of it again.
        false => applier.report(bus, None).await,
    }
    applier.advertise(bus).await;
    tokio::join!(
        heartbeats(bus, state, opts),
        consume(bus, state, opts, applier),
        report_changes(bus, applier),
        report_reconnects(bus, applier, reconnected),
        fetch_again(bus, applier),
        crate::logs::serve(bus, &state.node, &state.dir, applier),
    );
}

/// One heartbeat right away, then every `heartbeat_every`. A failed
/// publish is logged: the next one may pass.
async fn heartbeats(bus: &Bus, state: &HostState, opts: &HostOptions) {
    let subject = subjects::heartbeat(&state.node);
    let mut every = tokio::time::interval(opts.heartbeat_every);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let beat = Heartbeat {
            node: state.node.clone(),
            sent_at: unix_ms(),
        };
        if let Err(e) = bus.publish(&subject, &beat.to_json()).await {
            tracing::warn!(reason = %dial::chain(&e), "sending a heartbeat");
        }
    }
}

/// Binds the node's consumer (retrying while it does not exist yet) and
/// takes its deliveries; binds again when the delivery stream ends.
/// Reports again whenever a module's state or health changes (it failed,
/// came up, was restarted, its check passed long enough or kept failing),
/// a little after the change so a burst is one report.
async fn report_changes(client: &Bus, applier: &Applier) {
    let mut changes = applier.driver().watch();
    let mut health = applier.health().watch();
    loop {
        tokio::select! {
            r = changes.changed() => if r.is_err() { return },
            r = health.changed() => if r.is_err() { return },
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        changes.borrow_and_update();
        health.borrow_and_update();
        applier.report(client, None).await;
    }
}

/// Tries again, when due, the artifacts that could not be fetched.
async fn fetch_again(client: &Bus, applier: &Applier) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        applier.fetch_due(client).await;
    }
}

/// Reports again after each reconnection (the first connection is the
/// one `resume` reports on).
async fn report_reconnects(
    client: &Bus,
    applier: &Applier,
    mut reconnected: tokio::sync::mpsc::UnboundedReceiver<()>,
) {
    // The first Connected is the initial connection.
    let _ = reconnected.recv().await;
    while reconnected.recv().await.is_some() {
        // A burst of reconnections is one report.
        tokio::time::sleep(Duration::from_millis(200)).await;
        while reconnected.try_recv().is_ok() {}
        applier.report(client, None).await;
    }
}

async fn consume(bus: &Arc<Bus>, state: &HostState, opts: &HostOptions, applier: &Arc<Applier>) {
    let node = mesh_core::jetstream::node_consumer(&state.node);
    let mut backoff = Backoff::new(opts.backoff_start, opts.backoff_max);
    loop {
        // Only CONSUMER.INFO for its own consumer is granted: binding never
        // asks for the stream first. One declaration at a time.
        let mut deliveries = match bus.consume(&node, 1).await {
            Ok(d) => d,
            Err(e) => {
                let wait = backoff.next_delay();
                tracing::info!(consumer = %node.name, reason = %dial::chain(&e), ?wait, "cannot bind the node's consumer yet; retrying");
                tokio::time::sleep(wait).await;
                continue;
            }
        };
        backoff.reset();
        tracing::info!(consumer = %node.name, "bound the node's consumer");
        while let Some(delivery) = deliveries.next().await {
            match delivery {
                // Its own task: a stop arriving mid-apply must not drop it
                // unacknowledged (NODES would hold it back for its whole
                // ack wait, and a host started again would run nothing);
                // the stop waits for it instead.
                Ok(message) => {
                    let (applier, bus) = (applier.clone(), bus.clone());
                    let _ = tokio::spawn(async move { applier.take(&bus, message).await }).await;
                }
                Err(e) => tracing::warn!(reason = %dial::chain(&e), "delivery"),
            }
        }
        let wait = backoff.next_delay();
        tracing::warn!(consumer = %node.name, ?wait, "the consumer's deliveries ended; binding again");
        tokio::time::sleep(wait).await;
    }
}

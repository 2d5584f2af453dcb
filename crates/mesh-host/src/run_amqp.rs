//! Running an enrolled host on a mesh whose bus is RabbitMQ: connect as
//! `host_<node>` (retrying while the broker cannot be reached or does not
//! admit the host yet), then do what a host does on NATS through the same
//! seam; an AMQP client does not reconnect by itself, so a connection lost
//! is made again here, and the host reports once it is back.

use std::future::Future;
use std::sync::Arc;

use mesh_bus::BusConfig;
use mesh_bus::seam::Bus;

use crate::apply::Applier;
use crate::backoff::Backoff;
use crate::dial;
use crate::run::{HostError, HostOptions, serve, stop_modules};
use crate::state::HostState;

/// How a host's time on RabbitMQ ended.
pub(crate) enum Ended {
    /// Stopped: its modules with it.
    Stopped,
    /// The mesh moved onto NATS: the modules keep running, and the host
    /// connects there (the addresses are the applier's now).
    Moved,
}

pub(crate) async fn run(
    state: &HostState,
    opts: &HostOptions,
    configs: &[BusConfig],
    applier: Arc<Applier>,
    shutdown: impl Future<Output = ()>,
) -> Result<Ended, HostError> {
    tokio::pin!(shutdown);
    let Some(config) = configs.first() else {
        return Err(HostError::NoAddress {
            path: state.dir.join(crate::state::HOST_FILE),
        });
    };
    let mut backoff = Backoff::new(opts.backoff_start, opts.backoff_max);
    let mut first = true;
    loop {
        let bus = tokio::select! {
            b = connect(config, &mut backoff) => Arc::new(b?),
            () = &mut shutdown => break,
        };
        tracing::info!(node = %state.node, principal = %state.principal(), "connected to the bus");
        backoff.reset();
        let lost = bus.lost();
        // Each connection is served anew; a reconnection is a connection
        // after the first (no client reconnects underneath).
        let (_none, reconnected) = tokio::sync::mpsc::unbounded_channel();
        let work = serve(&bus, state, opts, &applier, reconnected, first);
        first = false;
        tokio::select! {
            () = work => {}
            () = lost => {
                tracing::warn!(node = %state.node, "bus connection lost; reconnecting");
                continue;
            }
            () = applier.moved() => {
                // The move's report is out (confirmed): nothing more is
                // said here, and the old broker may be retired. Closed
                // even while a task still holds the bus.
                if let Bus::Amqp(a) = &*bus {
                    let _ = a.connection().close(200, "the mesh moved onto NATS".into()).await;
                }
                tracing::info!(node = %state.node, "left RabbitMQ");
                return Ok(Ended::Moved);
            }
            () = &mut shutdown => {
                stop_modules(state, &applier).await;
                if let Ok(bus) = Arc::try_unwrap(bus) {
                    bus.close().await;
                }
                return Ok(Ended::Stopped);
            }
        }
    }
    stop_modules(state, &applier).await;
    Ok(Ended::Stopped)
}

/// Connects, retrying with backoff; a certificate other than the pinned
/// one ends it (the address reaches another server).
async fn connect(config: &BusConfig, backoff: &mut Backoff) -> Result<Bus, HostError> {
    loop {
        match Bus::connect(config).await {
            Ok(b) => return Ok(b),
            Err(e) => {
                if let Some(p) = dial::pin_mismatch(&e) {
                    return Err(HostError::CertificateMismatch {
                        url: config.url.clone(),
                        expected: p.expected.clone(),
                        got: p.got.clone(),
                    });
                }
                let wait = backoff.next_delay();
                tracing::info!(reason = %dial::chain(&e), ?wait, "cannot connect to the bus yet; retrying");
                tokio::time::sleep(wait).await;
            }
        }
    }
}

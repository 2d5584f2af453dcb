//! A host that was down while the broker moved (`mesh broker set-address`)
//! never received the declaration naming the new addresses: it keeps
//! dialling the old ones. `mesh host --state DIR --broker URL` points it at
//! the new ones, checked first: the broker there must present the pinned
//! certificate and admit this host's key, or nothing is recorded. A host
//! left on RabbitMQ by a rollout comes over to NATS the same way.

use std::time::Duration;

use mesh_bus::CertPin;
use mesh_core::bus::{BusKind, Given, bus_of};
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::dial::{self, GaveUp};
use crate::state::{HostState, StateError, host_bus_config};

/// How long the new address has to answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum MovedError {
    #[error(transparent)]
    Bus(#[from] mesh_core::bus::BusError),
    #[error(
        "{url} is an address on {bus}, and this host's mesh runs on nats: a host stays on its mesh's bus (a mesh moves between buses by a rollout, not by one host's address)"
    )]
    OtherBus { url: String, bus: BusKind },
    #[error(
        "the broker at {url} presented a certificate that is not this mesh's (pinned sha256 {expected}, presented {got}): nothing was recorded; check the address"
    )]
    NotOurBroker {
        url: String,
        expected: String,
        got: String,
    },
    #[error(
        "the broker at {urls} did not admit node {node}'s key within {within:?} (refused: {refused}): nothing was recorded; is the broker there this mesh's, and running?"
    )]
    NotAdmitted {
        urls: String,
        node: String,
        within: Duration,
        refused: bool,
    },
    #[error(transparent)]
    State(#[from] StateError),
}

/// Dials `urls` as this host (its key, the pinned certificate); once one
/// admits it, records them in `host.json` and returns the state that uses
/// them.
pub async fn point_at(state: &HostState, urls: &[String]) -> Result<HostState, MovedError> {
    // A host on RabbitMQ left behind by a rollout comes over to NATS (the
    // mesh moved; its key is in the new bus's user list). Otherwise the new
    // addresses and the recorded ones together: all of one bus.
    let recorded = bus_of(state.bus_urls.iter().map(|u| Given {
        source: "host.json",
        address: u,
    }))?;
    let new = bus_of(urls.iter().map(|u| Given {
        source: "--broker",
        address: u,
    }))?;
    let given = urls
        .iter()
        .map(|u| Given {
            source: "--broker",
            address: u,
        })
        .chain(state.bus_urls.iter().map(|u| Given {
            source: "host.json",
            address: u,
        }));
    let bus = if (recorded, new) == (BusKind::Amqp, BusKind::Nats) {
        new
    } else {
        bus_of(given)?
    };
    if bus != BusKind::Nats {
        return Err(MovedError::OtherBus {
            url: urls.first().cloned().unwrap_or_default(),
            bus,
        });
    }
    let keys = crate::state::HostKeys::load(&state.dir)?;
    let pin = CertPin::from_hex(&state.cert_sha256).map_err(|_| StateError::BadRecord {
        path: state.dir.join(crate::state::HOST_FILE),
        reason: "cert_sha256 is not a SHA-256".into(),
    })?;
    let configs: Vec<_> = urls
        .iter()
        .map(|u| host_bus_config(u, &state.node, keys.nkey_seed().clone(), pin))
        .collect();
    let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(2));
    let reached = dial::connect_until(
        &configs,
        Some(Instant::now() + ANSWER_WITHIN),
        &mut backoff,
        ANSWER_WITHIN,
        |o| o.max_reconnects(1),
    )
    .await;
    match reached {
        Ok(client) => {
            let _ = tokio::time::timeout(Duration::from_secs(1), client.drain()).await;
        }
        Err(GaveUp::Pin { url, expected, got }) => {
            return Err(MovedError::NotOurBroker { url, expected, got });
        }
        Err(g) => {
            return Err(MovedError::NotAdmitted {
                urls: urls.join(", "),
                node: state.node.to_string(),
                within: ANSWER_WITHIN,
                refused: matches!(g, GaveUp::Deadline { refused: true, .. }),
            });
        }
    }
    state.record_bus_urls(urls)?;
    tracing::info!(node = %state.node, urls = %urls.join(","), "the broker's addresses, as given: recorded; following them");
    Ok(HostState {
        bus_urls: urls.to_vec(),
        ..state.clone()
    })
}

#[cfg(test)]
mod tests {
    use mesh_core::bus::BusError;

    use super::*;
    use crate::state::enrolled;

    /// Refused before anything is dialled or recorded.
    #[tokio::test]
    async fn an_address_of_the_other_bus_is_refused_naming_both() {
        let tmp = tempfile::tempdir().unwrap();
        let state = enrolled(tmp.path());
        let before = std::fs::read(tmp.path().join(crate::state::HOST_FILE)).unwrap();
        let err = point_at(&state, &["amqps://mq:5671".into()])
            .await
            .unwrap_err();
        match &err {
            MovedError::Bus(BusError::BothBuses {
                nats_source,
                nats,
                amqp_source,
                amqp,
            }) => {
                assert_eq!(
                    (nats_source.as_str(), nats.as_str()),
                    ("host.json", "tls://127.0.0.1:4222")
                );
                assert_eq!(
                    (amqp_source.as_str(), amqp.as_str()),
                    ("--broker", "amqps://mq:5671")
                );
            }
            other => panic!("{other:?}"),
        }
        let err = point_at(&state, &["tls://10.0.0.9:4222".into(), "http://x:1".into()])
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("--broker: \"http://x:1\" is not a bus address"),
            "{err}"
        );
        assert_eq!(
            std::fs::read(tmp.path().join(crate::state::HOST_FILE)).unwrap(),
            before
        );
    }
}

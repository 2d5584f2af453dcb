//! A host that was down while the broker moved (`mesh broker set-address`)
//! never received the declaration naming the new addresses: it keeps
//! dialling the old ones. `mesh host --state DIR --broker URL` points it at
//! the new ones, checked first: the broker there must present the pinned
//! certificate and admit this host's key, or nothing is recorded.

use std::time::Duration;

use mesh_bus::CertPin;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::dial::{self, GaveUp};
use crate::state::{HostState, StateError, host_bus_config};

/// How long the new address has to answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum MovedError {
    #[error("{url} is not a broker address: write tls://HOST:PORT (the broker speaks TLS only)")]
    NotTls { url: String },
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
    if let Some(url) = urls.iter().find(|u| !u.starts_with("tls://")) {
        return Err(MovedError::NotTls { url: url.clone() });
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

//! The controller's HTTP side, on loopback by default: `/healthz`,
//! `/readyz`, `/metrics` (Prometheus text), the JSON API the listings print
//! (`/api/...`), and the dashboard page at `/` that reads it.
//!
//! It starts before the broker answers, so `/readyz` can say what the
//! controller is still waiting for; what needs the daemon's shared state
//! reads it once the daemon has made it.

mod api;
mod metrics;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use mesh_store::Store;
use tokio::sync::watch;
use tracing::warn;

use crate::composer::ComposerStatus;
use crate::daemon::Ctx;

pub(crate) use metrics::ApplyLag;

/// Where the controller serves HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpListen {
    pub addr: SocketAddr,
    /// Asked for explicitly (`--http`): failing to bind it stops the start.
    /// The default is best effort: another controller on this machine may
    /// hold it, and it must not keep this one from running.
    pub required: bool,
}

/// The default: loopback on a fixed port an operator can remember.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7420";

impl Default for HttpListen {
    fn default() -> Self {
        HttpListen {
            addr: DEFAULT_ADDR
                .parse()
                .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 7420))),
            required: false,
        }
    }
}

/// Could not serve HTTP where it was asked to.
#[derive(Debug, thiserror::Error)]
#[error("could not listen for HTTP on {addr}")]
pub struct HttpError {
    pub addr: SocketAddr,
    #[source]
    pub source: std::io::Error,
}

/// What the HTTP handlers read: the store and the composer from the start,
/// the daemon's context once it is made.
pub(crate) struct Shared {
    pub store: Store,
    pub composer: watch::Receiver<ComposerStatus>,
    /// What the start is doing until the context exists.
    pub phase: Mutex<&'static str>,
    pub ctx: OnceLock<Arc<Ctx>>,
}

impl Shared {
    pub fn new(store: Store, composer: watch::Receiver<ComposerStatus>) -> Arc<Shared> {
        Arc::new(Shared {
            store,
            composer,
            phase: Mutex::new("connecting to the broker"),
            ctx: OnceLock::new(),
        })
    }

    pub fn set_phase(&self, phase: &'static str) {
        *self.phase.lock().unwrap_or_else(|p| p.into_inner()) = phase;
    }

    /// Why the controller is not ready; none once it is: connected to the
    /// broker, the bus objects asserted, and the newest composition live.
    pub fn not_ready(&self) -> Option<String> {
        let Some(ctx) = self.ctx.get() else {
            let phase = *self.phase.lock().unwrap_or_else(|p| p.into_inner());
            return Some(format!("starting: {phase}"));
        };
        if ctx.client.connection_state() != async_nats::connection::State::Connected {
            return Some("not connected to the broker (reconnecting)".into());
        }
        let status = self.composer.borrow().clone();
        match &status.last {
            None => Some("the users file has not been composed yet".into()),
            Some(o @ crate::Outcome::NotLive { error, .. }) => Some(format!(
                "composition {} is not live: {}",
                o.generation(),
                crate::daemon::error_chain(&**error)
            )),
            Some(_) => None,
        }
    }

    pub fn window_open(&self) -> bool {
        self.ctx.get().is_some_and(|c| c.window_is_open())
    }
}

/// Binds `listen` and serves until the task is aborted. A bind failure is
/// an error when the address was asked for, a warning otherwise (`None`).
pub(crate) async fn serve(
    listen: HttpListen,
    shared: Arc<Shared>,
) -> Result<Option<(SocketAddr, tokio::task::JoinHandle<()>)>, HttpError> {
    let listener = match tokio::net::TcpListener::bind(listen.addr).await {
        Ok(l) => l,
        Err(source) if listen.required => {
            return Err(HttpError {
                addr: listen.addr,
                source,
            });
        }
        Err(e) => {
            warn!(addr = %listen.addr, error = %e, "no HTTP: the default address is taken (another controller on this machine?); pass --http ADDR");
            return Ok(None);
        }
    };
    let addr = listener.local_addr().map_err(|source| HttpError {
        addr: listen.addr,
        source,
    })?;
    let app = router(shared);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            warn!(error = %e, "HTTP stopped");
        }
    });
    Ok(Some((addr, task)))
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(dashboard))
        .route("/dashboard.js", get(script))
        .route("/dashboard.css", get(style))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics::scrape))
        .merge(api::routes())
        .with_state(shared)
}

async fn readyz(axum::extract::State(shared): axum::extract::State<Arc<Shared>>) -> Response {
    match shared.not_ready() {
        None => (StatusCode::OK, "ready\n").into_response(),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
    }
}

// Embedded: the page needs no build step and no file beside the binary.
async fn dashboard() -> Html<&'static str> {
    Html(include_str!("http/dashboard.html"))
}

async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("http/dashboard.js"),
    )
}

async fn style() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("http/dashboard.css"),
    )
}

//! The controller's HTTP side, on loopback by default: `/healthz`,
//! `/readyz`, `/metrics` (Prometheus text), the JSON API the listings print
//! (`/api/...`), and the dashboard page at `/` that reads it.
//!
//! It starts before the broker answers, so `/readyz` can say what the
//! controller is still waiting for; what needs the daemon's shared state
//! reads it once the daemon has made it.
//!
//! The address bound is written to [`ADDR_FILE`] in the state directory
//! (removed again on stop): the default port may be another controller's,
//! so `mesh status` reads where this mesh's controller actually serves, and
//! `/api/status` names the controller's key so it can tell whose it is.

mod api;
mod metrics;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use mesh_store::Store;
use tokio::sync::watch;
use tracing::warn;

use crate::composer::ComposerStatus;

pub(crate) use metrics::ApplyLag;

/// Where the controller serves HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpListen {
    pub addr: SocketAddr,
    /// Asked for explicitly (`--http`): failing to bind it stops the start.
    /// The default is not: another controller on this machine may hold it,
    /// and it must not keep this one from serving, so a free port on the
    /// same interface is bound instead.
    pub required: bool,
}

/// The default: loopback on a fixed port an operator can remember.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7420";

/// Where in the state directory the address bound is written, one line.
pub const ADDR_FILE: &str = "controller/http.addr";

/// Where the controller of the mesh in `dir` says it serves HTTP: none when
/// it does not (stopped, `--no-http`, or never started).
pub fn served_at(dir: &Path) -> Option<String> {
    served_at_file(&dir.join(ADDR_FILE)).filter(|a| a.parse::<SocketAddr>().is_ok())
}

/// Where the controller serves HTTP, once it is decided: sent the address
/// bound, or none (`mesh up` prints it in its summary).
pub type BoundTx = tokio::sync::mpsc::UnboundedSender<Option<SocketAddr>>;

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

/// What the HTTP handlers read: the store from the start; the composer
/// and the daemon's context while this controller is the active one.
pub(crate) struct Shared {
    pub store: Store,
    /// The controller's NKey public key (`U…`), from its genesis: which
    /// mesh this controller is.
    pub controller_key: String,
    /// The active term's composer; a standby's says nothing was composed.
    composer: Mutex<watch::Receiver<ComposerStatus>>,
    /// What the start (or a term's start) is doing until the context exists.
    pub phase: Mutex<&'static str>,
    /// The running controller, while this one is active.
    running: Mutex<Option<Arc<dyn Running>>>,
    /// Whether this controller holds the store's lease.
    role: Mutex<Option<watch::Receiver<crate::daemon::Role>>>,
}

/// What HTTP reads of the running controller (implemented by the daemon's
/// context): HTTP answers from the first moment, the daemon depends on it,
/// and it on nothing of the daemon's.
pub(crate) trait Running: Send + Sync {
    fn broker_connected(&self) -> bool;
    /// Whether reports wait in CONTROL for the store.
    fn window_open(&self) -> bool;
    fn counters(&self) -> crate::CountersView;
    fn lag(&self) -> &ApplyLag;
    /// `mesh rollout check` of this mesh now (the records and one dial).
    fn rollout(
        &self,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<Output = Result<mesh_core::rollout::Readiness, String>>
                + Send
                + '_,
        >,
    >;
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    pub fn new(store: Store, controller_key: String) -> Arc<Shared> {
        Arc::new(Shared {
            store,
            controller_key,
            composer: Mutex::new(watch::channel(ComposerStatus::default()).1),
            phase: Mutex::new("asking the store for the lease"),
            running: Mutex::new(None),
            role: Mutex::new(None),
        })
    }

    pub fn set_phase(&self, phase: &'static str) {
        *lock(&self.phase) = phase;
    }

    pub fn set_composer(&self, composer: watch::Receiver<ComposerStatus>) {
        *lock(&self.composer) = composer;
    }

    pub fn set_running(&self, running: Arc<dyn Running>) {
        *lock(&self.running) = Some(running);
    }

    pub fn follow_roles(&self, roles: watch::Receiver<crate::daemon::Role>) {
        *lock(&self.role) = Some(roles);
    }

    /// A term ended: nothing of it is read any more.
    pub fn step_down(&self) {
        *lock(&self.running) = None;
        self.set_composer(watch::channel(ComposerStatus::default()).1);
        self.set_phase("asking the store for the lease");
    }

    pub fn composer_status(&self) -> ComposerStatus {
        lock(&self.composer).borrow().clone()
    }

    pub fn running(&self) -> Option<Arc<dyn Running>> {
        lock(&self.running).clone()
    }

    /// The lease as this controller's keeper last found it.
    pub fn role(&self) -> Option<crate::daemon::Role> {
        lock(&self.role).as_ref().map(|r| r.borrow().clone())
    }

    /// Why the controller is not ready; none once it is: the active one,
    /// connected to the broker, the bus objects asserted, and the newest
    /// composition live. A standby is never ready: it serves nothing.
    pub fn not_ready(&self) -> Option<String> {
        use crate::daemon::Role;
        match self.role() {
            Some(Role::Standby { active }) => {
                return Some(match active {
                    Some(holder) => format!("standby: {holder} is active"),
                    None => "standby: no controller holds the lease yet".into(),
                });
            }
            Some(Role::Refused(why)) => return Some(why),
            Some(Role::Starting) | Some(Role::Active { .. }) | None => {}
        }
        let Some(ctx) = self.running() else {
            let phase = *lock(&self.phase);
            return Some(format!("starting: {phase}"));
        };
        if !ctx.broker_connected() {
            return Some("not connected to the broker (reconnecting)".into());
        }
        let status = self.composer_status();
        match &status.last {
            None => Some("the users file has not been composed yet".into()),
            Some(o @ crate::Outcome::NotLive { error, .. }) => Some(format!(
                "composition {} is not live: {}",
                o.generation(),
                crate::chain::error_chain(&**error)
            )),
            Some(_) => None,
        }
    }

    pub fn window_open(&self) -> bool {
        self.running().is_some_and(|c| c.window_open())
    }
}

/// HTTP being served; dropped, it stops and removes its address file.
pub(crate) struct Serving {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
    file: PathBuf,
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.task.abort();
        // Only while it is still ours: a file naming another address is
        // another start's.
        if served_at_file(&self.file).as_deref() == Some(&self.addr.to_string()) {
            let _ = std::fs::remove_file(&self.file);
        }
    }
}

fn served_at_file(file: &Path) -> Option<String> {
    std::fs::read_to_string(file)
        .ok()
        .map(|t| t.trim().to_string())
}

/// Binds `listen` (none: serves nothing) and serves until the returned
/// value is dropped; writes the address bound to [`ADDR_FILE`] in `dir` and
/// sends it on `bound`. A bind failure is an error when the address was
/// asked for; otherwise a free port on the same interface is bound instead.
pub(crate) async fn serve(
    listen: Option<HttpListen>,
    shared: Arc<Shared>,
    dir: &Path,
    bound: Option<&BoundTx>,
) -> Result<Option<Serving>, HttpError> {
    let file = dir.join(ADDR_FILE);
    // Left by a start that did not stop cleanly: it names an address
    // nothing of this mesh serves now.
    let _ = std::fs::remove_file(&file);
    let serving = match listen {
        Some(listen) => match bind(listen).await? {
            Some(listener) => {
                let addr = listener.local_addr().map_err(|source| HttpError {
                    addr: listen.addr,
                    source,
                })?;
                Some(start(listener, addr, shared, file))
            }
            None => None,
        },
        None => None,
    };
    if let Some(tx) = bound {
        let _ = tx.send(serving.as_ref().map(|s| s.addr));
    }
    Ok(serving)
}

async fn bind(listen: HttpListen) -> Result<Option<tokio::net::TcpListener>, HttpError> {
    use tokio::net::TcpListener;
    let taken = match TcpListener::bind(listen.addr).await {
        Ok(l) => return Ok(Some(l)),
        Err(source) if listen.required => {
            return Err(HttpError {
                addr: listen.addr,
                source,
            });
        }
        Err(e) => e,
    };
    let free = SocketAddr::new(listen.addr.ip(), 0);
    match TcpListener::bind(free).await {
        Ok(l) => {
            let at = l
                .local_addr()
                .map_or_else(|_| free.to_string(), |a| a.to_string());
            warn!(taken = %listen.addr, error = %taken, addr = %at, "the default HTTP address is taken (another controller on this machine?); serving HTTP on a free port instead; pass --http ADDR to choose");
            Ok(Some(l))
        }
        Err(e) => {
            warn!(addr = %listen.addr, error = %taken, fallback_error = %e, "no HTTP: the default address is taken and no free port could be bound; pass --http ADDR");
            Ok(None)
        }
    }
}

fn start(
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    shared: Arc<Shared>,
    file: PathBuf,
) -> Serving {
    let app = router(shared);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            warn!(error = %e, "HTTP stopped");
        }
    });
    if let Err(e) = crate::safe_write::write_private(&file, format!("{addr}\n").as_bytes()) {
        warn!(error = %crate::chain::error_chain(&e), "could not write the HTTP address; `mesh status` needs --http to find it");
    }
    Serving { addr, task, file }
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

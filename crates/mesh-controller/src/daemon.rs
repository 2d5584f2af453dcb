//! The controller daemon (`mesh controller`): the single writer of the users
//! file and of every JetStream definition.
//!
//! On start it opens the genesis and the store, connects with its own NKey
//! pinning the broker certificate, derives principals and objects from the
//! records and asserts the objects (streams, then consumers, every node's
//! included), and starts the composer. Then it takes enrolments from CONTROL
//! ([`enrol`]), hears heartbeats ([`seen`]), and follows the records
//! revision ([`watch`]): any change recomposes the users file and
//! re-asserts the objects, whoever made it.

mod artifact_fetches;
mod built;
mod bus_move;
mod connect;
mod control;
mod declare;
mod deploy;
mod enrol;
mod keys;
mod lease;
mod live;
mod on_amqp;
mod operations;
mod renamed;
mod report;
mod rollout;
mod sealing;
mod seen;
mod watch;

pub(crate) use connect::retry_waits;
use connect::{CLOSE_WITHIN, bus_config, check_controller_key, connect, read_seed};
pub use control::REPORT_BATCH;
pub(crate) use lease::Role;
use on_amqp::{amqp_declare, amqp_management, amqp_source, declare_topology};
pub use report::{Ingested, record as record_report, record_batch as record_reports};

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use std::time::Duration;

use async_nats::jetstream;
use mesh_bus::{BusConfig, Secret};
use mesh_core::records::ControllerSpec;
use mesh_core::subjects;
use mesh_store::{Store, StoreError};
use tracing::{info, warn};

pub(crate) use crate::chain::error_chain;
use crate::composer::{Composer, ComposerConfig, SourceError};
pub use crate::counters::{Counters, CountersView};
use crate::genesis::{self, Genesis, GenesisError};
use crate::http::HttpListen;
use crate::{Reloader, Snapshot};

/// How the controller runs; [`ControllerOptions::new`] has the defaults.
#[derive(Debug, Clone)]
pub struct ControllerOptions {
    /// The state directory genesis made.
    pub dir: PathBuf,
    pub store_url: String,
    /// How often the records revision is read.
    pub poll_every: Duration,
    /// How often last-seen times are written to the store.
    pub seen_flush_every: Duration,
    /// How long an enrolment waits for its composition to go live before it
    /// answers anyway (the host retries its own connect meanwhile).
    pub live_within: Duration,
    /// Enrolments handled at once.
    pub enrolments_at_once: usize,
    /// How long a report may wait for an unavailable store before it is
    /// let go.
    pub store_window: Duration,
    pub controller: ControllerSpec,
    /// Where `/healthz`, `/readyz`, `/metrics`, the JSON API and the
    /// dashboard are served; none: not at all.
    pub http: Option<HttpListen>,
    /// Told where HTTP is served (or that it is not) once it is bound.
    pub http_bound: Option<crate::http::BoundTx>,
    /// The lease's length: how long the store waits for a word from the
    /// active controller before a standby may take over (PostgreSQL).
    pub lease_ttl: Duration,
    /// How long a confirmed move waits for every node to take the new bus.
    pub move_within: Duration,
}

impl ControllerOptions {
    pub fn new(dir: PathBuf, store_url: String) -> ControllerOptions {
        ControllerOptions {
            dir,
            store_url,
            poll_every: Duration::from_millis(250),
            seen_flush_every: Duration::from_secs(5),
            live_within: Duration::from_secs(30),
            enrolments_at_once: 32,
            store_window: mesh_core::store_window::DEFAULT_BOUND,
            move_within: Duration::from_millis(mesh_core::rollout::NODES_WITHIN_MS),
            controller: ControllerSpec::default(),
            http: Some(HttpListen::default()),
            http_bound: None,
            lease_ttl: Duration::from_secs(5),
        }
    }
}

/// Why the controller could not start (once running, failures are logged
/// and retried, never fatal).
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("could not open the controller's state directory")]
    Genesis(#[from] GenesisError),
    #[error("could not open the store")]
    Store(#[from] StoreError),
    #[error(
        "the store records controller key {recorded}, but {dir} holds {genesis}: this store belongs to another genesis; point --store at this mesh's own store"
    )]
    ForeignStore {
        recorded: String,
        genesis: String,
        dir: PathBuf,
    },
    #[error("the records do not derive to a mesh")]
    Derive(#[from] mesh_state::DeriveError),
    #[error("could not assert the bus objects")]
    Assert(#[from] mesh_bus::AssertError),
    #[error("could not declare the mesh's queues on RabbitMQ")]
    Topology(#[from] Box<mesh_bus::amqp::topology::TopologyError>),
    #[error("could not reach RabbitMQ's management API")]
    Management(#[from] mesh_bus::amqp::ManagementError),
    #[error("{0} names no management port: this genesis's bus is not RabbitMQ")]
    NoManagement(PathBuf),
    #[error("could not assert the artifact store")]
    Artifacts(#[from] mesh_bus::artifacts::BucketError),
    #[error("could not bind the controller's consumer on CONTROL")]
    Bind(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("the broker certificate's fingerprint in the genesis is not one")]
    Pin(#[from] mesh_bus::PinError),
    #[error("could not serve HTTP")]
    Http(#[from] crate::http::HttpError),
    #[error("{0}")]
    Lease(String),
}

/// What every task shares.
pub(crate) struct Ctx {
    pub store: Store,
    /// The controller's connection, to NATS or to RabbitMQ.
    pub bus: mesh_bus::seam::Bus,
    pub composer: Composer,
    pub counters: Counters,
    pub opts: ControllerOptions,
    /// Signs every declaration.
    pub signing_key: ed25519_dalek::SigningKey,
    /// Opens the secrets the store holds and seals them to nodes.
    pub xkey_seed: Secret,
    /// Its public key: a declaration's `sealed_by`.
    pub xkey_public: String,
    /// When the store window opened (unix ms); none while the store takes
    /// reports.
    pub window: std::sync::Mutex<Window>,
    pub lag: crate::http::ApplyLag,
    /// The revisions compositions were triggered for, until recorded live.
    pub covered: live::Covered,
    /// Where nodes reach the broker when no address is recorded.
    pub genesis_bus_urls: Vec<String>,
    /// The addresses the controller connected to at start (every server
    /// of a cluster).
    pub connected_urls: Vec<String>,
    /// The recorded addresses the controller's connection follows.
    pub followed_bus: tokio::sync::Mutex<Vec<String>>,
    /// Nodes with a module held back for want of a spare key: the next
    /// report announcing spares declares again (`declare_again`).
    pub awaiting_spares: std::sync::Mutex<std::collections::BTreeSet<mesh_core::names::Name>>,
    pub declare_again: tokio::sync::Notify,
    /// Nodes whose host reported applying a declaration above the newest
    /// recorded (the store restored from a backup), with that sequence:
    /// their next declaration goes above it.
    pub hosts_ahead: std::sync::Mutex<std::collections::BTreeMap<mesh_core::names::Name, u64>>,
}

impl crate::http::Running for Ctx {
    fn broker_connected(&self) -> bool {
        match &self.bus {
            mesh_bus::seam::Bus::Nats(n) => {
                n.client().connection_state() == async_nats::connection::State::Connected
            }
            mesh_bus::seam::Bus::Amqp(a) => a.connection().status().connected(),
        }
    }

    fn window_open(&self) -> bool {
        self.window_is_open()
    }

    fn counters(&self) -> CountersView {
        CountersView::of(&self.counters)
    }

    fn lag(&self) -> &crate::http::ApplyLag {
        &self.lag
    }

    fn rollout(
        &self,
    ) -> std::pin::Pin<
        Box<dyn Future<Output = Result<mesh_core::rollout::Readiness, String>> + Send + '_>,
    > {
        Box::pin(async move { rollout::check(self).await.map_err(|e| error_chain(&e)) })
    }
}

/// The store window as the controller keeps it: when it opened (unix ms).
/// While it is open, reports are decided without trying the store (each try
/// would wait out the pool's connect timeout); the records watcher, which
/// reads the store every poll, closes it once a read succeeds.
#[derive(Debug, Default)]
pub(crate) struct Window {
    opened_at: Option<u64>,
}

impl Ctx {
    /// JetStream, on a mesh whose bus is NATS: what only NATS has.
    pub(crate) fn js(&self) -> Option<&jetstream::Context> {
        self.bus.nats().map(|n| n.js())
    }

    /// The bus objects made so: JetStream's streams and consumers, or the
    /// mesh's exchange and queues on RabbitMQ.
    pub(crate) async fn assert_objects(
        &self,
        objects: &mesh_core::jetstream::Objects,
    ) -> Result<(), DaemonError> {
        match &self.bus {
            mesh_bus::seam::Bus::Nats(n) => {
                mesh_bus::assert_objects(n.js(), objects).await?;
            }
            mesh_bus::seam::Bus::Amqp(a) => declare_topology(a, objects).await?,
        }
        Ok(())
    }

    /// The store window's decision for a report it could not take now.
    pub(crate) fn window_decision(
        &self,
        now_ms: u64,
        deliveries: u64,
    ) -> mesh_core::store_window::Decision {
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        let was_open = w.opened_at.is_some();
        let (opened, d) = mesh_core::store_window::on_unavailable(
            w.opened_at,
            now_ms,
            self.opts.store_window,
            deliveries,
        );
        if !was_open {
            warn!(
                opened_at = opened,
                "store window opened: reports stay in CONTROL until the store is back"
            );
        }
        w.opened_at = Some(opened);
        d
    }

    /// While the window is open: the decision, without trying the store.
    pub(crate) fn window_without_trying(
        &self,
        now_ms: u64,
        deliveries: u64,
    ) -> Option<mesh_core::store_window::Decision> {
        let w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        let opened = w.opened_at?;
        Some(
            mesh_core::store_window::on_unavailable(
                Some(opened),
                now_ms,
                self.opts.store_window,
                deliveries,
            )
            .1,
        )
    }

    pub(crate) fn window_is_open(&self) -> bool {
        let w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        w.opened_at.is_some()
    }

    pub(crate) fn close_window(&self) {
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(opened) = w.opened_at.take() {
            info!(
                opened_at = opened,
                "store window closed: the store takes reports again"
            );
        }
    }
}

/// How often a controller of a clustered bus looks for a newer shared
/// users file: at most this long before its machine's servers serve it
/// (the active controller's canary waits the while).
const MIRROR_EVERY: Duration = Duration::from_millis(500);

/// How long a clean stop waits for the lease's release to be recorded:
/// well inside the stop's own limit (`mesh controller` gives it 3 s).
const RELEASE_WITHIN: Duration = Duration::from_secs(1);

/// Runs until `shutdown` resolves: standing by while another controller
/// holds the store's lease, active while this one does ([`lease`]).
pub async fn run(
    opts: ControllerOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<CountersView, DaemonError> {
    let genesis = Genesis::open(&opts.dir)?;
    let mut opts = opts;
    // Every stream kept on each server of a cluster: one lost loses nothing.
    opts.controller.replicas = usize::from(genesis.replicas);
    let store = Store::open_with(
        &opts.store_url,
        mesh_store::StoreOptions {
            // Frozen mid-transaction, this controller would hold the lease
            // row's share lock past its lease; the server ends it instead.
            idle_in_transaction: Some(opts.lease_ttl),
            ..mesh_store::StoreOptions::default()
        },
    )
    .await?;
    check_controller_key(&store, &genesis).await?;
    let genesis_bus = bus_config(&genesis)?;
    let keys = Keys {
        signing_key: declare::signing_key(&genesis)?,
        xkey_seed: read_seed(&genesis, genesis::XKEY_SEED)?,
    };
    // Before the lease: /readyz says whether this one stands by, and why.
    let shared = crate::http::Shared::new(store.clone(), genesis.controller_nkey.clone());
    let http = crate::http::serve(
        opts.http,
        shared.clone(),
        &opts.dir,
        opts.http_bound.as_ref(),
    )
    .await?;
    if let Some(s) = &http {
        info!(url = %format!("http://{}/", s.addr), "serving HTTP");
    }
    let me = lease::candidate(&opts.dir, http.as_ref().map(|s| s.addr));
    let held = store.lease(me, opts.lease_ttl);
    let fenced = store.fenced_by(&held);
    let (mut roles, keeper) = lease::keep(held, fenced.clone());
    shared.follow_roles(roles.clone());
    // Standing by or active, this machine's servers serve the composition
    // the active controller shared.
    let _mirror = (genesis.replicas > 1).then(|| {
        AbortOnDrop(tokio::spawn(crate::composer::mirror::mirror(
            store.clone(),
            genesis.path(genesis::USERS_FILE),
            Reloader::PidFiles(genesis.broker_pid_files()),
            MIRROR_EVERY,
        )))
    });

    tokio::pin!(shutdown);
    let view = loop {
        let taken = tokio::select! {
            r = lease::active(&mut roles) => r.map_err(DaemonError::Lease)?,
            () = &mut shutdown => break CountersView::default(),
        };
        info!(epoch = taken, "lease taken: this controller is active");
        let bus = term_bus(&store, &genesis_bus).await;
        let term = Term {
            opts: &opts,
            genesis: &genesis,
            bus: &bus,
            keys: &keys,
            shared: &shared,
        };
        match term.run(fenced.clone(), &mut roles, &mut shutdown).await? {
            lease::Ended::Shutdown(view) => break view,
            lease::Ended::Deposed(why) => {
                warn!(reason = %why, "stepping down: this controller stands by");
                shared.step_down();
            }
            lease::Ended::Reconnect => {
                warn!("the bus connection was lost; connecting again");
            }
        }
    };
    // Given up, its record cleared: a standby takes over at once, and
    // `mesh status` names no stopped controller as its holder.
    keeper.release(RELEASE_WITHIN).await;
    // Stops serving and removes the address file.
    drop(http);
    store.close().await;
    Ok(view)
}

/// The bus a term connects to: the genesis's, or, once a move onto another
/// bus is done (the old one drained), the move's addresses, with the same
/// key.
async fn term_bus(store: &Store, genesis_bus: &BusConfig) -> BusConfig {
    match store.bus_move().await {
        Ok(Some(m)) if m.moved_at.is_some() => BusConfig {
            url: m.to_urls.join(","),
            ..genesis_bus.clone()
        },
        Ok(_) => genesis_bus.clone(),
        Err(e) => {
            warn!(error = %error_chain(&e), "cannot read whether the mesh moved its bus; connecting to the genesis's");
            genesis_bus.clone()
        }
    }
}

/// The controller's keys, read once at start.
struct Keys {
    signing_key: ed25519_dalek::SigningKey,
    xkey_seed: Secret,
}

/// One term as the active controller.
struct Term<'a> {
    opts: &'a ControllerOptions,
    genesis: &'a Genesis,
    bus: &'a BusConfig,
    keys: &'a Keys,
    shared: &'a Arc<crate::http::Shared>,
}

impl Term<'_> {
    /// Active until `shutdown` resolves or the lease passes to another
    /// controller; everything the term started is stopped when it ends.
    async fn run(
        &self,
        store: Store,
        roles: &mut tokio::sync::watch::Receiver<lease::Role>,
        shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
    ) -> Result<lease::Ended, DaemonError> {
        let Term {
            opts,
            genesis,
            bus,
            keys,
            shared,
        } = *self;
        shared.set_phase("reading the records");
        // Read before the records are: a change made between the two is then
        // seen as a change, not taken for the state started from.
        let revision = store.records_revision().await?;
        // Derived before anything is written: records that derive to nothing
        // are refused at start, naming why, not discovered by a host.
        let derived = mesh_state::derive(&store, &opts.controller).await?;
        info!(
            principals = derived.principals.len(),
            streams = derived.objects.streams.len(),
            consumers = derived.objects.consumers.len(),
            "records read"
        );

        let source_store = store.clone();
        let spec = opts.controller.clone();
        let source = move || {
            let store = source_store.clone();
            let spec = spec.clone();
            async move {
                let d = on_amqp::derived_fenced(&store, &spec).await?;
                Ok::<Snapshot, SourceError>((d.principals, d.snapshot.credentials))
            }
        };
        let mut composer_config = ComposerConfig::new(
            genesis.path(genesis::USERS_FILE),
            Reloader::PidFiles(genesis.broker_pid_files()),
            bus.clone(),
        );
        if genesis.replicas > 1 {
            // Each server must admit the canary: one that missed the
            // reload is named, not hidden behind the others.
            composer_config.servers = genesis.local_urls();
            let share_store = store.clone();
            composer_config.share = Some(Arc::new(move |text: String| {
                let store = share_store.clone();
                Box::pin(async move {
                    store
                        .share_users_file(&text)
                        .await
                        .map_err(|e| Box::new(e) as SourceError)
                })
            }));
        }
        shared.set_phase("connecting to the broker");
        let closed = mesh_bus::Closed::new();
        let connected = tokio::select! {
            c = connect(bus, &closed) => c,
            () = shutdown.as_mut() => return Ok(lease::Ended::Shutdown(CountersView::default())),
            why = lease::lost(roles) => return Ok(lease::Ended::Deposed(why)),
        };
        // Only once the lease is this controller's: a standby writes no
        // users file.
        // A mesh moved onto NATS run as a module: the list reaches its
        // server in the holder's declaration, not through a file here.
        let moved = connected.kind() != genesis.bus;
        let (composer, composer_task) = match &connected {
            mesh_bus::seam::Bus::Nats(_) if moved => {
                Composer::spawn_with(crate::composer::declared::DeclaredUsers {
                    store: store.clone(),
                    spec: opts.controller.clone(),
                })
            }
            mesh_bus::seam::Bus::Nats(_) => Composer::spawn(composer_config, source),
            mesh_bus::seam::Bus::Amqp(a) => {
                Composer::spawn_with(crate::composer::amqp::AmqpUsers::new(
                    amqp_management(genesis)?,
                    amqp_source(store.clone(), opts.controller.clone()),
                    amqp_declare(a.shared_connection()),
                ))
            }
        };
        let _composer_task = AbortOnDrop(composer_task);
        shared.set_composer(composer.watch());
        shared.set_phase("asserting the bus objects");
        tokio::select! {
            r = assert_on_start(&connected, &derived.objects) => r?,
            () = shutdown.as_mut() => return Ok(lease::Ended::Shutdown(CountersView::default())),
            why = lease::lost(roles) => return Ok(lease::Ended::Deposed(why)),
        }

        let ctx = Arc::new(Ctx {
            store,
            bus: connected,
            composer,
            counters: Counters::default(),
            opts: opts.clone(),
            signing_key: keys.signing_key.clone(),
            xkey_seed: keys.xkey_seed.clone(),
            xkey_public: genesis.xkey.clone(),
            window: std::sync::Mutex::new(Window::default()),
            lag: crate::http::ApplyLag::default(),
            covered: live::Covered::new(revision),
            genesis_bus_urls: genesis.bus_urls(),
            connected_urls: bus.url.split(',').map(str::to_string).collect(),
            followed_bus: tokio::sync::Mutex::new(genesis.bus_urls()),
            awaiting_spares: std::sync::Mutex::new(Default::default()),
            declare_again: tokio::sync::Notify::new(),
            hosts_ahead: std::sync::Mutex::default(),
        });
        shared.set_running(ctx.clone());
        let pass = tokio::select! {
            p = declare::declare_all(&ctx, true) => p,
            () = shutdown.as_mut() => return Ok(lease::Ended::Shutdown(CountersView::of(&ctx.counters))),
            why = lease::lost(roles) => return Ok(lease::Ended::Deposed(why)),
        };
        declare::declared_through(&ctx, revision, pass).await;
        info!(published = pass.published, "declarations composed");

        let heartbeats = ctx
            .bus
            .subscribe(subjects::ALL_HEARTBEATS)
            .await
            .map_err(|e| DaemonError::Bind(Box::new(e)))?;
        let seen = seen::LastSeen::default();
        let operations = operations::bind(&ctx).await?;
        // Where the bus keeps no artifacts, the controller hands them over.
        let fetches = match &ctx.bus {
            mesh_bus::seam::Bus::Amqp(_) => Some(
                ctx.bus
                    .subscribe(subjects::ALL_ARTIFACT_FETCHES)
                    .await
                    .map_err(|e| DaemonError::Bind(Box::new(e)))?,
            ),
            mesh_bus::seam::Bus::Nats(_) => None,
        };

        let retiring = match (genesis.bus, moved) {
            (mesh_core::bus::BusKind::Amqp, true) => match amqp_management(genesis) {
                Ok(m) => Some(m),
                Err(e) => {
                    warn!(error = %error_chain(&e), "the old bus's management API is not known: its users stay");
                    None
                }
            },
            _ => None,
        };
        let tasks: Vec<AbortOnDrop> = [
            tokio::spawn(watch::log_compositions(ctx.composer.watch())),
            tokio::spawn(live::record(ctx.clone(), ctx.composer.watch())),
            tokio::spawn(watch::follow(
                ctx.clone(),
                revision,
                derived.objects.clone(),
            )),
            // The composition made at start grants what a move needs.
            tokio::spawn(renamed::move_when_live(
                ctx.clone(),
                mesh_core::jetstream::renamed::renamed(&derived.catalogue),
                0,
            )),
            tokio::spawn(control::take_control(ctx.clone())),
            tokio::spawn(built::take(ctx.clone())),
            tokio::spawn(seen::hear(ctx.clone(), heartbeats, seen.clone())),
            tokio::spawn(seen::flush_every(ctx.clone(), seen.clone())),
            tokio::spawn(operations::serve(ctx.clone(), operations)),
            tokio::spawn(deploy::drive(ctx.clone())),
        ]
        .into_iter()
        .chain(fetches.map(|f| tokio::spawn(artifact_fetches::serve(ctx.clone(), f))))
        // A mesh on RabbitMQ prepares the NATS server it may move onto.
        .chain(
            (genesis.bus == mesh_core::bus::BusKind::Amqp && !moved)
                .then(|| tokio::spawn(rollout::keep_ahead(ctx.clone()))),
        )
        // Moved off RabbitMQ: its users removed once every node followed.
        .chain(retiring.map(|m| tokio::spawn(bus_move::retire(ctx.clone(), m))))
        .map(AbortOnDrop)
        .collect();
        info!(url = %genesis.local_url(), "controller running");
        // On the old bus of a mesh that may move: the move carried out once
        // confirmed, ending the term; the next connects to the new bus.
        let moving = async {
            match ctx.bus {
                mesh_bus::seam::Bus::Amqp(_) => bus_move::drain_then_move(ctx.clone()).await,
                mesh_bus::seam::Bus::Nats(_) => std::future::pending().await,
            }
        };
        let mut moved_on = false;
        let ended = tokio::select! {
            () = shutdown.as_mut() => None,
            why = lease::lost(roles) => Some(lease::Ended::Deposed(why)),
            () = ctx.bus.lost() => Some(lease::Ended::Reconnect),
            () = moving => {
                moved_on = true;
                Some(lease::Ended::Reconnect)
            }
        };
        // Nothing of this term acts after it: not a delivery taken, not a
        // composition written.
        drop(tasks);
        if moved_on && let mesh_bus::seam::Bus::Amqp(a) = &ctx.bus {
            // Nothing of the mesh stays on the old bus.
            let closing = a.connection().close(200, "the mesh moved onto NATS".into());
            let _ = tokio::time::timeout(CLOSE_WITHIN, closing).await;
            info!("left the old bus: this controller moves onto the new one");
        }
        if let Some(ended) = ended {
            return Ok(ended);
        }

        info!("controller stopping");
        seen.flush(&ctx.store).await;
        let view = CountersView::of(&ctx.counters);
        info!(
            enrolled = view.enrolled,
            refused = view.refused,
            terminated = view.terminated,
            heartbeats = view.heartbeats,
            reports = view.reports,
            duplicates = view.duplicates,
            superseded = view.superseded,
            let_go = view.let_go,
            "controller stopped"
        );
        // Closed before the controller returns (whoever runs the broker may
        // stop it next); bounded: a broker already gone would keep the
        // drain waiting for a reconnection that may never come.
        match &ctx.bus {
            mesh_bus::seam::Bus::Nats(n) => {
                match mesh_bus::drain_and_close(n.client(), &closed, CLOSE_WITHIN).await {
                    Ok(()) => info!("bus connection closed"),
                    Err(e) => {
                        warn!(error = %error_chain(&e), "the bus connection did not close cleanly")
                    }
                }
            }
            mesh_bus::seam::Bus::Amqp(a) => {
                let closing = a.connection().close(200, "the controller stops".into());
                match tokio::time::timeout(CLOSE_WITHIN, closing).await {
                    Ok(Ok(())) => info!("bus connection closed"),
                    _ => warn!("the bus connection did not close cleanly"),
                }
            }
        }
        Ok(lease::Ended::Shutdown(view))
    }
}

/// A task that ends with its holder.
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Asserts the objects, retrying what failed on the server's side (a reload
/// in progress can answer a create with "resource does not exist"); a plan
/// the records refuse is an error at once.
async fn assert_on_start(
    bus: &mesh_bus::seam::Bus,
    objects: &mesh_core::jetstream::Objects,
) -> Result<(), DaemonError> {
    let js = match bus {
        mesh_bus::seam::Bus::Nats(n) => n.js(),
        // No artifact store on RabbitMQ; the queues are declared with every
        // composition too.
        mesh_bus::seam::Bus::Amqp(a) => return declare_topology(a, objects).await,
    };
    let mut waits = retry_waits().take(8);
    loop {
        match mesh_bus::assert_objects(js, objects).await {
            Ok(steps) => {
                info!(steps = steps.len(), "bus objects asserted");
                break;
            }
            Err(e @ mesh_bus::AssertError::Server { .. }) => {
                let Some(wait) = waits.next() else {
                    return Err(e.into());
                };
                warn!(error = %error_chain(&e), retry_in = ?wait, "bus objects not asserted yet");
                tokio::time::sleep(wait).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    // With the streams: a wiped JetStream directory comes back with its
    // artifact store (the artifacts themselves are put again).
    loop {
        use mesh_bus::artifacts::{BucketError, Ensured, ensure_bucket_with};
        match ensure_bucket_with(js, objects.streams.first().map_or(1, |s| s.replicas)).await {
            Ok(Ensured::Created) => {
                info!("artifact store created");
                return Ok(());
            }
            Ok(Ensured::Present) => return Ok(()),
            Ok(Ensured::Changed(steps)) => {
                for step in &steps {
                    info!(step = %step.describe(), "artifact store changed in place");
                }
                return Ok(());
            }
            Err(e @ BucketError::Refused(_)) => return Err(e.into()),
            Err(e) => {
                let Some(wait) = waits.next() else {
                    return Err(e.into());
                };
                warn!(error = %error_chain(&e), retry_in = ?wait, "artifact store not asserted yet");
                tokio::time::sleep(wait).await;
            }
        }
    }
}

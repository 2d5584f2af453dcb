//! Applying declarations: verify the signature before reading anything
//! else, refuse a sequence not newer than the last applied (acked, and
//! reported as refused), plan the steps against what runs (`mesh-core`),
//! carry them out through the process driver, report, then acknowledge.
//!
//! The newest applied envelope is kept in the state directory, so a host
//! started again applies it at once (after its driver killed what the last
//! one left behind) without waiting for a redelivery that will not come.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use ed25519_dalek::VerifyingKey;
use mesh_bus::seam::Bus;
use mesh_bus::seam::Delivery;
use mesh_core::authority::PrincipalKind;
use mesh_core::declaration::{
    self, ApplyStep, Declaration, Driver as RunDriver, FileBody, ModuleDecl, Running,
};
use mesh_core::names::Name;
use mesh_core::report::{ModuleReport, ModuleState, Report};
use mesh_core::secret::Secret;
use mesh_core::subjects;
use tokio::sync::Mutex;

use mesh_bus::Refusals;

use crate::artifacts::Cache;
use crate::driver::container::{self, ContainerError, ContainerSpec, Ulimits};
use crate::driver::{ContainerRun, Driver, RunSpec};
use crate::state::{HostKeys, HostState, StateError, write_private};

mod report;
mod run_spec;

/// The newest applied envelope, as it was delivered.
pub const APPLIED_FILE: &str = "applied.json";
/// Progress is acknowledged this often while a declaration is applied, so
/// a long apply is not redelivered meanwhile.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);
/// How long the server's confirmation of an acknowledgement is waited for.
const ACK_WITHIN: Duration = Duration::from_secs(5);

/// Why a module was not started.
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error("the sealed value of {variable} does not open: {why}")]
    Sealed { variable: String, why: String },
    #[error("{0}")]
    Artifact(String),
    #[error(transparent)]
    Container(ContainerError),
    #[error("the declaration names no image for this container module")]
    NoImage,
}

/// Where a container module finds its key file (`MESH_NKEY_FILE`).
pub const CONTAINER_KEY_FILE: &str = "/run/mesh/nkey.seed";
/// Removes at once every container of the host in `dir` (a second Ctrl-C:
/// its modules are killed, and a container's client killed leaves the
/// container running). Nothing is done for a host that never ran one.
pub fn kill_containers(dir: &std::path::Path) -> Vec<String> {
    if !dir.join(CONTAINERS_MARKER).exists() {
        return Vec::new();
    }
    let (Ok(engine), Ok(state), Ok(keys)) = (
        container::require_engine(),
        HostState::open(dir),
        HostKeys::load(dir),
    ) else {
        return Vec::new();
    };
    container::kill_node_now(&engine, &state.node, keys.host_key()).unwrap_or_else(|e| {
        tracing::warn!(reason = %e, "the host's containers were not removed");
        Vec::new()
    })
}

/// In the state dir once a container module was started here.
pub const CONTAINERS_MARKER: &str = "containers";
/// A container module's working directory, its declared files under it.
pub const CONTAINER_WORKDIR: &str = "/run/mesh/work";

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error("the controller key in the host record is not an Ed25519 public key; enrol again")]
    ControllerKey,
}

struct Applied {
    /// The last sequence applied (none before the first).
    sequence: Option<u64>,
    modules: Vec<ModuleDecl>,
    /// The key its sealed values were sealed by.
    sealed_by: Option<String>,
    /// The broker addresses the running modules were given.
    bus: Vec<String>,
}

/// One per host: shared by the consumer and the driver's watcher.
pub struct Applier {
    state: HostState,
    controller: VerifyingKey,
    driver: Driver,
    applied: Mutex<Applied>,
    /// The names in `applied.modules`, readable while an apply runs.
    declared: std::sync::Mutex<Vec<Name>>,
    /// The broker addresses modules are given now (`MESH_BUS_URLS`): the
    /// recorded ones, then those a move left behind until the host restarts.
    bus: std::sync::Mutex<Vec<String>>,
    /// The address this host advertises, if it was told one.
    advertise: Option<String>,
    /// Modules that could not be started, and why (a sealed value that does
    /// not open): reported failed, not left to read as merely stopped.
    not_started: std::sync::Mutex<BTreeMap<Name, String>>,
    /// Fetched artifacts, checked before every start.
    cache: Cache,
    /// What the server refuses this host: a fetch it is not granted fails
    /// at once, naming the subject, instead of waiting out its timeout.
    refusals: Refusals,
    /// Modules whose artifacts could not be fetched: tried again at the
    /// time given, the wait doubling (DESIGN: retried with backoff).
    fetch_again: std::sync::Mutex<BTreeMap<Name, (tokio::time::Instant, Duration)>>,
    /// Held while a delivery is taken: the host's stop waits for it.
    taking: Mutex<()>,
    /// Each started module's health check.
    health: crate::health::Health,
    /// Set once a declaration named the other bus (the mesh moved from
    /// RabbitMQ onto NATS) and its report was sent on the old one: the
    /// host leaves the old bus and connects to the new with its key.
    moved: tokio::sync::watch::Sender<bool>,
}

/// The first wait before an artifact that failed to fetch is tried again,
/// and the longest.
const FETCH_RETRY_START: Duration = Duration::from_secs(1);
const FETCH_RETRY_MAX: Duration = Duration::from_secs(60);

/// The address the controller last stored for this host, as the host
/// reported it: a report carries the address until it is stored.
pub const ADVERTISED_FILE: &str = "advertised";

impl Applier {
    /// Starts the driver (which kills what a previous run left behind).
    pub fn new(
        state: &HostState,
        driver: Driver,
        advertise: Option<String>,
        refusals: Refusals,
    ) -> Result<Applier, ApplyError> {
        let controller =
            declaration::verifying_key(&state.controller_key).ok_or(ApplyError::ControllerKey)?;
        Ok(Applier {
            state: state.clone(),
            controller,
            health: crate::health::Health::new(driver.reader()),
            driver,
            applied: Mutex::new(Applied {
                sequence: None,
                modules: Vec::new(),
                sealed_by: None,
                bus: state.bus_urls.clone(),
            }),
            declared: std::sync::Mutex::new(Vec::new()),
            bus: std::sync::Mutex::new(state.bus_urls.clone()),
            advertise,
            not_started: std::sync::Mutex::new(BTreeMap::new()),
            cache: Cache::new(&state.dir),
            refusals,
            fetch_again: std::sync::Mutex::new(BTreeMap::new()),
            taking: Mutex::new(()),
            moved: tokio::sync::watch::Sender::new(false),
        })
    }

    /// Resolves once a declaration moved the mesh onto the other bus and
    /// its report went out on this one.
    pub async fn moved(&self) {
        let mut moved = self.moved.subscribe();
        let _ = moved.wait_for(|m| *m).await;
    }

    /// The addresses a connection is made to now: the recorded ones first.
    pub fn bus_addresses(&self) -> Vec<String> {
        self.bus_urls()
    }

    pub fn driver(&self) -> &Driver {
        &self.driver
    }

    pub fn health(&self) -> &crate::health::Health {
        &self.health
    }

    /// Removes this node's containers that the kept declaration does not
    /// name: a host SIGKILLed could not stop them, and nothing else will.
    /// Only on a host that ever ran a container module (a marker in its
    /// state dir), so other hosts never wait on an engine. What the kept
    /// declaration names is started again by [`Applier::resume`], replacing
    /// its old container.
    pub async fn remove_undeclared_containers(&self) {
        if !self.state.dir.join(CONTAINERS_MARKER).exists() {
            return;
        }
        let engine = match container::require_engine() {
            Ok(engine) => engine,
            Err(e) => {
                tracing::warn!(reason = %e, "containers of an earlier run are not removed");
                return;
            }
        };
        let keep: Vec<Name> = std::fs::read(self.state.dir.join(APPLIED_FILE))
            .ok()
            .and_then(|p| declaration::verify(&p, &self.controller, &self.state.node, None).ok())
            .map(|d| d.modules.into_iter().map(|m| m.name).collect())
            .unwrap_or_default();
        let host = match HostKeys::load(&self.state.dir) {
            Ok(keys) => keys.host_key().to_string(),
            Err(e) => {
                tracing::warn!(reason = %e, "containers of an earlier run are not removed");
                return;
            }
        };
        match container::remove_others(&engine, &self.state.node, &host, &keep).await {
            Ok(removed) if removed.is_empty() => {}
            Ok(removed) => tracing::info!(
                containers = %removed.join(", "),
                "removed containers no declaration names"
            ),
            Err(e) => tracing::warn!(reason = %e, "containers of an earlier run are not removed"),
        }
    }

    /// The modules the newest applied declaration names: those whose logs
    /// the logs tool serves.
    /// Not behind the apply lock: a log is wanted most while an apply is
    /// slow.
    pub fn declared(&self) -> Vec<Name> {
        self.declared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Applies the envelope a previous run kept, if any (verified again: the
    /// file is on disk, and disks are edited).
    pub async fn resume(&self, client: &Bus) {
        let path = self.state.dir.join(APPLIED_FILE);
        let Ok(payload) = std::fs::read(&path) else {
            return;
        };
        match declaration::verify(&payload, &self.controller, &self.state.node, None) {
            Ok(d) => {
                tracing::info!(
                    sequence = d.sequence,
                    "applying the declaration kept from the last run"
                );
                self.apply(client, &d).await;
                self.report(client, None).await;
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), reason = %e, "the kept declaration is not applied")
            }
        }
    }

    /// Reports now if this host advertises an address the controller has
    /// not stored yet: a node with nothing assigned reports nothing else.
    pub async fn advertise(&self, client: &Bus) {
        let advertised = std::fs::read_to_string(self.state.dir.join(ADVERTISED_FILE)).ok();
        if self
            .advertise
            .as_ref()
            .is_some_and(|a| advertised.as_deref() != Some(a.as_str()))
        {
            self.report(client, None).await;
        }
    }

    /// Resolves once no delivery is being taken.
    pub async fn idle(&self) {
        drop(self.taking.lock().await);
    }

    /// Takes one delivery: verify, apply, report, acknowledge. While it is
    /// at work, the delivery is said to be in progress now and then.
    pub async fn take(&self, client: &Bus, message: Delivery) {
        let _taking = self.taking.lock().await;
        {
            let work = self.verify_apply_report(client, &message.payload);
            tokio::pin!(work);
            let mut every = tokio::time::interval(PROGRESS_EVERY);
            every.tick().await;
            loop {
                tokio::select! {
                    () = &mut work => break,
                    _ = every.tick() => {
                        let _ = message.in_progress().await;
                    }
                }
            }
        }
        // Bounded: a newer declaration published meanwhile replaces this one
        // in NODES (one per subject), and the server never confirms an ack
        // of a message it no longer holds; unbounded, the host would wait
        // here and take nothing more.
        match tokio::time::timeout(ACK_WITHIN, message.ack_confirmed()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(reason = %e, "acknowledging the declaration"),
            Err(_) => tracing::warn!(
                waited = ?ACK_WITHIN,
                "no confirmation of the acknowledgement (a newer declaration may have replaced it)"
            ),
        }
    }

    async fn verify_apply_report(&self, client: &Bus, payload: &[u8]) {
        let applied = self.applied.lock().await.sequence;
        // The very envelope applied last, delivered again (published again
        // after a restore, or a wiped JetStream directory): nothing to
        // change, and nothing refused either; it is answered with a report.
        let kept = std::fs::read(self.state.dir.join(APPLIED_FILE)).ok();
        if let Some(sequence) = applied
            && kept.as_deref() == Some(payload)
        {
            tracing::info!(
                sequence,
                "the applied declaration delivered again; reporting"
            );
            self.report(client, None).await;
            return;
        }
        match declaration::verify(payload, &self.controller, &self.state.node, applied) {
            Ok(d) => {
                let moving = self.follow_bus(client, &d).await;
                self.apply(client, &d).await;
                if let Err(e) = write_private(&self.state.dir.join(APPLIED_FILE), payload) {
                    tracing::warn!(reason = %e, "the applied declaration was not kept");
                }
                tracing::info!(
                    sequence = d.sequence,
                    modules = d.modules.len(),
                    "declaration applied"
                );
                self.report(client, None).await;
                if moving {
                    tracing::info!(
                        urls = %self.bus_urls().join(","),
                        "the mesh moved onto the other bus: leaving this one, connecting there with this host's key"
                    );
                    self.moved.send_replace(true);
                }
            }
            Err(e) => {
                // Nothing applied; acknowledged, or it would come round
                // forever.
                tracing::warn!(reason = %e, "declaration refused");
                self.report(client, Some(e.to_string())).await;
            }
        }
    }

    /// A declaration naming other broker addresses (the broker moved, or is
    /// about to): recorded in `host.json`, and the connection's server pool
    /// becomes the new addresses, then the old ones — the client stays where
    /// it is while the old broker answers and reconnects to the new one
    /// when it stops. The host's key stays; nothing is enrolled again.
    /// Addresses of the other bus (a mesh moving from RabbitMQ onto NATS)
    /// replace the old ones outright — modules are given one bus, never
    /// both — and the result says the host must move itself.
    async fn follow_bus(&self, client: &Bus, d: &Declaration) -> bool {
        let Some(bus) = &d.bus else { return false };
        let now = self.bus_urls();
        if bus.urls.is_empty() || now.starts_with(&bus.urls) {
            return false;
        }
        let other = bus
            .urls
            .first()
            .and_then(|u| mesh_core::bus::BusKind::of_address(&u.to_ascii_lowercase()))
            .is_some_and(|k| k != client.kind());
        let mut pool = bus.urls.clone();
        if !other {
            pool.extend(now.into_iter().filter(|u| !bus.urls.contains(u)));
        }
        if let Err(e) = self.state.record_bus_urls(&bus.urls) {
            tracing::warn!(reason = %e, "the new broker addresses were not recorded");
        }
        // A RabbitMQ connection is left and made anew by the host's run
        // once the move's report is out; a NATS one follows in place.
        if let Some(n) = client.nats().filter(|_| !other) {
            match n.client().set_server_pool(pool.as_slice()).await {
                Ok(()) => {
                    tracing::info!(urls = %bus.urls.join(","), "the broker's addresses changed; following them")
                }
                Err(e) => tracing::warn!(reason = %e, "the broker's new addresses were not taken"),
            }
        }
        *self
            .bus
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = pool;
        other
    }

    fn not_started_lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Name, String>> {
        self.not_started
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn bus_urls(&self) -> Vec<String> {
        self.bus
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    async fn apply(&self, client: &Bus, d: &Declaration) {
        let mut applied = self.applied.lock().await;
        let running: Vec<Running> = applied
            .modules
            .iter()
            .filter(|m| self.driver.pid(&m.name).is_some() || self.is_managed(&m.name))
            .map(|m| Running {
                module: m.name.clone(),
                decl: m.clone(),
                bus: applied.bus.clone(),
            })
            .collect();
        let bus = self.bus_urls();
        for step in declaration::plan_apply(d, &running, &bus) {
            let restart = matches!(step, ApplyStep::Restart { .. });
            match step {
                ApplyStep::Stop { module } => {
                    self.health.forget(&module);
                    if let Err(e) = self.driver.stop(&module).await {
                        tracing::warn!(%module, reason = %e, "stopping");
                    }
                    // Nothing of a secret outlives the module.
                    if let Some(was) = applied.modules.iter().find(|m| m.name == module) {
                        crate::secrets::forget(&self.module_dir(&module), was);
                    }
                }
                ApplyStep::WriteFile { module, path, body } => {
                    self.write_file(&module, &path, &body, d.sealed_by.as_deref())
                }
                ApplyStep::Start { module } | ApplyStep::Restart { module } => {
                    // A restart stops first: the driver leaves a process
                    // running whose command and environment are unchanged,
                    // and a new version (new grants, new bytes at the same
                    // path) must start afresh, not wait for the old one's
                    // own restart backoff.
                    if restart && let Err(e) = self.driver.stop(&module.name).await {
                        tracing::warn!(module = %module.name, reason = %e, "stopping to restart");
                    }
                    self.start(client, &module, d.sealed_by.as_deref(), d.sequence)
                        .await;
                }
            }
        }
        applied.sequence = Some(d.sequence);
        applied.modules = d.modules.clone();
        applied.sealed_by = d.sealed_by.clone();
        // A module no longer declared has nothing left to fetch.
        self.fetch_again_lock()
            .retain(|m, _| d.modules.iter().any(|x| x.name == *m));
        applied.bus = bus;
        *self
            .declared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            d.modules.iter().map(|m| m.name.clone()).collect();
    }

    /// Fetches the module's artifacts and starts it; what fails is
    /// reported `failed` with the reason (a fetch is tried again later).
    async fn start(
        &self,
        client: &Bus,
        module: &ModuleDecl,
        sealed_by: Option<&str>,
        sequence: u64,
    ) {
        let spec = match self
            .cache
            .ensure_all(client, &self.state.node, &self.refusals, &module.artifacts)
            .await
        {
            Ok(paths) => {
                self.fetch_again_lock().remove(&module.name);
                self.run_spec(module, sealed_by, &paths, sequence)
            }
            Err(why) => {
                let mut again = self.fetch_again_lock();
                let wait = again
                    .get(&module.name)
                    .map_or(FETCH_RETRY_START, |(_, w)| (*w * 2).min(FETCH_RETRY_MAX));
                again.insert(
                    module.name.clone(),
                    (tokio::time::Instant::now() + wait, wait),
                );
                tracing::warn!(module = %module.name, reason = %why, retry_in = ?wait, "artifact not fetched");
                Err(StartError::Artifact(why))
            }
        };
        match spec {
            Ok(spec) => {
                self.not_started_lock().remove(&module.name);
                let probe = crate::health::Probe::for_module(module.health.as_ref(), &spec);
                match self.driver.start(spec).await {
                    // Checked afresh: health seen before was another run's.
                    Ok(()) => self
                        .health
                        .check(&module.name, module.health.as_ref(), probe),
                    Err(e) => tracing::warn!(module = %module.name, reason = %e, "starting"),
                }
            }
            Err(e) => {
                self.health.forget(&module.name);
                tracing::warn!(module = %module.name, reason = %e, "not started");
                // Not left running as it was declared before.
                let _ = self.driver.stop(&module.name).await;
                self.not_started_lock()
                    .insert(module.name.clone(), e.to_string());
            }
        }
    }

    fn fetch_again_lock(
        &self,
    ) -> std::sync::MutexGuard<'_, BTreeMap<Name, (tokio::time::Instant, Duration)>> {
        self.fetch_again
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Tries again the fetches that are due (and starts what they were
    /// for); reports when anything was tried. Returns whether any was.
    pub async fn fetch_due(&self, client: &Bus) -> bool {
        let now = tokio::time::Instant::now();
        let due: Vec<Name> = self
            .fetch_again_lock()
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(m, _)| m.clone())
            .collect();
        if due.is_empty() {
            return false;
        }
        {
            let applied = self.applied.lock().await;
            let (modules, sealed_by) = (applied.modules.clone(), applied.sealed_by.clone());
            let sequence = applied.sequence.unwrap_or(0);
            drop(applied);
            for name in due {
                match modules.iter().find(|m| m.name == name) {
                    Some(m) => self.start(client, m, sealed_by.as_deref(), sequence).await,
                    // No longer declared: nothing to fetch.
                    None => {
                        self.fetch_again_lock().remove(&name);
                    }
                }
            }
        }
        self.report(client, None).await;
        true
    }

    fn is_managed(&self, module: &Name) -> bool {
        self.driver.status().iter().any(|s| s.module == *module)
    }

    fn module_dir(&self, module: &Name) -> PathBuf {
        self.state.dir.join("modules").join(module.as_str())
    }

    fn work_dir(&self, module: &Name) -> PathBuf {
        self.module_dir(module).join("work")
    }

    /// Opens a value the controller (`sealed_by`) sealed to this host.
    /// The plaintext goes to the module's file or environment, nowhere else.
    fn open(&self, sealed_by: Option<&str>, sealed: &str) -> Result<Secret, String> {
        let sender = sealed_by.ok_or("the declaration names no key its values were sealed by")?;
        let keys = HostKeys::load(&self.state.dir).map_err(|e| e.to_string())?;
        mesh_core::sealed::open(keys.xkey_seed(), sender, sealed).map_err(|e| e.to_string())
    }

    fn write_file(&self, module: &Name, path: &str, body: &FileBody, sealed_by: Option<&str>) {
        let target = self.work_dir(module).join(path);
        let opened;
        let text = match body {
            FileBody::Content(text) => text.as_str(),
            FileBody::Sealed(sealed) => match self.open(sealed_by, sealed) {
                Ok(v) => {
                    opened = v;
                    opened.expose()
                }
                Err(why) => {
                    tracing::warn!(%module, %path, reason = %why, "a sealed file does not open; not written");
                    return;
                }
            },
        };
        let result = target
            .parent()
            .map(make_dirs)
            .unwrap_or(Ok(()))
            .and_then(|()| write_private(&target, text.as_bytes()));
        if let Err(e) = result {
            tracing::warn!(%module, %path, reason = %e, "writing a declared file");
        }
    }

    /// The module's key: made here the first time a declaration assigns it,
    /// kept 0600, handed to the process as a file. Never sent anywhere.
    fn module_key(
        &self,
        module: &Name,
        declared: Option<&str>,
    ) -> Result<(PathBuf, String), StateError> {
        let dir = self.module_dir(module);
        make_dirs(&dir)?;
        let path = dir.join("nkey.seed");
        let held = std::fs::read_to_string(&path)
            .ok()
            .and_then(|text| nkeys::KeyPair::from_seed(text.trim()).ok());
        if let Some(kp) = &held
            && declared.is_none_or(|d| d == kp.public_key())
        {
            return Ok((path, kp.public_key()));
        }
        // The key the controller gave it from this host's spares: already
        // admitted by the broker.
        if let Some(key) = declared
            && crate::spare::take(&self.state.dir, key, &path)?
        {
            return Ok((path, key.to_string()));
        }
        if let Some(kp) = held {
            tracing::warn!(%module, "the declared key is not one this host holds; keeping the module's own (reported, recorded, admitted)");
            return Ok((path, kp.public_key()));
        }
        let kp = nkeys::KeyPair::new_user();
        let seed = kp.seed().expect("a new user key has a seed");
        write_private(&path, format!("{seed}\n").as_bytes())?;
        Ok((path, kp.public_key()))
    }

    fn public_key(&self, module: &Name) -> Option<String> {
        self.announced_key(module).map(|(public, _)| public)
    }

    /// A module's public key and the RabbitMQ hash it announces.
    fn announced_key(&self, module: &Name) -> Option<(String, String)> {
        let text = std::fs::read_to_string(self.module_dir(module).join("nkey.seed")).ok()?;
        let kp = nkeys::KeyPair::from_seed(text.trim()).ok()?;
        Some((
            kp.public_key(),
            mesh_core::authority::amqp::announced_hash(&text),
        ))
    }
}

fn make_dirs(dir: &std::path::Path) -> Result<(), StateError> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| StateError::Io {
            action: "create",
            path: dir.to_path_buf(),
            source,
        })
}

//! The composer: keeps the broker's users file the composition of the
//! records, and counts a composition done only once the broker serves it.
//!
//! Every record change triggers it; a burst of triggers is coalesced
//! ([`next_batch`]) into one composition from a fresh snapshot. Each
//! composition is planned by [`users_file::plan_publication`] with a fresh
//! canary key and carried out step by step, deciding nothing. A composition whose
//! canary the broker does not admit is *not live*, and is tried again.
//!
//! Each trigger returns a generation; [`Composer::live`] waits until a
//! composition including that generation's records is live (what an
//! enrolment answers after).

pub mod amqp;
mod coalesce;
pub mod declared;
pub mod mirror;
mod publish;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use mesh_bus::BusConfig;
use mesh_core::authority::Principal;
use mesh_core::users_file::{self, UserCredential, UsersFileError};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use coalesce::{Timing, due, next_batch};
pub use publish::{PublishError, Reloader, Share};

/// What a composition is made of: the derived principals (controller first)
/// and the credentials the records hold for them.
pub type Snapshot = (Vec<Principal>, BTreeMap<String, UserCredential>);

/// A failure to read the records; the composer tries again later.
pub type SourceError = Box<dyn std::error::Error + Send + Sync>;

/// Where each composition's records come from: the controller reads the
/// store; tests hand records over directly.
pub trait RecordSource: Send + 'static {
    fn snapshot(&mut self) -> impl Future<Output = Result<Snapshot, SourceError>> + Send;
}

impl<F, Fut> RecordSource for F
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = Result<Snapshot, SourceError>> + Send,
{
    fn snapshot(&mut self) -> impl Future<Output = Result<Snapshot, SourceError>> + Send {
        self()
    }
}

/// Makes each composition's canary key. Fresh per composition, so a broker
/// still on an older file can never admit the newer canary.
pub type CanaryKeys = Arc<dyn Fn() -> nkeys::KeyPair + Send + Sync>;

/// How the composer reaches the file and the broker.
#[derive(Clone)]
pub struct ComposerConfig {
    /// The users file the broker includes.
    pub users_file: PathBuf,
    pub reloader: Reloader,
    /// The broker's address and its CA or pin; principal, credential and
    /// inbox are replaced by the canary's.
    pub bus: BusConfig,
    /// Every server of a clustered bus, each confirmed on its own; empty:
    /// `bus` alone.
    pub servers: Vec<String>,
    pub timing: Timing,
    /// How long the canary keeps trying after the signal.
    pub confirm_within: Duration,
    /// When a composition did not go live, how soon it is tried again
    /// without a new trigger.
    pub retry_after: Duration,
    pub canary_keys: CanaryKeys,
    /// A clustered bus: each composition shared through the store before
    /// it is written, for the other machines' servers ([`mirror`]).
    pub share: Option<Share>,
}

impl ComposerConfig {
    pub fn new(users_file: PathBuf, reloader: Reloader, bus: BusConfig) -> ComposerConfig {
        ComposerConfig {
            users_file,
            reloader,
            bus,
            servers: Vec::new(),
            timing: Timing::default(),
            // A reload re-checks every connected client: at 10,000 hosts it
            // took 7 s here (BENCHMARKS.md). A shorter wait called such a
            // reload not live and signalled a second one, as slow again.
            confirm_within: Duration::from_secs(15),
            retry_after: Duration::from_secs(10),
            canary_keys: Arc::new(nkeys::KeyPair::new_user),
            share: None,
        }
    }
}

impl std::fmt::Debug for ComposerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComposerConfig")
            .field("users_file", &self.users_file)
            .field("reloader", &self.reloader)
            .field("bus", &self.bus)
            .field("servers", &self.servers)
            .field("timing", &self.timing)
            .field("confirm_within", &self.confirm_within)
            .field("retry_after", &self.retry_after)
            .field("share", &self.share.is_some())
            .finish_non_exhaustive()
    }
}

/// Why a composition is not live.
#[derive(Debug, thiserror::Error)]
pub enum ComposeError {
    #[error("could not read the records")]
    Source(#[source] SourceError),
    #[error("the users file was not composed")]
    Compose(#[from] UsersFileError),
    #[error("the users file was composed but is not live")]
    Publish(#[from] PublishError),
    #[error("the users on RabbitMQ were not made so")]
    Amqp(#[from] mesh_bus::amqp::ManagementError),
    #[error("the mesh's queues on RabbitMQ were not declared")]
    Declare(#[source] SourceError),
}

/// How one composition ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Written, signalled, and the broker admitted its canary. `omitted`
    /// names the principals left out for want of a credential.
    Live {
        generation: u64,
        canary: String,
        omitted: Vec<String>,
    },
    /// The same text as the composition last confirmed live: nothing sent.
    Unchanged {
        generation: u64,
        omitted: Vec<String>,
    },
    /// Not in force on the broker (it still serves an older file, or none
    /// was written); tried again on the next trigger or after the retry.
    NotLive {
        generation: u64,
        error: Arc<ComposeError>,
    },
}

impl Outcome {
    pub fn generation(&self) -> u64 {
        match self {
            Outcome::Live { generation, .. }
            | Outcome::Unchanged { generation, .. }
            | Outcome::NotLive { generation, .. } => *generation,
        }
    }

    pub fn is_live(&self) -> bool {
        !matches!(self, Outcome::NotLive { .. })
    }
}

/// What the composer has done since it started.
#[derive(Debug, Clone, Default)]
pub struct ComposerStatus {
    pub compositions: u64,
    pub writes: u64,
    pub signals: u64,
    /// Compositions confirmed live by their canary.
    pub live: u64,
    pub not_live: u64,
    pub unchanged: u64,
    /// The highest generation whose records the broker is known to serve;
    /// none before the first composition is live.
    pub live_generation: Option<u64>,
    pub last: Option<Outcome>,
    /// How long the last composition that signalled the broker took, from
    /// reading the records to its canary admitted (or given up on).
    pub last_reload: Option<std::time::Duration>,
}

/// The composer task stopped (its handle was dropped or it panicked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the composer has stopped")]
pub struct Stopped;

/// Triggers compositions and reads how they went. Dropping every clone of
/// [`Trigger`] and the handle stops the task.
#[derive(Debug, Clone)]
pub struct Trigger(watch::Sender<u64>);

impl Trigger {
    /// Asks for a composition of the records as they are now (change them
    /// first); returns the generation to wait for.
    pub fn trigger(&self) -> u64 {
        let mut generation = 0;
        self.0.send_modify(|g| {
            *g += 1;
            generation = *g;
        });
        generation
    }
}

#[derive(Debug)]
pub struct Composer {
    trigger: Trigger,
    status: watch::Receiver<ComposerStatus>,
}

impl Composer {
    /// Starts the task on the current tokio runtime. It composes once at start (the file is the
    /// controller's from its first composition on), then on each trigger.
    pub fn spawn(config: ComposerConfig, source: impl RecordSource) -> (Composer, JoinHandle<()>) {
        Self::spawn_with(UsersFile {
            config,
            source,
            last_live: None,
        })
    }

    /// [`Self::spawn`] for any kind of composition (the users file of
    /// NATS, the users of RabbitMQ: [`amqp`]).
    pub(crate) fn spawn_with(c: impl Composition) -> (Composer, JoinHandle<()>) {
        let (trigger, triggers) = watch::channel(0u64);
        let (status_tx, status) = watch::channel(ComposerStatus::default());
        let task = tokio::spawn(run(c, triggers, status_tx));
        let composer = Composer {
            trigger: Trigger(trigger),
            status,
        };
        (composer, task)
    }

    pub fn trigger(&self) -> u64 {
        self.trigger.trigger()
    }

    /// A handle for whoever changes records.
    pub fn trigger_handle(&self) -> Trigger {
        self.trigger.clone()
    }

    pub fn status(&self) -> ComposerStatus {
        self.status.borrow().clone()
    }

    pub fn watch(&self) -> watch::Receiver<ComposerStatus> {
        self.status.clone()
    }

    /// Waits until a composition including `generation` is live.
    pub async fn live(&self, generation: u64) -> Result<ComposerStatus, Stopped> {
        self.wait_for(|s| s.live_generation.is_some_and(|g| g >= generation))
            .await
    }

    /// Waits until a composition including `generation` has ended, live or not.
    pub async fn outcome(&self, generation: u64) -> Result<ComposerStatus, Stopped> {
        self.wait_for(|s| {
            s.last
                .as_ref()
                .is_some_and(|o| o.generation() >= generation)
        })
        .await
    }

    pub async fn wait_for(
        &self,
        f: impl FnMut(&ComposerStatus) -> bool,
    ) -> Result<ComposerStatus, Stopped> {
        let mut rx = self.status.clone();
        rx.wait_for(f).await.map(|s| s.clone()).map_err(|_| Stopped)
    }
}

/// One kind of composition: what makes the broker admit exactly the
/// derived principals, once per batch of triggers.
pub(crate) trait Composition: Send + 'static {
    fn once(&mut self, generation: u64) -> impl Future<Output = (Outcome, publish::Done)> + Send;
    fn timing(&self) -> Timing;
    /// How soon a composition that did not go live is tried again.
    fn retry_after(&self) -> Duration;
}

/// NATS: the users file written, the broker signalled, the canary admitted.
struct UsersFile<S> {
    config: ComposerConfig,
    source: S,
    // Only what the broker confirmed (its digest): a file written but not
    // admitted is composed (and written) again.
    last_live: Option<String>,
}

impl<S: RecordSource> Composition for UsersFile<S> {
    async fn once(&mut self, generation: u64) -> (Outcome, publish::Done) {
        compose_once(
            &self.config,
            &mut self.source,
            generation,
            &mut self.last_live,
        )
        .await
    }

    fn timing(&self) -> Timing {
        self.config.timing
    }

    fn retry_after(&self) -> Duration {
        self.config.retry_after
    }
}

async fn run(
    mut c: impl Composition,
    mut triggers: watch::Receiver<u64>,
    status: watch::Sender<ComposerStatus>,
) {
    let mut generation = *triggers.borrow_and_update();
    loop {
        let started = Instant::now();
        let (outcome, done) = c.once(generation).await;
        let retry_at = (!outcome.is_live()).then(|| Instant::now() + c.retry_after());
        status.send_modify(|s| {
            s.compositions += 1;
            s.writes += u64::from(done.written);
            s.signals += u64::from(done.signalled);
            if done.signalled {
                s.last_reload = Some(started.elapsed());
            }
            match &outcome {
                Outcome::Live { .. } => s.live += 1,
                Outcome::Unchanged { .. } => s.unchanged += 1,
                Outcome::NotLive { .. } => s.not_live += 1,
            }
            if outcome.is_live() {
                s.live_generation = s.live_generation.max(Some(outcome.generation()));
            }
            s.last = Some(outcome);
        });
        match next_batch(&mut triggers, c.timing(), retry_at).await {
            Some(g) => generation = g,
            None => return,
        }
    }
}

async fn compose_once(
    config: &ComposerConfig,
    source: &mut impl RecordSource,
    generation: u64,
    last_live: &mut Option<String>,
) -> (Outcome, publish::Done) {
    let mut done = publish::Done::default();
    let not_live = |error: ComposeError| Outcome::NotLive {
        generation,
        error: Arc::new(error),
    };
    // After the generation was read: a change made before its trigger is in.
    let (principals, credentials) = match source.snapshot().await {
        Ok(s) => s,
        Err(e) => return (not_live(ComposeError::Source(e)), done),
    };
    let file = match users_file::compose(&principals, &credentials) {
        Ok(f) => f,
        Err(e) => return (not_live(e.into()), done),
    };
    // The seed stays in this frame and is gone with it.
    let canary = (config.canary_keys)();
    let digest = users_file::digest(&file.text);
    let omitted = file.omitted;
    let steps = users_file::plan_publication(file.text, last_live.as_deref(), &canary.public_key());
    if steps.is_empty() {
        return (
            Outcome::Unchanged {
                generation,
                omitted,
            },
            done,
        );
    }
    let target = publish::Target {
        users_file: &config.users_file,
        reloader: &config.reloader,
        bus: &config.bus,
        servers: &config.servers,
        confirm_within: config.confirm_within,
        canary: &canary,
        share: config.share.as_ref(),
    };
    let result = publish::execute(&steps, &target, &mut done).await;
    // The steps (the file's one copy) go before anything is kept.
    drop(steps);
    drop(principals);
    crate::memory::give_back();
    let outcome = judge(result, done, generation, canary.public_key(), omitted);
    if matches!(outcome, Outcome::Live { .. }) {
        *last_live = Some(digest);
    }
    (outcome, done)
}

/// What a carried-out plan amounts to. Live only on the canary's word: a
/// written file and a sent signal are no evidence the broker serves it.
fn judge(
    result: Result<(), PublishError>,
    done: publish::Done,
    generation: u64,
    canary: String,
    omitted: Vec<String>,
) -> Outcome {
    let not_live = |e: PublishError| Outcome::NotLive {
        generation,
        error: Arc::new(e.into()),
    };
    match result {
        Ok(()) if !done.confirmed => not_live(PublishError::Unconfirmed),
        Ok(()) => Outcome::Live {
            generation,
            canary,
            omitted,
        },
        Err(e) => not_live(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use publish::Done;

    #[test]
    fn only_a_confirmed_plan_is_live() {
        let wrote_and_signalled = Done {
            written: true,
            signalled: true,
            confirmed: false,
        };
        let o = judge(Ok(()), wrote_and_signalled, 7, "UC".into(), vec![]);
        assert!(
            matches!(&o, Outcome::NotLive { generation: 7, error } if matches!(**error, ComposeError::Publish(PublishError::Unconfirmed))),
            "{o:?}"
        );
        let confirmed = Done {
            confirmed: true,
            ..wrote_and_signalled
        };
        let o = judge(Ok(()), confirmed, 7, "UC".into(), vec!["host_n9".into()]);
        assert!(
            matches!(&o, Outcome::Live { generation: 7, canary, omitted } if canary == "UC" && omitted == &["host_n9"]),
            "{o:?}"
        );
        let failed = judge(
            Err(PublishError::ForeignCanary {
                planned: "UX".into(),
            }),
            confirmed,
            7,
            "UC".into(),
            vec![],
        );
        assert!(!failed.is_live(), "{failed:?}");
    }
}

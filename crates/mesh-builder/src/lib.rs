//! The build machine (DESIGN §6 "Builds"): a module holding the
//! `mesh-build-machine` role. It takes `build` work from the role's queue,
//! fetches the module's repository, checks out the revision (resolved to a
//! commit: the version), runs `[build] command` in a clean directory with a
//! clean environment and a time limit, puts each `[build] artifacts` path
//! into `ARTIFACTS`, reads the build's inputs out of its files, and
//! announces one `built` event. Its authority is the role's, derived like
//! any module's: it can do nothing else.

mod announce;
mod build;
mod git;
mod inputs;
mod run;

use std::path::PathBuf;
use std::time::Duration;

use mesh_core::catalogue::BUILD_MACHINE_ROLE;
use mesh_sdk::Module;
use tracing::{error, info, warn};

pub use build::{Failure, Request, read_request};
pub use run::stop_all;

/// How the build machine works.
#[derive(Debug, Clone)]
pub struct Options {
    /// Repositories fetched, builds in progress, the builds' home.
    pub cache: PathBuf,
    /// A build running longer is killed and reported failed.
    pub time_limit: Duration,
    /// Builds run at once; work arriving while all run is handed back.
    pub parallel: usize,
}

/// How long work handed back waits before it comes round again (to this
/// build machine or another).
const HAND_BACK: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
pub enum BuilderError {
    #[error("could not connect as a module")]
    Connect(#[source] mesh_sdk::SdkError),
    #[error("could not take the {BUILD_MACHINE_ROLE} role's work")]
    Work(#[source] mesh_sdk::SdkError),
    #[error("could not prepare the cache {}", path.display())]
    Cache {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the {BUILD_MACHINE_ROLE} work queue ended (the connection closed)")]
    Ended,
}

/// Connects as the module the host started, takes the role's work and
/// builds until the queue ends.
pub async fn run(options: Options) -> Result<(), BuilderError> {
    let module = Module::connect().await.map_err(BuilderError::Connect)?;
    let cache = build::Cache::prepare(&options.cache).map_err(|source| BuilderError::Cache {
        path: options.cache.clone(),
        source,
    })?;
    let mut queue = module
        .work(BUILD_MACHINE_ROLE)
        .await
        .map_err(BuilderError::Work)?;
    info!(cache = %options.cache.display(), parallel = options.parallel, "taking build work");
    let module = std::sync::Arc::new(module);
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(options.parallel.max(1)));
    while let Some(work) = queue.next().await {
        let work = match work {
            Ok(w) => w,
            // A delivery that is no envelope was terminated by the SDK.
            Err(e) => {
                warn!(error = %e, "build work that is not an envelope: terminated");
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // Busy: another build machine (or this one, later) takes it; a
            // claim held while waiting would keep it from an idle one.
            if let Err(e) = work.hand_back(HAND_BACK).await {
                warn!(error = %e, "could not hand back build work");
            }
            continue;
        };
        let request = match read_request(&work.envelope.payload) {
            Ok(r) => r,
            Err(e) => {
                // Work that can never be built is dropped, not redelivered
                // forever.
                error!(subject = %work.subject, error = %e, "malformed build work: terminated");
                let _ = work.term().await;
                continue;
            }
        };
        let (module, cache, options) = (module.clone(), cache.clone(), options.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let id = request.id.clone();
            info!(id = %id, module = %request.module, rev = %request.rev, delivered = work.delivered, "building");
            // The claim is kept through building and announcing: announcing
            // is part of the work, and work dropped unannounced comes round.
            let built = work
                .keep_alive(async {
                    let built = build::build(&module, &cache, &options, &request).await;
                    announce::announce(&module, &built).await;
                    built
                })
                .await;
            match &built.failure {
                None => info!(id = %id, version = built.version.as_deref().unwrap_or(""), "built"),
                Some(f) => warn!(id = %id, failure = %f, "build failed"),
            }
            if let Err(e) = work.ack().await {
                // Announced but not acknowledged: it comes round, is built
                // again and announced again, and recorded once.
                warn!(id = %id, error = %e, "could not acknowledge finished build work");
            }
        });
    }
    Err(BuilderError::Ended)
}

//! Submitting a build, one path for `mesh build` on the controller's
//! machine and the controller serving a person: the module's registered
//! manifest names its repository, and the work goes into the build
//! machines' queue, stored before this returns.

use mesh_core::build::{BuildRequest, WORK_KIND};
use mesh_core::catalogue::BUILD_MACHINE_ROLE;
use mesh_core::event::EventEnvelope;
use mesh_core::names::Name;
use mesh_core::subjects;
use mesh_store::{Store, StoreError};

/// The envelope's sender for work the controller submits: it is no module,
/// and the subject's grant (not this) says who could have sent it.
const SUBMITTER: (&str, &str) = ("mesh", "controller");

/// Why a build was not queued.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The module cannot be built as asked; the text says what to do.
    #[error("{0}")]
    Refused(String),
    #[error("reading the module's manifest")]
    Store(#[from] StoreError),
    #[error(
        "the {BUILD_MACHINE_ROLE} queue did not store the build on {subject} (is the controller running? it asserts the queue)"
    )]
    NotStored {
        subject: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// A build queued: its id and what it builds.
#[derive(Debug, Clone)]
pub struct Submitted {
    pub id: String,
    pub request: BuildRequest,
}

/// Queues a build of `module` at `rev` (a branch, tag or commit).
pub async fn submit(
    store: &Store,
    bus: &mesh_bus::seam::Bus,
    module: &Name,
    rev: &str,
) -> Result<Submitted, SubmitError> {
    if !mesh_core::build::rev_ok(rev) {
        return Err(SubmitError::Refused(format!(
            "{rev:?} is not a revision to build (empty, a space, or a leading `-`)"
        )));
    }
    let Some(registered) = store.module(module).await? else {
        return Err(SubmitError::Refused(format!(
            "module {module} is not registered; `mesh catalogue register DIR` first"
        )));
    };
    let manifest = mesh_core::manifest::parse(
        &format!("{module} (registered)"),
        &registered.manifest_source,
    )
    .map_err(|_| {
        SubmitError::Refused(format!(
            "the registered manifest of {module} does not parse; register it again"
        ))
    })?;
    let Some(repository) = manifest.repository.as_ref().map(|r| r.value.clone()) else {
        return Err(SubmitError::Refused(format!(
            "module {module} names no repository; add `repository = \"file:///path/to/repo\"` (a git URL) to its [module] and register it again"
        )));
    };
    let id = hex::encode(rand::random::<[u8; 16]>());
    let request = BuildRequest {
        id: id.clone(),
        module: module.clone(),
        repository,
        rev: rev.to_string(),
    };
    let not_stored =
        |subject: &str, e: Box<dyn std::error::Error + Send + Sync>| SubmitError::NotStored {
            subject: subject.to_string(),
            source: e,
        };
    let names = |s: &str| Name::new(s).map_err(|e| SubmitError::Refused(e.to_string()));
    let envelope = EventEnvelope {
        id: id.clone(),
        module: names(SUBMITTER.0)?,
        node: names(SUBMITTER.1)?,
        at: u64::try_from(mesh_store::now_ms()).unwrap_or(0),
        payload: serde_json::to_value(&request).map_err(|e| not_stored("", Box::new(e)))?,
    };
    let work = subjects::seat_work(&names(BUILD_MACHINE_ROLE)?, &names(WORK_KIND)?);
    let body = envelope
        .to_json()
        .map_err(|e| not_stored(&work, Box::new(e)))?;
    bus.publish_stored(&work, &body)
        .await
        .map_err(|e| not_stored(&work, Box::new(e)))?;
    Ok(Submitted { id, request })
}

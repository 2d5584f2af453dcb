//! Registering a catalogue, whoever registers it (`mesh catalogue
//! register`, `mesh fleet load`, `mesh plan register`, `mesh up`, or the
//! controller for a person): the catalogue is checked as it would be once
//! registered, with every registered manifest in view — a manifest may hold
//! a seat a registered module declares, and a registration may break what
//! is registered (a consumer left subscribed to nothing, a holder left
//! without its seat). What is recorded — manifests, every seat, the renames
//! of `aliases.toml` — is the same [`Registration`] for all of them.

use std::collections::BTreeMap;

use mesh_core::catalogue::Catalogue;
use mesh_store::{Registration, Store};

use crate::catalogue::CatalogueCheck;
use crate::registered::RegisteredError;

/// The catalogue registered already, as a registration sees it.
#[derive(Debug, Clone)]
pub struct InView {
    pub catalogue: Catalogue,
    /// The registered manifests' texts, by the name diagnostics give them
    /// (`registered:<module>`).
    pub sources: BTreeMap<String, String>,
    /// The catalogue's revision when it was read: a registration checked
    /// against it is recorded only while it holds.
    pub revision: Option<i64>,
}

impl InView {
    /// Nothing registered: a store not made yet.
    pub fn empty() -> InView {
        InView {
            catalogue: Catalogue::build(Vec::new(), Default::default()),
            sources: BTreeMap::new(),
            revision: None,
        }
    }

    /// What `store` has registered.
    pub async fn read(store: &Store) -> Result<InView, RegisteredError> {
        // Read first: a registration after it moves it, whatever was read.
        let revision = store.records_revisions().await?.get("catalogue").copied();
        let registered = crate::registered::read(store).await?;
        let sources = store
            .modules()
            .await?
            .into_iter()
            .map(|m| {
                (
                    crate::registered::source_name(m.name.as_str()),
                    m.manifest_source,
                )
            })
            .collect();
        Ok(InView {
            catalogue: registered.catalogue,
            sources,
            revision,
        })
    }
}

/// A catalogue checked for registering.
#[derive(Debug)]
pub struct Registering {
    /// The files read: their manifests, renames and texts.
    pub report: CatalogueCheck,
    /// The registered catalogue once they are registered.
    pub after: Catalogue,
    /// What the store records.
    pub registration: Registration,
}

/// Why a catalogue is not registered: the diagnostics to show, each where
/// it is (the texts of the files and of the registered manifests kept).
#[derive(Debug)]
pub enum Refused {
    /// A file has errors of its own.
    Errors(Box<CatalogueCheck>),
    /// With the registered catalogue in view it has errors; `in_registered`
    /// when some are in registered manifests (the registration breaks them).
    Breaks {
        check: Box<CatalogueCheck>,
        in_registered: bool,
    },
}

/// Records what `prepare` made of `registered`, only while the registered
/// catalogue is as it was read.
pub async fn record(
    store: &Store,
    registering: &Registering,
    registered: &InView,
) -> Result<(), mesh_store::StoreError> {
    match registered.revision {
        Some(r) => {
            store
                .register_catalogue_at(&registering.registration, r)
                .await
        }
        None => store.register_catalogue(&registering.registration).await,
    }
}

/// Checks `report` (the files read) for registering into `registered`.
pub fn prepare(report: CatalogueCheck, registered: &InView) -> Result<Registering, Refused> {
    if report.errors() > 0 {
        return Err(Refused::Errors(Box::new(report)));
    }
    let after = registered.catalogue.registering(&report.catalogue);
    let broken = mesh_core::catalogue::broken_by(&registered.catalogue, &after);
    if !broken.is_empty() {
        let in_registered = broken
            .iter()
            .any(|d| !report.sources.contains_key(&d.location.file));
        let mut sources = registered.sources.clone();
        sources.extend(report.sources);
        return Err(Refused::Breaks {
            check: Box::new(CatalogueCheck {
                manifests: after.manifests().len(),
                diagnostics: broken,
                sources,
                catalogue: after,
            }),
            in_registered,
        });
    }
    let mut registration = Registration::default();
    for m in report.catalogue.manifests() {
        // Every manifest that parsed has its text: `from_texts` and `read`
        // keep each one they parse.
        let source = report.sources.get(&m.path).cloned().unwrap_or_default();
        registration.modules.push((m.name.value.clone(), source));
    }
    // Every seat of the catalogue after, roles included: an alias names a
    // recorded seat, and a catalogue registered before seats were recorded
    // gets them now.
    for entry in after.seats() {
        registration.seats.push(mesh_store::Seat {
            name: entry.decl.name.value.clone(),
            declared_by: entry.module.clone(),
            scope: entry.decl.scope.value,
            protocol: entry.decl.protocol.value.clone(),
        });
    }
    // A rename is a row: the controller's catalogue resolves it from the
    // store, never from a file it cannot see.
    for a in report.catalogue.aliases().entries() {
        registration
            .aliases
            .push((a.old.value.clone(), after.resolve_seat(&a.old.value)));
    }
    Ok(Registering {
        report,
        after,
        registration,
    })
}

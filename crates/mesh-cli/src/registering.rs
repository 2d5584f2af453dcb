//! Registering a catalogue, one path for `mesh catalogue register`, `mesh
//! fleet load`, `mesh plan register` and `mesh up`: each file is read and
//! parsed on its own, then the catalogue is checked as it would be once
//! registered, with every registered manifest in view — a manifest may hold
//! a seat a registered module declares, and a registration may break what
//! is registered (a consumer left subscribed to nothing, a holder left
//! without its seat). What is recorded — manifests, every seat, the renames
//! of `aliases.toml` — is the same [`Registration`] for all of them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use mesh_core::catalogue::Catalogue;
use mesh_state::CatalogueCheck;
use mesh_store::{Registration, Store};

use crate::authority;
use crate::check;

/// The catalogue registered already, as a registration sees it.
#[derive(Debug, Clone)]
pub struct InView {
    pub catalogue: Catalogue,
    /// The registered manifests' texts, by the name diagnostics give them
    /// (`registered:<module>`).
    pub sources: BTreeMap<String, String>,
}

impl InView {
    /// Nothing registered: a store not made yet.
    pub fn empty() -> InView {
        InView {
            catalogue: Catalogue::build(Vec::new(), Default::default()),
            sources: BTreeMap::new(),
        }
    }

    /// What `store` has registered.
    pub async fn read(store: &Store) -> anyhow::Result<InView> {
        let registered = mesh_state::registered::read(store).await?;
        let sources = store
            .modules()
            .await?
            .into_iter()
            .map(|m| {
                (
                    mesh_state::registered::source_name(m.name.as_str()),
                    m.manifest_source,
                )
            })
            .collect();
        Ok(InView {
            catalogue: registered.catalogue,
            sources,
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

/// Reads `paths` and checks them for registering into `registered`: a file
/// that does not parse, or a catalogue that would have an error the
/// registered one has not, is refused, its diagnostics printed (each where
/// it is), with `refusal` saying what it blocks.
pub fn checked(
    paths: &[PathBuf],
    registered: &InView,
    refusal: &str,
) -> anyhow::Result<Registering> {
    let report = mesh_state::catalogue::read(paths)?;
    authority::refuse_errors(&report, paths, refusal)?;
    let after = registered.catalogue.registering(&report.catalogue);
    let broken = mesh_core::catalogue::broken_by(&registered.catalogue, &after);
    if !broken.is_empty() {
        let n = broken.len();
        let in_registered = broken
            .iter()
            .any(|d| !report.sources.contains_key(&d.location.file));
        let mut sources = registered.sources.clone();
        sources.extend(report.sources.clone());
        check::print_text(&CatalogueCheck {
            manifests: after.manifests().len(),
            diagnostics: broken,
            sources,
            catalogue: after,
        })?;
        let (n, s) = (mesh_core::diagnostic::thousands(n), check::plural(n));
        if in_registered {
            bail!(
                "registering {} would break the registered catalogue: {n} error{s} (printed above, each where it breaks); {refusal}",
                authority::shown(paths)
            );
        }
        bail!(
            "the catalogue has {n} error{s} with the registered catalogue in view (printed above); {refusal}"
        );
    }
    let mut registration = Registration::default();
    for m in report.catalogue.manifests() {
        let source = report
            .sources
            .get(&m.path)
            .with_context(|| format!("the text of {} was not kept", m.path))?;
        registration
            .modules
            .push((m.name.value.clone(), source.clone()));
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

/// Checks `paths` against what `store` has registered and records them in
/// one transaction (refused whole when it would make an assigned module a
/// second holder of a seat).
pub async fn register(
    store: &Store,
    paths: &[PathBuf],
    refusal: &str,
) -> anyhow::Result<Registering> {
    let registering = checked(paths, &InView::read(store).await?, refusal)?;
    store
        .register_catalogue(&registering.registration)
        .await
        .with_context(|| format!("registering {}: {refusal}", authority::shown(paths)))?;
    Ok(registering)
}

//! Registering a catalogue from files, one path for `mesh catalogue
//! register`, `mesh fleet load`, `mesh plan register` and `mesh up`: each
//! file read and parsed on its own, then checked with every registered
//! manifest in view by `mesh_state::registering` (the controller checks a
//! person's files there too); what does not pass is printed, each where it
//! is.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
pub use mesh_state::registering::{InView, Registering};
use mesh_state::registering::{Refused, prepare};
use mesh_store::Store;

use crate::authority;
use crate::check;

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
    match prepare(report, registered) {
        Ok(r) => Ok(r),
        Err(Refused::Errors(report)) => {
            authority::refuse_errors(&report, paths, refusal)?;
            bail!("the catalogue has errors; {refusal}")
        }
        Err(Refused::Breaks {
            check,
            in_registered,
        }) => {
            let n = check.diagnostics.len();
            check::print_text(&check)?;
            let (n, s) = (mesh_core::diagnostic::thousands(n), check::plural(n));
            if in_registered {
                bail!(
                    "registering {} would break the registered catalogue: {n} error{s} (printed above, each where it breaks); {refusal}",
                    authority::shown(paths)
                );
            }
            bail!(
                "the catalogue has {n} error{s} with the registered catalogue in view (printed above); {refusal}"
            )
        }
    }
}

/// Checks `paths` against what `store` has registered and records them in
/// one transaction (refused whole when it would make an assigned module a
/// second holder of a seat).
pub async fn register(
    store: &Store,
    paths: &[PathBuf],
    refusal: &str,
) -> anyhow::Result<Registering> {
    let registered = InView::read(store).await?;
    let registering = checked(paths, &registered, refusal)?;
    mesh_state::registering::record(store, &registering, &registered)
        .await
        .with_context(|| format!("registering {}: {refusal}", authority::shown(paths)))?;
    Ok(registering)
}

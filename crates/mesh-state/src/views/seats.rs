//! `mesh seats` and the catalogue as the operator's view shows it: every
//! declared seat and role with who holds it where, and which module
//! consumes whose events.

use mesh_core::catalogue::{Catalogue, Origin};
use mesh_core::names::Name;
use mesh_store::Store;
use serde::{Deserialize, Serialize};

use super::ViewError;

/// One declared seat or role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeatView {
    pub seat: String,
    /// `role` (the mesh declares it) or `seat` (a module does).
    pub kind: String,
    /// The declaring module; none for a role.
    pub declared_by: Option<String>,
    /// `node` (one holder per node) or `mesh` (one in the mesh).
    pub scope: String,
    /// Empty for a marker.
    pub protocol: String,
    pub accepts: Vec<String>,
    pub emits: Vec<String>,
    pub tools: Vec<String>,
    /// Where it is held, from the assignments of modules that claim it.
    pub holders: Vec<HolderView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderView {
    pub node: String,
    pub module: String,
}

/// Every registered module's place in the catalogue graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogueView {
    pub modules: Vec<CatalogueModule>,
    pub seats: Vec<SeatView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogueModule {
    pub module: String,
    pub holds: Vec<String>,
    /// Seats it submits work to.
    pub uses: Vec<String>,
    pub emits: Vec<String>,
    pub consumes: Vec<ConsumeView>,
}

/// One `[events] consumes` entry, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumeView {
    /// A module name, or `seat:NAME`.
    pub emitter: String,
    pub event: String,
    pub subject: String,
    /// No registered module or declared seat emits under that name: the
    /// consumer waits for an emitter that does not exist yet.
    pub dangling: bool,
}

fn names(v: &[mesh_core::manifest::Located<Name>]) -> Vec<String> {
    v.iter().map(|n| n.value.to_string()).collect()
}

/// The seats of `catalogue`, each with its holders among `assignments`.
fn seat_views(catalogue: &Catalogue, assignments: &[mesh_store::Assignment]) -> Vec<SeatView> {
    catalogue
        .seats()
        .map(|entry| {
            let seat = &entry.decl.name.value;
            let holders = assignments
                .iter()
                .filter(|a| {
                    catalogue
                        .module(&a.module)
                        .is_some_and(|m| catalogue.held_seats(m).iter().any(|h| &h.seat == seat))
                })
                .map(|a| HolderView {
                    node: a.node.to_string(),
                    module: a.module.to_string(),
                })
                .collect();
            SeatView {
                seat: seat.to_string(),
                kind: match entry.origin {
                    Origin::Mesh => "role",
                    Origin::Manifest(_) => "seat",
                }
                .into(),
                declared_by: entry.module.as_ref().map(Name::to_string),
                scope: entry.decl.scope.value.to_string(),
                protocol: entry.decl.protocol.value.clone(),
                accepts: names(&entry.decl.accepts),
                emits: names(&entry.decl.emits),
                tools: names(&entry.decl.tools),
                holders,
            }
        })
        .collect()
}

/// Every declared seat and role of the registered catalogue, by name.
pub async fn seats(store: &Store) -> Result<Vec<SeatView>, ViewError> {
    let catalogue = crate::registered::catalogue(store).await?;
    let assignments = store.assignments().await?;
    Ok(seat_views(&catalogue, &assignments))
}

/// The registered catalogue: modules with what they hold, use, emit and
/// consume, and the seats.
pub async fn catalogue(store: &Store) -> Result<CatalogueView, ViewError> {
    let catalogue = crate::registered::catalogue(store).await?;
    let assignments = store.assignments().await?;
    let modules = catalogue
        .manifests()
        .iter()
        .map(|m| CatalogueModule {
            module: m.name.value.to_string(),
            holds: catalogue
                .held_seats(m)
                .into_iter()
                .map(|s| s.seat.to_string())
                .collect(),
            uses: catalogue
                .used_seats(m)
                .into_iter()
                .map(|s| s.seat.to_string())
                .collect(),
            emits: names(&m.emits),
            consumes: catalogue
                .consumes(m)
                .into_iter()
                .map(|c| ConsumeView {
                    dangling: catalogue.publications(&c.emitter).is_none(),
                    emitter: c.emitter.to_string(),
                    event: c.event.to_string(),
                    subject: c.subject,
                })
                .collect(),
        })
        .collect();
    Ok(CatalogueView {
        modules,
        seats: seat_views(&catalogue, &assignments),
    })
}

//! Everything the controller derives from the store in one read: the
//! snapshot, the principals the users file is composed from, and the bus
//! objects it asserts — from one catalogue and one set of records, so the
//! grants and the objects can never come from two different readings.

use std::collections::BTreeMap;

use mesh_core::authority::{self, AuthorityError, Principal};
use mesh_core::catalogue::{self, Catalogue};
use mesh_core::jetstream::{self, Objects, ObjectsError};
use mesh_core::names::Name;
use mesh_core::records::ControllerSpec;
use mesh_store::{Store, StoreError};

use crate::registered::{self, RegisteredError};
use crate::snapshot::{self, Snapshot};

#[derive(Debug)]
pub struct Derived {
    /// The registered catalogue the rest was derived from.
    pub catalogue: Catalogue,
    /// Registered modules the mesh leaves out (module → why): no principal,
    /// no consumer, no place in a declaration; named where an operator looks.
    pub left_out: BTreeMap<Name, String>,
    pub snapshot: Snapshot,
    /// Controller first: what the users file is composed from.
    pub principals: Vec<Principal>,
    pub objects: Objects,
}

#[derive(Debug, thiserror::Error)]
pub enum DeriveError {
    #[error("could not read the records")]
    Store(#[from] StoreError),
    #[error(transparent)]
    Registered(#[from] RegisteredError),
    #[error("the records do not derive to principals")]
    Authority(#[from] AuthorityError),
    #[error("the records do not derive to bus objects")]
    Objects(#[from] ObjectsError),
}

impl DeriveError {
    /// Whether trying again later may succeed without anyone changing a
    /// record (the store was unavailable) — as against records that derive
    /// to nothing until an operator fixes them.
    pub fn is_transient(&self) -> bool {
        match self {
            DeriveError::Store(e) | DeriveError::Registered(RegisteredError::Store(e)) => {
                e.is_unavailable()
            }
            _ => false,
        }
    }
}

pub async fn derive(store: &Store, controller: &ControllerSpec) -> Result<Derived, DeriveError> {
    let registered = registered::read(store).await?;
    let catalogue = registered.catalogue;
    let mut left_out = catalogue::left_out(&catalogue);
    left_out.extend(registered.unparsed);
    let snapshot = snapshot::read(store).await?;
    // Authority and objects from the assignments of the modules that derive:
    // one broken manifest must not stop the mesh from composing.
    let deriving = snapshot.records.deriving(&left_out);
    let principals = authority::derive(&catalogue, &deriving, controller)?;
    let objects = jetstream::derive(&catalogue, &deriving, controller)?;
    Ok(Derived {
        catalogue,
        left_out,
        snapshot,
        principals,
        objects,
    })
}

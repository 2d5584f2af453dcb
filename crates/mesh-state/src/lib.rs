//! mesh-state: the inputs of every `mesh-core` derivation, read from where
//! they live — the catalogue from manifest files on disk or as registered in
//! the store, the records from the store — in one place the CLI, the daemons
//! and the bus tests share, so none of them grows its own loader that could
//! read the mesh differently.

pub mod catalogue;
pub mod deployments;
pub mod derived;
pub mod operations;
pub mod plan;
pub mod registered;
pub mod registering;
pub mod snapshot;
pub mod views;

pub use catalogue::{ALIASES_FILE, CatalogueCheck, LoadError, MANIFEST_FILE, load};
pub use derived::{DeriveError, Derived, derive};
pub use registered::RegisteredError;
pub use snapshot::{Snapshot, read};

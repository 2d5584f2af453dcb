//! The catalogue as the store holds it: every registered module's manifest
//! text, parsed again, and the recorded seat aliases. What the controller
//! derives authority and bus objects from — it reads no catalogue directory.

use mesh_core::catalogue::{Alias, Aliases, Catalogue};
use mesh_core::diagnostic::Pos;
use mesh_core::manifest::{self, Located};
use mesh_store::{Store, StoreError};

/// The store could not be read, or a registered manifest no longer parses.
#[derive(Debug, thiserror::Error)]
pub enum RegisteredError {
    #[error("could not read the registered catalogue")]
    Store(#[from] StoreError),
    /// A manifest registered by an older mesh that this one reads
    /// differently: nothing about the module can be derived until it is
    /// registered again.
    #[error(
        "the registered manifest of module {module} does not parse ({first}); fix it in the catalogue and register it again with `mesh fleet load`"
    )]
    Manifest { module: String, first: String },
}

/// Where a registered manifest is said to come from in diagnostics and
/// causes: the store, by module.
pub fn source_name(module: &str) -> String {
    format!("registered:{module}")
}

/// Builds the catalogue from the registered manifests and aliases.
pub async fn catalogue(store: &Store) -> Result<Catalogue, RegisteredError> {
    let mut manifests = Vec::new();
    for m in store.modules().await? {
        let name = source_name(m.name.as_str());
        match manifest::parse(&name, &m.manifest_source) {
            Ok(parsed) => manifests.push(parsed),
            Err(diagnostics) => {
                return Err(RegisteredError::Manifest {
                    module: m.name.to_string(),
                    first: diagnostics
                        .first()
                        .map(|d| d.message.clone())
                        .unwrap_or_default(),
                });
            }
        }
    }
    let mut aliases = Aliases::new();
    for (old, new) in store.seat_aliases().await? {
        aliases.push(Alias {
            old: Located::new(old, Pos::START),
            new: Located::new(new, Pos::START),
            file: "registered:aliases".into(),
        });
    }
    Ok(Catalogue::build(manifests, aliases))
}

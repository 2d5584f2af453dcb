//! The catalogue as the store holds it: every registered module's manifest
//! text, parsed again, and the recorded seat aliases. What the controller
//! derives authority and bus objects from — it reads no catalogue directory.

use std::collections::BTreeMap;

use mesh_core::catalogue::{Alias, Aliases, Catalogue};
use mesh_core::diagnostic::Pos;
use mesh_core::manifest::{self, Located};
use mesh_core::names::Name;
use mesh_store::{Store, StoreError};

/// The store could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RegisteredError {
    #[error("could not read the registered catalogue")]
    Store(#[from] StoreError),
}

/// The registered catalogue, and the modules whose registered manifest
/// does not parse (module → why): a manifest registered by an older mesh
/// that this one reads differently, or a store edited by hand. Such a
/// module is left out and named; the rest of the mesh goes on.
#[derive(Debug, Clone)]
pub struct Registered {
    pub catalogue: Catalogue,
    pub unparsed: BTreeMap<Name, String>,
}

/// Where a registered manifest is said to come from in diagnostics and
/// causes: the store, by module.
pub fn source_name(module: &str) -> String {
    format!("registered:{module}")
}

/// Builds the catalogue from the registered manifests and aliases.
pub async fn catalogue(store: &Store) -> Result<Catalogue, RegisteredError> {
    Ok(read(store).await?.catalogue)
}

/// Reads the registered manifests and aliases, setting aside those that do
/// not parse.
pub async fn read(store: &Store) -> Result<Registered, RegisteredError> {
    let mut manifests = Vec::new();
    let mut unparsed = BTreeMap::new();
    for m in store.modules().await? {
        let name = source_name(m.name.as_str());
        match manifest::parse(&name, &m.manifest_source) {
            Ok(parsed) => manifests.push(parsed),
            Err(diagnostics) => {
                let first = diagnostics.first().map_or_else(String::new, |d| {
                    format!("line {}: {}", d.location.line, d.message)
                });
                unparsed.insert(
                    m.name,
                    format!("its registered manifest does not parse ({first})"),
                );
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
    Ok(Registered {
        catalogue: Catalogue::build(manifests, aliases),
        unparsed,
    })
}

//! Reading the records into the snapshot every derivation takes: nodes,
//! assignments, live tokens and persons as [`Records`], and the credential
//! recorded for each principal, fresh from the store each time — authority
//! is derived, never stored.

use std::collections::BTreeMap;

use mesh_core::records::{Assignment, PersonRecord, Records, ToolAccess, ToolListError};
use mesh_store::{Store, StoreError, ToolGrant, principal};

/// The records and, by principal name, the credential recorded for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub records: Records,
    /// principal → credential (today a bcrypt hash).
    pub credentials: BTreeMap<String, String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("person {person}: the recorded tools do not read as a grant")]
    PersonTools {
        person: String,
        #[source]
        source: ToolListError,
    },
}

/// Reads every record authority and the JetStream objects are derived from.
pub async fn read(store: &Store) -> Result<Snapshot, SnapshotError> {
    let mut s = Snapshot::default();
    for node in store.nodes().await? {
        s.records.nodes.push(node.name);
    }
    for a in store.assignments().await? {
        s.records
            .assignments
            .push(Assignment::new(a.node, a.module));
    }
    for t in store.live_tokens().await? {
        s.credentials
            .insert(principal::enrolment(&t.node), t.bus_hash);
        s.records.live_tokens.push(t.node);
    }
    for p in store.persons().await? {
        let tools = match &p.tools {
            ToolGrant::All => Ok(ToolAccess::All),
            ToolGrant::Tools(list) => ToolAccess::from_written(list),
        }
        .map_err(|source| SnapshotError::PersonTools {
            person: p.name.to_string(),
            source,
        })?;
        s.records.persons.push(PersonRecord {
            name: p.name,
            tools,
        });
    }
    for c in store.credentials().await? {
        s.credentials.insert(c.principal, c.bcrypt_hash);
    }
    Ok(s)
}

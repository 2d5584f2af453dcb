//! Reading the records into the snapshot every derivation takes: nodes,
//! assignments, live tokens and persons as [`Records`], and the credential
//! recorded for each principal, fresh from the store each time — authority
//! is derived, never stored.

use std::collections::BTreeMap;

use mesh_core::records::{Assignment, PersonRecord, Records};
use mesh_core::users_file::UserCredential;
use mesh_store::{Store, StoreError, principal};

/// The records and, by principal name, the credential recorded for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub records: Records,
    /// principal → the credential the users file names it by.
    pub credentials: BTreeMap<String, UserCredential>,
}

/// Reads every record authority and the JetStream objects are derived from.
pub async fn read(store: &Store) -> Result<Snapshot, StoreError> {
    let mut s = Snapshot::default();
    for node in store.nodes().await? {
        s.records.nodes.push(node.name);
    }
    for a in store.assignments().await? {
        if let Some(v) = a.version {
            s.records.pins.insert((a.node.clone(), a.module.clone()), v);
        }
        s.records
            .assignments
            .push(Assignment::new(a.node, a.module));
    }
    s.records.artifacts = store.versions().await?;
    for t in store.live_tokens().await? {
        s.credentials.insert(
            principal::enrolment(&t.node),
            UserCredential::NKey(t.enrolment_key),
        );
        s.records.live_tokens.push(t.node);
    }
    for l in store.live_logins().await? {
        let kind = mesh_core::authority::PrincipalKind::Login {
            person: l.person.clone(),
        };
        s.credentials
            .insert(kind.principal_name(), UserCredential::NKey(l.login_key));
        s.records.live_logins.push(l.person);
    }
    for p in store.persons().await? {
        s.records.persons.push(PersonRecord {
            name: p.name,
            tools: p.tools,
            role: p.role,
        });
    }
    for c in store.credentials().await? {
        s.credentials.insert(c.principal, c.credential);
    }
    // A person's key wins over their password: it is what `mesh call --as`
    // signs with, and holds nothing worth stealing in the users file.
    for (person, key) in store.person_keys().await? {
        s.credentials
            .insert(principal::person(&person), UserCredential::NKey(key));
    }
    Ok(s)
}

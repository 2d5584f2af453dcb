//! What a host may read of the artifact store: exactly the artifacts its
//! declaration names (DESIGN §6 "Artifacts"), each object by its own meta
//! subject and chunk token, decided by the same function that puts them in
//! the declaration ([`crate::artifact::used`]), so a host is never declared
//! an artifact it cannot read, nor granted one it was not declared.

use super::{Cause, Permissions, record};
use crate::artifact;
use crate::catalogue::Catalogue;
use crate::names::Name;
use crate::records::Records;
use crate::subjects::artifact::{Nuid, reader_publish};

/// Adds to `p` (node `node`'s host) the reads of every artifact its
/// assigned `modules` run. A module whose artifacts do not resolve is left
/// out of the declaration, and gets no grant.
pub(super) fn add_host_reads(
    p: &mut Permissions,
    catalogue: &Catalogue,
    records: &Records,
    node: &Name,
    modules: &[&Name],
) {
    for &module in modules {
        let Some(manifest) = catalogue.module(module) else {
            continue;
        };
        let pin = records.pins.get(&(node.clone(), module.clone()));
        let Ok(used) = artifact::used(manifest, pin.map(String::as_str), &records.artifacts) else {
            continue;
        };
        for a in used {
            let (Ok(object), Ok(nuid)) = (a.object_name(), Nuid::new(&a.nuid)) else {
                continue;
            };
            let cause: Cause = record(format!(
                "module {module} on node {node} runs artifact {} ({}) of version {}",
                a.name,
                a.reference,
                pin.map(String::as_str).unwrap_or("?")
            ));
            for subject in reader_publish(&object, &nuid) {
                p.publish(subject, cause.clone());
            }
        }
    }
}

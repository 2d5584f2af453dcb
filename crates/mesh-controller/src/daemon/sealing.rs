//! What placeholders are filled with besides the catalogue and the records:
//! the secrets (each opened with the controller's XKey, to be sealed again
//! to the node that uses it), the nodes' addresses and the ports they give
//! seats. Read once per pass over the nodes.

use std::collections::BTreeMap;

use mesh_core::declaration::Secrets;
use mesh_core::names::Name;
use mesh_core::sealed;
use mesh_core::secret::Secret;
use mesh_store::StoreError;
use tracing::warn;

use super::Ctx;

/// The secrets of one pass: opened values, the nodes' sealing keys, and
/// the controller's keys. `Debug` shows names, never values.
pub(crate) struct Sealing<'c> {
    values: BTreeMap<Name, Secret>,
    node_xkeys: BTreeMap<Name, String>,
    seed: &'c Secret,
    digest_key: [u8; 32],
}

impl std::fmt::Debug for Sealing<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealing")
            .field("secrets", &self.values.keys().collect::<Vec<_>>())
            .field("nodes", &self.node_xkeys.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Secrets for Sealing<'_> {
    fn value(&self, name: &Name) -> Option<String> {
        self.values.get(name).map(|s| s.expose().to_string())
    }

    fn seal(&self, node: &Name, plaintext: &str) -> Result<String, String> {
        let xkey = self.node_xkeys.get(node).ok_or_else(|| {
            format!("node {node} has no sealing key recorded: its host has not enrolled yet")
        })?;
        sealed::seal(self.seed, xkey, plaintext).map_err(|e| e.to_string())
    }

    fn digest(&self, values: &[(String, String)]) -> String {
        sealed::digest(&self.digest_key, values)
    }
}

/// Where other nodes reach each node, and the ports nodes give seats.
#[derive(Debug, Default)]
pub(crate) struct Reached {
    pub addresses: BTreeMap<Name, String>,
    pub seat_ports: BTreeMap<(Name, Name), u16>,
}

/// Reads the secrets and the nodes' addresses and keys. A secret that does
/// not open with the controller's key (sealed for another mesh, or
/// altered) is named in the log and counts as unset: its modules are left
/// out, saying so.
pub(crate) async fn read(ctx: &Ctx) -> Result<(Sealing<'_>, Reached), StoreError> {
    let mut values = BTreeMap::new();
    for s in ctx.store.secrets().await? {
        match sealed::open(&ctx.xkey_seed, &s.sender, &s.sealed) {
            Ok(v) => {
                values.insert(s.name, v);
            }
            Err(e) => {
                warn!(secret = %s.name, reason = %e, "a secret does not open with this controller's key; set it again")
            }
        }
    }
    let mut node_xkeys = BTreeMap::new();
    let mut reached = Reached::default();
    for n in ctx.store.nodes().await? {
        if let Some(x) = n.xkey {
            node_xkeys.insert(n.name.clone(), x);
        }
        if let Some(a) = n.address {
            reached.addresses.insert(n.name, a);
        }
    }
    for (node, seat, port) in ctx.store.node_seat_ports().await? {
        reached.seat_ports.insert((node, seat), port);
    }
    let sealing = Sealing {
        values,
        node_xkeys,
        seed: &ctx.xkey_seed,
        digest_key: sealed::digest_key(ctx.signing_key.as_bytes()),
    };
    Ok((sealing, reached))
}

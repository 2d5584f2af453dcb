//! What a pending change would do before it is made (`mesh plan`, `mesh
//! assign|unassign --dry-run`, and the controller planning for a person):
//! the records are read as the controller reads them, the change is
//! applied to a copy in memory, and `mesh_core::change` compares the two;
//! nothing is written.

use std::collections::BTreeMap;

use mesh_core::catalogue::Catalogue;
pub use mesh_core::change::Pending;
use mesh_core::change::{self, Entry, Side};
use mesh_core::declaration::seat_address::{self, Unaddressed};
use mesh_core::declaration::{Inputs, ModuleDecl};
use mesh_core::names::Name;
use mesh_core::records::{Assignment, ControllerSpec, Records};
use mesh_store::{Store, StoreError};
use serde::Serialize;

use crate::registered::RegisteredError;

mod render;
pub use render::{render, unaddressed_text};

/// Why no plan was made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The change cannot be made as asked; the text says what to do.
    #[error("{0}")]
    Refused(String),
    #[error("reading the records")]
    Store(#[from] StoreError),
    #[error("reading the registered catalogue")]
    Registered(#[from] RegisteredError),
    #[error("comparing the mesh before and after")]
    Change(#[from] mesh_core::change::ChangeError),
}

/// A refusal, as the `bail!` it was in the CLI.
macro_rules! refused {
    ($($t:tt)*) => {
        Err(PlanError::Refused(format!($($t)*)))
    };
}

/// What `--output json` prints.
#[derive(Debug, Serialize)]
pub struct Plan {
    pub pending: String,
    pub entries: Vec<Entry>,
    /// The whole declared module list of each node the change touches, as
    /// the controller would compose it.
    pub declarations: BTreeMap<Name, Vec<ModuleDecl>>,
    /// The version of its module each touched node would run, by node
    /// then module: what `mesh assign` pins (a build's commit, an upload's
    /// version).
    pub pins: BTreeMap<Name, BTreeMap<Name, String>>,
    /// The modules the change leaves without an address for a seat they
    /// fill in (its holder unassigned or moved away): the controller
    /// leaves them out of their nodes' declarations.
    pub unaddressed: Vec<Unaddressed>,
}

/// Reads the mesh as the controller does (registered catalogue, records,
/// manifest digests) and plans `pending` against it.
pub async fn compute(pending: &Pending, store: &Store) -> Result<Plan, PlanError> {
    let read = async {
        let registered = crate::registered::read(store).await?;
        let snapshot = crate::read(store).await?;
        let modules = store.modules().await?;
        let nodes = store.nodes().await?;
        let seat_ports = store.node_seat_ports().await?;
        let secrets = store.secrets().await?;
        // What a new assignment would pin: each module's newest version.
        let mut newest = BTreeMap::new();
        for r in store.artifacts(None).await? {
            newest.entry(r.module).or_insert(r.version);
        }
        Ok::<_, PlanError>((
            registered, snapshot, modules, nodes, seat_ports, secrets, newest,
        ))
    }
    .await;
    let (registered_catalogue, snapshot, modules, nodes, seat_ports, secrets, newest) = read?;
    let sealable: Vec<Name> = nodes
        .iter()
        .filter(|n| n.xkey.is_some())
        .map(|n| n.name.clone())
        .collect();
    let addresses: BTreeMap<Name, String> = nodes
        .into_iter()
        .filter_map(|n| Some((n.name, n.address?)))
        .collect();
    let seat_ports: BTreeMap<(Name, Name), u16> = seat_ports
        .into_iter()
        .map(|(n, s, p)| ((n, s), p))
        .collect();
    // The modules' recorded keys (a module without one is given a spare
    // when the controller declares it; the plan does not guess which).
    let keys: BTreeMap<(Name, Name), String> = snapshot
        .records
        .assignments
        .iter()
        .filter_map(|a| {
            let principal = mesh_core::authority::PrincipalKind::Module {
                node: a.node.clone(),
                module: a.module.clone(),
            }
            .principal_name();
            match snapshot.credentials.get(&principal) {
                Some(mesh_core::users_file::UserCredential::NKey(k)) => {
                    Some(((a.node.clone(), a.module.clone()), k.clone()))
                }
                _ => None,
            }
        })
        .collect();
    let secrets = Named {
        secrets: secrets.into_iter().map(|s| s.name).collect(),
        sealable,
    };
    let catalogue = registered_catalogue.catalogue;
    let versions: BTreeMap<Name, String> = modules
        .iter()
        .map(|m| (m.name.clone(), m.manifest_digest.clone()))
        .collect();
    let registered: BTreeMap<Name, String> = modules
        .into_iter()
        .map(|m| (m.name, m.manifest_source))
        .collect();
    let before = snapshot.records;
    let mut after = before.clone();
    let mut after_versions = versions.clone();
    let after_catalogue = apply(
        pending,
        &catalogue,
        &registered,
        &mut after,
        &mut after_versions,
        &newest,
    )?;
    let after_catalogue = after_catalogue.as_ref().unwrap_or(&catalogue);
    // What the controller leaves out on each side: modules that do not
    // derive, and (until registered again) those that do not parse.
    let left_out = |c: &Catalogue| {
        let mut l = mesh_core::catalogue::left_out(c);
        for (m, why) in &registered_catalogue.unparsed {
            if c.module(m).is_none() {
                l.insert(m.clone(), why.clone());
            }
        }
        l
    };
    let (b_left_out, a_left_out) = (left_out(&catalogue), left_out(after_catalogue));
    let controller = ControllerSpec::default();
    // The users file each side composes, as the controller composes it for
    // a broker holder's declaration.
    let users_file = |c: &Catalogue, r: &Records, l: &BTreeMap<Name, String>| {
        mesh_core::authority::derive(c, &r.deriving(l), &controller)
            .map_err(|e| e.to_string())
            .and_then(|p| {
                mesh_core::users_file::compose(&p, &snapshot.credentials)
                    .map(|f| f.text)
                    .map_err(|e| e.to_string())
            })
    };
    let (b_users, a_users) = (
        users_file(&catalogue, &before, &b_left_out),
        users_file(after_catalogue, &after, &a_left_out),
    );
    let b = Side {
        inputs: Inputs {
            catalogue: &catalogue,
            records: &before,
            versions: &versions,
            addresses: &addresses,
            users_file: b_users.as_deref().map_err(String::as_str),
            left_out: &b_left_out,
            seat_ports: &seat_ports,
            secrets: &secrets,
            keys: &keys,
        },
        controller: &controller,
    };
    let a = Side {
        inputs: Inputs {
            catalogue: after_catalogue,
            records: &after,
            versions: &after_versions,
            users_file: a_users.as_deref().map_err(String::as_str),
            left_out: &a_left_out,
            ..b.inputs
        },
        controller: &controller,
    };
    let entries = change::plan(&b, &a)?;
    let unaddressed =
        seat_address::left_without_address((&catalogue, &before), (after_catalogue, &after));
    let declarations = change::composed(&a)
        .into_iter()
        .filter(|(node, _)| entries.iter().any(|e| e.node() == Some(node)))
        .map(|(node, modules)| (node, modules.modules))
        .collect();
    let mut pins: BTreeMap<Name, BTreeMap<Name, String>> = BTreeMap::new();
    for ((node, module), v) in &after.pins {
        if entries.iter().any(|e| e.node() == Some(node)) {
            pins.entry(node.clone())
                .or_default()
                .insert(module.clone(), v.clone());
        }
    }
    Ok(Plan {
        pending: pending.to_string(),
        entries,
        declarations,
        pins,
        unaddressed,
    })
}

/// The secrets a plan knows of: their names only. A plan says which modules
/// would start or change, never a value, and opens nothing.
#[derive(Debug)]
struct Named {
    secrets: Vec<Name>,
    /// Nodes with a sealing key recorded (enrolled).
    sealable: Vec<Name>,
}

impl mesh_core::declaration::Secrets for Named {
    fn value(&self, name: &Name) -> Option<String> {
        self.secrets.contains(name).then(String::new)
    }

    fn seal(&self, node: &Name, _: &str) -> Result<String, String> {
        if self.sealable.contains(node) {
            Ok(String::new())
        } else {
            Err(format!(
                "node {node} has no sealing key recorded: its host has not enrolled yet"
            ))
        }
    }

    fn digest(&self, _: &[(String, String)]) -> String {
        String::new()
    }
}

/// Applies the change to the copy of the records (and, for a registration,
/// returns the catalogue it would leave).
fn apply(
    pending: &Pending,
    catalogue: &Catalogue,
    registered: &BTreeMap<Name, String>,
    records: &mut Records,
    versions: &mut BTreeMap<Name, String>,
    newest: &BTreeMap<Name, String>,
) -> Result<Option<Catalogue>, PlanError> {
    match pending {
        Pending::Assign {
            module,
            node,
            version,
            from,
        } => {
            if catalogue.module(module).is_none() {
                return refused!(
                    "module {module} is not registered; register its catalogue first with `mesh catalogue register DIR`"
                );
            }
            if !records.nodes.contains(node) {
                return refused!("node {node} is not recorded; add it with `mesh node add {node}`");
            }
            // A move: gone from where it ran, keeping what it ran.
            let mut ran = None;
            if let Some(from) = from {
                if from == node {
                    return refused!(
                        "--move-from {from} names the node it is assigned to; give the node it runs on now"
                    );
                }
                let was = Assignment::new(from.clone(), module.clone());
                if !records.assignments.contains(&was) {
                    return refused!(
                        "{module} is not assigned to {from}; `mesh modules` lists what runs where"
                    );
                }
                records.assignments.retain(|x| *x != was);
                ran = records.pins.remove(&(from.clone(), module.clone()));
            }
            let a = Assignment::new(node.clone(), module.clone());
            let key = (node.clone(), module.clone());
            if let Some(v) = version
                && !records.artifacts.contains_key(&(module.clone(), v.clone()))
            {
                return refused!(
                    "module {module} has no version {v}; `mesh artifact list --module {module}` lists its versions"
                );
            }
            if records.assignments.contains(&a) {
                match version {
                    Some(v) if records.pins.get(&key) != Some(v) => {
                        records.pins.insert(key, v.clone());
                    }
                    _ => {
                        return refused!(
                            "{module} is already assigned to {node}: nothing would change"
                        );
                    }
                }
                return Ok(None);
            }
            records.assignments.push(a);
            if let Some(v) = version
                .clone()
                .or(ran)
                .or_else(|| newest.get(module).cloned())
            {
                records.pins.insert(key, v);
            }
            Ok(None)
        }
        Pending::Deploy {
            module,
            version,
            nodes,
        } => {
            if catalogue.module(module).is_none() {
                return refused!(
                    "module {module} is not registered; register its catalogue first with `mesh catalogue register DIR`"
                );
            }
            if !records
                .artifacts
                .contains_key(&(module.clone(), version.clone()))
            {
                return refused!(
                    "module {module} has no version {version}; `mesh artifact list --module {module}` lists its versions"
                );
            }
            let assigned: Vec<Name> = records
                .assignments
                .iter()
                .filter(|a| a.module == *module)
                .map(|a| a.node.clone())
                .collect();
            let nodes = if nodes.is_empty() { &assigned } else { nodes };
            if nodes.is_empty() {
                return refused!(
                    "module {module} is assigned to no node: a deployment moves the nodes running it (`mesh assign {module} NODE` first)"
                );
            }
            for node in nodes {
                if !assigned.contains(node) {
                    return refused!(
                        "module {module} is not assigned to node {node}: a deployment moves only the nodes running it (`mesh assign {module} {node}` first)"
                    );
                }
                records
                    .pins
                    .insert((node.clone(), module.clone()), version.clone());
            }
            Ok(None)
        }
        Pending::Unassign { module, node } => {
            let a = Assignment::new(node.clone(), module.clone());
            let before = records.assignments.len();
            records.assignments.retain(|x| *x != a);
            if records.assignments.len() == before {
                return refused!(
                    "{module} is not assigned to {node}; `mesh modules` lists what runs where"
                );
            }
            Ok(None)
        }
        Pending::Register { sources } => {
            // The registered manifests, each replaced by its new text: what
            // the store would hold, parsed as the controller parses it.
            let mut texts = registered.clone();
            for (module, text) in sources {
                texts.insert(module.clone(), text.clone());
                versions.insert(module.clone(), mesh_store::sha256_digest(text));
            }
            let mut manifests = Vec::new();
            for (module, text) in &texts {
                let path = crate::registered::source_name(module.as_str());
                let m = mesh_core::manifest::parse(&path, text).map_err(|d| {
                    PlanError::Refused(format!(
                        "the manifest of {module} does not parse: {}",
                        d.first().map(|d| d.message.clone()).unwrap_or_default()
                    ))
                })?;
                manifests.push(m);
            }
            Ok(Some(Catalogue::build(
                manifests,
                catalogue.aliases().clone(),
            )))
        }
    }
}

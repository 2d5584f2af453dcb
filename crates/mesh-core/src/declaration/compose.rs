//! Composing a node's modules from the records: every assignment of the
//! node, its run spec with each placeholder filled (an unfilled one is an
//! error naming it, never literal text), its declared files. A module that
//! cannot be composed is left out and named; the node's other modules are
//! still declared (one unfillable placeholder must not stop a whole node).

use std::collections::BTreeMap;

use super::{
    BusDecl, CheckDecl, DEFAULT_STOP_GRACE_S, Declaration, FileBody, FileDecl, HealthDecl,
    ImageDecl, ModuleDecl, RunDecl,
};
use crate::catalogue::Catalogue;
use crate::manifest::{BROKER_ROLE, BUS_USERS_FILE, HealthCheck, Manifest, RunValue};
use crate::names::Name;
use crate::placeholders::Placeholder;
use crate::records::Records;

/// What composing needs besides the catalogue and the records.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    pub catalogue: &'a Catalogue,
    pub records: &'a Records,
    /// module → version (the registered manifest's digest).
    pub versions: &'a BTreeMap<Name, String>,
    /// node → the address other nodes reach it at.
    pub addresses: &'a BTreeMap<Name, String>,
    /// The users file composed from these records, for the `bus-users`
    /// file of the `mesh-broker` holder; or why none could be composed.
    pub users_file: Result<&'a str, &'a str>,
    /// Modules the registered catalogue leaves out (module → why): their
    /// assignments are named, never declared.
    pub left_out: &'a BTreeMap<Name, String>,
    /// (node, seat) → the port that node gives the seat's holder on it.
    pub seat_ports: &'a BTreeMap<(Name, Name), u16>,
    /// The secrets' values, and how they are sealed to a node.
    pub secrets: &'a dyn Secrets,
    /// (node, module) → the module's recorded NKey public key.
    pub keys: &'a BTreeMap<(Name, Name), String>,
}

/// What composing needs of secrets: each value, sealing it to the node
/// that uses it, and the keyed digest that tells a new value from a new
/// sealing. The controller holds the keys (and the randomness a seal
/// takes); tests and `mesh plan` hand in their own.
pub trait Secrets: std::fmt::Debug + Sync {
    /// The plaintext of secret `name`, if one is recorded.
    fn value(&self, name: &Name) -> Option<String>;
    /// `plaintext` sealed to `node`'s host; why not (no sealing key
    /// recorded for it).
    fn seal(&self, node: &Name, plaintext: &str) -> Result<String, String>;
    /// A keyed digest of `(where, plaintext)` pairs, in order.
    fn digest(&self, values: &[(String, String)]) -> String;
}

/// No secret recorded: a `${secret:..}` leaves its module out, named.
#[cfg(test)]
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSecrets;

#[cfg(test)]
impl Secrets for NoSecrets {
    fn value(&self, _: &Name) -> Option<String> {
        None
    }

    fn seal(&self, node: &Name, _: &str) -> Result<String, String> {
        Err(format!("no secret can be sealed to node {node} here"))
    }

    fn digest(&self, _: &[(String, String)]) -> String {
        String::new()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ComposeError {
    #[error(
        "module {module} is assigned to node {node} but not registered; register its manifest with `mesh fleet load`"
    )]
    Unregistered { module: Name, node: Name },
    #[error(
        "module {module} has no [run] section, so node {node} has nothing to run; unassign it, or give its manifest a [run] command"
    )]
    NothingToRun { module: Name, node: Name },
    #[error("module {module}: {placeholder} cannot be filled: {why}")]
    Unfilled {
        module: Name,
        placeholder: String,
        why: String,
    },
    #[error(
        "module {module}: file {file} has path {path:?}, which leaves the module's directory; give a relative path without `..`"
    )]
    BadPath {
        module: Name,
        file: Name,
        path: String,
    },
    #[error(
        "module {module} holds mesh-broker, but no users file is composed from the records ({why}); a broker given none would refuse every connection, so it is left out until the records compose"
    )]
    NoUserList { module: Name, why: String },
    #[error(
        "module {module}: its registered manifest no longer derives ({why}); register a corrected manifest with `mesh catalogue register`"
    )]
    DoesNotDerive { module: Name, why: String },
    #[error("module {module} on node {node}: {why}")]
    Artifacts {
        module: Name,
        node: Name,
        why: String,
    },
    #[error("module {module}: its secrets cannot be sealed to node {node}: {why}")]
    Unsealable {
        module: Name,
        node: Name,
        why: String,
    },
}

impl ComposeError {
    /// The module left out.
    pub fn module(&self) -> &Name {
        match self {
            ComposeError::Unregistered { module, .. }
            | ComposeError::NothingToRun { module, .. }
            | ComposeError::Unfilled { module, .. }
            | ComposeError::BadPath { module, .. }
            | ComposeError::NoUserList { module, .. }
            | ComposeError::DoesNotDerive { module, .. }
            | ComposeError::Artifacts { module, .. }
            | ComposeError::Unsealable { module, .. } => module,
        }
    }
}

/// What a node is declared: the modules composed, and each assigned module
/// left out with the reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeModules {
    /// Sorted by name.
    pub modules: Vec<ModuleDecl>,
    pub left_out: Vec<ComposeError>,
}

/// The modules node `node` runs, sorted by name, and those left out.
pub fn compose_modules(inputs: &Inputs<'_>, node: &Name) -> NodeModules {
    compose_assigned(inputs, node, &inputs.records.modules_of(node))
}

/// [`compose_modules`] given the node's assigned modules (sorted, from
/// [`Records::modules_by_node`](crate::records::Records::modules_by_node)
/// when every node is composed).
pub fn compose_assigned(inputs: &Inputs<'_>, node: &Name, modules: &[&Name]) -> NodeModules {
    let mut out = NodeModules::default();
    for &module in modules {
        match compose_module(inputs, node, module) {
            Ok(m) => out.modules.push(m),
            Err(e) => out.left_out.push(e),
        }
    }
    out
}

fn compose_module(
    inputs: &Inputs<'_>,
    node: &Name,
    module: &Name,
) -> Result<ModuleDecl, ComposeError> {
    if let Some(why) = inputs.left_out.get(module) {
        return Err(ComposeError::DoesNotDerive {
            module: module.clone(),
            why: why.clone(),
        });
    }
    let m = inputs
        .catalogue
        .module(module)
        .ok_or_else(|| ComposeError::Unregistered {
            module: module.clone(),
            node: node.clone(),
        })?;
    let run = m.run.as_ref().ok_or_else(|| ComposeError::NothingToRun {
        module: module.clone(),
        node: node.clone(),
    })?;
    let artifacts = crate::artifact::used(
        m,
        inputs
            .records
            .pins
            .get(&(node.clone(), module.clone()))
            .map(String::as_str),
        &inputs.records.artifacts,
    )
    .map_err(|why| ComposeError::Artifacts {
        module: module.clone(),
        node: node.clone(),
        why,
    })?;
    let fill = |v: &RunValue| fill(inputs, node, m, v);
    // The strings the host fills the artifacts into keep them as written.
    let fill_run = |v: &RunValue| {
        if artifacts.is_empty() {
            fill(v)
        } else {
            fill_keeping_artifacts(inputs, node, m, v)
        }
    };
    let command = run
        .command
        .iter()
        .map(fill_run)
        .collect::<Result<Vec<_>, _>>()?;
    // Decided as the manifest was checked: the artifact alone, or a
    // reference pinned by digest (its other placeholders filled here).
    let image = run
        .image
        .as_ref()
        .map(|v| match v.artifact_alone() {
            Some(name) => Ok(ImageDecl::Artifact(name.clone())),
            None => fill(v).map(ImageDecl::Reference),
        })
        .transpose()?;
    // A value holding a secret is sealed whole to the node: it never
    // travels, nor rests in NODES, in plaintext. Its plaintext goes into the
    // digest that says whether the module changed.
    let mut plaintexts = Vec::new();
    let seal = |plaintext: &str| {
        inputs
            .secrets
            .seal(node, plaintext)
            .map_err(|why| ComposeError::Unsealable {
                module: module.clone(),
                node: node.clone(),
                why,
            })
    };
    let mut env = BTreeMap::new();
    let mut sealed_env = BTreeMap::new();
    for var in &run.env {
        let value = fill(&var.value)?;
        if holds_secret(&var.value) {
            sealed_env.insert(var.name.value.clone(), seal(&value)?);
            plaintexts.push((format!("env {}", var.name.value), value));
        } else {
            env.insert(var.name.value.clone(), value);
        }
    }
    let mut files = Vec::new();
    for f in &m.files {
        let path = f.path.value.clone();
        if !is_inside(&path) {
            return Err(ComposeError::BadPath {
                module: module.clone(),
                file: f.name.value.clone(),
                path,
            });
        }
        // Only the broker's holder is ever given the users file, and never
        // an empty one: a broker with no user list refuses every client.
        let body = if f.name.value.as_str() == BUS_USERS_FILE && m.holds_seat(BROKER_ROLE) {
            FileBody::Content(
                inputs
                    .users_file
                    .map_err(|why| ComposeError::NoUserList {
                        module: module.clone(),
                        why: why.to_string(),
                    })?
                    .to_string(),
            )
        } else {
            match &f.content {
                None => FileBody::Content(String::new()),
                Some(c) if holds_secret(c) => {
                    let plaintext = fill(c)?;
                    let sealed = seal(&plaintext)?;
                    plaintexts.push((format!("file {}", f.name.value), plaintext));
                    FileBody::Sealed(sealed)
                }
                Some(c) => FileBody::Content(fill(c)?),
            }
        };
        files.push(FileDecl {
            name: f.name.value.clone(),
            path,
            body,
        });
    }
    let health = m
        .health
        .as_ref()
        .map(|h| {
            let check = match &h.check {
                HealthCheck::Http(v) => CheckDecl::Http(fill(v)?),
                HealthCheck::Tcp(v) => CheckDecl::Tcp(fill(v)?),
                HealthCheck::Exec(argv) => {
                    CheckDecl::Exec(argv.iter().map(fill).collect::<Result<_, _>>()?)
                }
                HealthCheck::Sdk => CheckDecl::Sdk,
            };
            Ok::<_, ComposeError>(HealthDecl {
                check,
                interval_ms: h.interval_ms,
                timeout_ms: h.timeout_ms,
                healthy_after_ms: h.healthy_after_ms,
            })
        })
        .transpose()?;
    let pinned = inputs
        .records
        .pins
        .get(&(node.clone(), module.clone()))
        .cloned();
    Ok(ModuleDecl {
        name: module.clone(),
        version: inputs
            .versions
            .get(module)
            .cloned()
            .unwrap_or_else(|| "unversioned".into()),
        run: RunDecl {
            command,
            driver: run.driver.value,
            image,
            env,
            stop_grace_s: DEFAULT_STOP_GRACE_S,
            sealed_env,
        },
        files,
        secrets: (!plaintexts.is_empty()).then(|| inputs.secrets.digest(&plaintexts)),
        key: inputs.keys.get(&(node.clone(), module.clone())).cloned(),
        artifacts,
        pinned,
        health,
    })
}

fn holds_secret(v: &RunValue) -> bool {
    v.placeholders
        .iter()
        .any(|p| matches!(p.value, Placeholder::Secret { .. }))
}

/// A relative path that stays inside the directory it is joined to.
fn is_inside(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && !path.contains('\0')
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

fn fill(
    inputs: &Inputs<'_>,
    node: &Name,
    m: &Manifest,
    v: &RunValue,
) -> Result<String, ComposeError> {
    fill_with(inputs, node, m, v, false)
}

fn fill_keeping_artifacts(
    inputs: &Inputs<'_>,
    node: &Name,
    m: &Manifest,
    v: &RunValue,
) -> Result<String, ComposeError> {
    fill_with(inputs, node, m, v, true)
}

/// `v` filled from the records; with `keep_artifacts`, `${artifact:..}`
/// stays for the host (see `Template::fill_keeping_artifacts`).
fn fill_with(
    inputs: &Inputs<'_>,
    node: &Name,
    m: &Manifest,
    v: &RunValue,
    keep_artifacts: bool,
) -> Result<String, ComposeError> {
    let mut why = String::new();
    let value = |p: &Placeholder| match value(inputs, node, m, p) {
        Ok(s) => Some(s),
        Err(e) => {
            why = e;
            None
        }
    };
    let filled = if keep_artifacts {
        v.template.fill_keeping_artifacts(value)
    } else {
        v.template.fill(value)
    };
    filled.map_err(|p| ComposeError::Unfilled {
        module: m.name.value.clone(),
        placeholder: p.to_string(),
        why: if why.is_empty() {
            // Only an artifact kept after a `$` is refused without a reason.
            "a `$` right before it would read as the escape `$${`".into()
        } else {
            why
        },
    })
}

fn value(
    inputs: &Inputs<'_>,
    node: &Name,
    m: &Manifest,
    p: &Placeholder,
) -> Result<String, String> {
    match p {
        Placeholder::Seat { seat, port } => {
            let holder = super::seat_address::holder(inputs.catalogue, inputs.records, seat, node)?;
            let seat = inputs.catalogue.resolve_seat(seat);
            let address = inputs.addresses.get(&holder.node).ok_or_else(|| {
                format!(
                    "node {node} (holding seat {seat}) has no address recorded; record one with `mesh node set {node} --address A`",
                    node = holder.node
                )
            })?;
            // The node's given port for the seat, over the manifest's number.
            let port = inputs
                .seat_ports
                .get(&(holder.node.clone(), seat.clone()))
                .copied()
                .unwrap_or(*port);
            Ok(format!("{address}:{port}"))
        }
        Placeholder::File { name } => m
            .files
            .iter()
            .find(|f| f.name.value == *name)
            .map(|f| f.path.value.clone())
            .ok_or_else(|| format!("the manifest declares no [[file]] named {name}")),
        Placeholder::Secret { name } => inputs.secrets.value(name).ok_or_else(|| {
            format!("no value is recorded for secret {name}; set one with `mesh secret set {name}`")
        }),
        Placeholder::Artifact { name } => Err(format!(
            "artifact {name} is filled by the host, in [run] command and image only"
        )),
    }
}

/// The node's next declaration, or `None` when what it runs and where it
/// reaches the broker are unchanged since `last` (the newest recorded one).
pub fn next_declaration(
    node: &Name,
    modules: Vec<ModuleDecl>,
    bus: Option<BusDecl>,
    last: Option<&Declaration>,
    now_ms: u64,
) -> Option<Declaration> {
    if let Some(before) = last
        && super::same_modules(&before.modules, &modules)
        && before.bus == bus
    {
        return None;
    }
    Some(Declaration {
        node: node.clone(),
        sequence: last.map_or(1, |d| d.sequence + 1),
        composed_at: now_ms,
        modules,
        bus,
        sealed_by: None,
    })
}

/// As [`next_declaration`], for a node whose host reported applying
/// `applied`: a sequence above the newest recorded (`last`) means the
/// records are older than what the host ran — a store restored from a
/// backup. The host refuses any sequence not above the one it applied, so
/// the node is declared again above it, changed or not: what the restored
/// records say is what it must run.
pub fn next_declaration_after(
    node: &Name,
    modules: Vec<ModuleDecl>,
    bus: Option<BusDecl>,
    last: Option<&Declaration>,
    applied: Option<u64>,
    now_ms: u64,
) -> Option<Declaration> {
    let recorded = last.map_or(0, |d| d.sequence);
    match applied {
        Some(applied) if applied > recorded => Some(Declaration {
            node: node.clone(),
            sequence: applied + 1,
            composed_at: now_ms,
            modules,
            bus,
            sealed_by: None,
        }),
        _ => next_declaration(node, modules, bus, last, now_ms),
    }
}

#[cfg(test)]
#[path = "compose_tests.rs"]
mod tests;

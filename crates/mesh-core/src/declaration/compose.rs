//! Composing a node's modules from the records: every assignment of the
//! node, its run spec with each placeholder filled (an unfilled one is an
//! error naming it, never literal text), its declared files. A module that
//! cannot be composed is left out and named; the node's other modules are
//! still declared (one unfillable placeholder must not stop a whole node).

use std::collections::BTreeMap;

use super::{
    BusDecl, DEFAULT_STOP_GRACE_S, Declaration, FileBody, FileDecl, ImageDecl, ModuleDecl, RunDecl,
};
use crate::catalogue::Catalogue;
use crate::manifest::{BROKER_ROLE, BUS_USERS_FILE, Manifest, RunValue};
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::Aliases;
    use crate::manifest;
    use crate::records::Assignment;

    static NO_PORTS: BTreeMap<(Name, Name), u16> = BTreeMap::new();
    static NO_KEYS: BTreeMap<(Name, Name), String> = BTreeMap::new();

    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    fn catalogue(manifests: &[&str]) -> Catalogue {
        let parsed = manifests
            .iter()
            .enumerate()
            .map(|(i, t)| manifest::parse(&format!("m{i}.toml"), t).unwrap())
            .collect();
        Catalogue::build(parsed, Aliases::new())
    }

    const ECHO: &str = r#"
[module]
name = "echo"
description = "answers"

[run]
command = ["mesh-echo", "--store", "${seat:store:5432}", "--conf", "${file:conf}"]
env = { MODE = "loud" }

[uses]
seats = ["store"]

[[file]]
name = "conf"
path = "conf/echo.toml"
"#;
    const STORE: &str = r#"
[module]
name = "store"
description = "keeps"

[run]
command = ["store"]

[[seat]]
name = "store"
scope = "mesh"
protocol = "pg"

[holds]
seats = ["store"]
"#;

    /// Every assigned module composed, none left out.
    fn composed(m: NodeModules) -> Vec<ModuleDecl> {
        assert!(m.left_out.is_empty(), "{:?}", m.left_out);
        m.modules
    }

    /// The one module assigned, left out.
    fn refused(m: NodeModules) -> ComposeError {
        assert!(m.modules.is_empty(), "{:?}", m.modules);
        assert_eq!(m.left_out.len(), 1, "{:?}", m.left_out);
        m.left_out.into_iter().next().unwrap()
    }

    fn records(assign: &[(&str, &str)]) -> Records {
        Records {
            nodes: vec![n("n1"), n("n2")],
            assignments: assign
                .iter()
                .map(|(nd, m)| Assignment::new(n(nd), n(m)))
                .collect(),
            ..Records::default()
        }
    }

    #[test]
    fn placeholders_are_filled_from_the_records() {
        let no_left_out = BTreeMap::new();
        let c = catalogue(&[ECHO, STORE]);
        let r = records(&[("n1", "echo"), ("n2", "store")]);
        let versions = BTreeMap::from([(n("echo"), "sha256:e".to_string())]);
        let addresses = BTreeMap::from([(n("n2"), "10.0.0.2".to_string())]);
        let inputs = Inputs {
            catalogue: &c,
            records: &r,
            versions: &versions,
            addresses: &addresses,
            seat_ports: &NO_PORTS,
            secrets: &NoSecrets,
            keys: &NO_KEYS,
            users_file: Err("no composition"),
            left_out: &no_left_out,
        };
        let ms = composed(compose_modules(&inputs, &n("n1")));
        assert_eq!(ms.len(), 1);
        assert_eq!(
            ms[0].run.command,
            [
                "mesh-echo",
                "--store",
                "10.0.0.2:5432",
                "--conf",
                "conf/echo.toml"
            ]
        );
        assert_eq!(ms[0].run.env["MODE"], "loud");
        assert_eq!(ms[0].version, "sha256:e");
        assert_eq!(ms[0].files[0].path, "conf/echo.toml");
        // A node with nothing assigned runs nothing.
        let r = records(&[("n2", "store")]);
        let inputs = Inputs {
            records: &r,
            ..inputs
        };
        assert!(composed(compose_modules(&inputs, &n("n1"))).is_empty());
    }

    #[test]
    fn an_unfilled_placeholder_is_an_error_naming_it() {
        let no_left_out = BTreeMap::new();
        let c = catalogue(&[ECHO, STORE]);
        // The store's holder is not assigned anywhere.
        let r = records(&[("n1", "echo")]);
        let empty = BTreeMap::new();
        let inputs = Inputs {
            catalogue: &c,
            records: &r,
            versions: &empty,
            addresses: &empty,
            seat_ports: &NO_PORTS,
            secrets: &NoSecrets,
            keys: &NO_KEYS,
            users_file: Err("no composition"),
            left_out: &no_left_out,
        };
        let e = refused(compose_modules(&inputs, &n("n1")));
        assert!(
            matches!(&e, ComposeError::Unfilled { placeholder, why, .. }
                if placeholder == "${seat:store:5432}" && why.contains("assign its holder")),
            "{e}"
        );
        // Assigned, but its node's address is not known.
        let r = records(&[("n1", "echo"), ("n2", "store")]);
        let inputs = Inputs {
            records: &r,
            ..inputs
        };
        let e = refused(compose_modules(&inputs, &n("n1")));
        assert!(e.to_string().contains("no address recorded"), "{e}");
    }

    #[test]
    fn a_secret_and_a_module_without_run_are_refused() {
        let no_left_out = BTreeMap::new();
        let c = catalogue(&[
            r#"
[module]
name = "signer"
description = "signs"
[run]
command = ["signer"]
env = { KEY = "${secret:key}" }
secrets-in-environment = "the signer reads its key only from KEY"
"#,
            r#"
[module]
name = "marker"
description = "marks"
"#,
        ]);
        let empty = BTreeMap::new();
        let r = records(&[("n1", "signer")]);
        let inputs = Inputs {
            catalogue: &c,
            records: &r,
            versions: &empty,
            addresses: &empty,
            seat_ports: &NO_PORTS,
            secrets: &NoSecrets,
            keys: &NO_KEYS,
            users_file: Err("no composition"),
            left_out: &no_left_out,
        };
        let e = refused(compose_modules(&inputs, &n("n1")));
        assert!(e.to_string().contains("${secret:key}"), "{e}");
        let r = records(&[("n1", "marker")]);
        let inputs = Inputs {
            records: &r,
            ..inputs
        };
        assert!(matches!(
            refused(compose_modules(&inputs, &n("n1"))),
            ComposeError::NothingToRun { .. }
        ));
        let r = records(&[("n1", "ghost")]);
        let inputs = Inputs {
            records: &r,
            ..inputs
        };
        assert!(matches!(
            refused(compose_modules(&inputs, &n("n1"))),
            ComposeError::Unregistered { .. }
        ));
    }

    #[test]
    fn the_users_file_goes_to_the_broker_holder_and_nowhere_else() {
        let no_left_out = BTreeMap::new();
        let c = catalogue(&[
            r#"
[module]
name = "bus"
description = "the broker"
[run]
command = ["nats-server"]
[holds]
seats = ["mesh-broker"]
[[file]]
name = "bus-users"
path = "users.conf"
[[file]]
name = "extra"
path = "extra.conf"
"#,
            r#"
[module]
name = "other"
description = "not the broker"
[run]
command = ["other"]
[[file]]
name = "conf"
path = "other.conf"
"#,
        ]);
        let r = records(&[("n1", "bus"), ("n1", "other")]);
        let empty = BTreeMap::new();
        let inputs = Inputs {
            catalogue: &c,
            records: &r,
            versions: &empty,
            addresses: &empty,
            seat_ports: &NO_PORTS,
            secrets: &NoSecrets,
            keys: &NO_KEYS,
            users_file: Ok("USERS"),
            left_out: &no_left_out,
        };
        let ms = composed(compose_modules(&inputs, &n("n1")));
        let body = |m: &str, f: &str| {
            ms.iter()
                .find(|d| d.name.as_str() == m)
                .unwrap()
                .files
                .iter()
                .find(|x| x.name.as_str() == f)
                .unwrap()
                .body
                .clone()
        };
        assert_eq!(body("bus", "bus-users"), FileBody::Content("USERS".into()));
        assert_eq!(body("bus", "extra"), FileBody::Content(String::new()));
        assert_eq!(body("other", "conf"), FileBody::Content(String::new()));
    }

    const BUS: &str = r#"
[module]
name = "bus"
description = "the broker"
[run]
command = ["nats-server"]
[holds]
seats = ["mesh-broker"]
[[file]]
name = "bus-users"
path = "users.conf"
"#;

    #[test]
    fn a_broker_holder_with_no_users_file_is_left_out_and_the_node_keeps_the_rest() {
        let c = catalogue(&[BUS, STORE]);
        let r = records(&[("n1", "bus"), ("n1", "store")]);
        let empty = BTreeMap::new();
        let inputs = Inputs {
            catalogue: &c,
            records: &r,
            versions: &empty,
            addresses: &empty,
            seat_ports: &NO_PORTS,
            secrets: &NoSecrets,
            keys: &NO_KEYS,
            users_file: Err("the controller has no credential"),
            left_out: &empty,
        };
        let m = compose_modules(&inputs, &n("n1"));
        let names: Vec<&str> = m.modules.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["store"]);
        assert_eq!(m.left_out.len(), 1, "{:?}", m.left_out);
        let e = &m.left_out[0];
        assert_eq!(e.module().as_str(), "bus");
        assert!(
            matches!(e, ComposeError::NoUserList { why, .. } if why == "the controller has no credential"),
            "{e}"
        );
        assert!(
            e.to_string().contains("would refuse every connection"),
            "{e}"
        );
    }

    #[test]
    fn a_module_the_catalogue_leaves_out_is_named_and_the_rest_declared() {
        let c = catalogue(&[ECHO, STORE]);
        let r = records(&[("n1", "echo"), ("n1", "store")]);
        let empty = BTreeMap::new();
        let left_out =
            BTreeMap::from([(n("echo"), "seat ghost is declared by nobody".to_string())]);
        let inputs = Inputs {
            catalogue: &c,
            records: &r,
            versions: &empty,
            addresses: &empty,
            seat_ports: &NO_PORTS,
            secrets: &NoSecrets,
            keys: &NO_KEYS,
            users_file: Ok("USERS"),
            left_out: &left_out,
        };
        let m = compose_modules(&inputs, &n("n1"));
        assert_eq!(m.modules.len(), 1);
        assert_eq!(m.modules[0].name.as_str(), "store");
        let e = &m.left_out[0];
        assert!(
            matches!(e, ComposeError::DoesNotDerive { module, why } if module.as_str() == "echo" && why.contains("ghost")),
            "{e}"
        );
        assert!(e.to_string().contains("mesh catalogue register"), "{e}");
    }

    #[test]
    fn one_unfillable_placeholder_leaves_out_one_module() {
        let c = catalogue(&[ECHO, STORE]);
        // echo's store holder runs on n1, whose address nobody recorded.
        let r = records(&[("n1", "echo"), ("n1", "store")]);
        let empty = BTreeMap::new();
        let inputs = Inputs {
            catalogue: &c,
            records: &r,
            versions: &empty,
            addresses: &empty,
            seat_ports: &NO_PORTS,
            secrets: &NoSecrets,
            keys: &NO_KEYS,
            users_file: Ok("USERS"),
            left_out: &empty,
        };
        let m = compose_modules(&inputs, &n("n1"));
        assert_eq!(m.modules.len(), 1);
        assert_eq!(m.modules[0].name.as_str(), "store");
        assert!(
            matches!(&m.left_out[..], [ComposeError::Unfilled { module, .. }] if module.as_str() == "echo"),
            "{:?}",
            m.left_out
        );
    }

    /// Secrets as the controller holds them, sealing with a fresh "nonce"
    /// each time (a counter), the digest keyed by `key`.
    #[derive(Debug)]
    struct TestSecrets {
        values: BTreeMap<Name, String>,
        sealable: Vec<Name>,
        key: &'static str,
        nonce: std::sync::atomic::AtomicU32,
    }

    impl Secrets for TestSecrets {
        fn value(&self, name: &Name) -> Option<String> {
            self.values.get(name).cloned()
        }

        fn seal(&self, node: &Name, plaintext: &str) -> Result<String, String> {
            if !self.sealable.contains(node) {
                return Err(format!("node {node} has no sealing key recorded"));
            }
            let nonce = self
                .nonce
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                + 1;
            // Stands for a box: nothing of the plaintext but its length.
            Ok(format!("box{nonce}-{}", plaintext.len()))
        }

        fn digest(&self, values: &[(String, String)]) -> String {
            use std::hash::{Hash as _, Hasher as _};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (self.key, values).hash(&mut h);
            format!("{:016x}", h.finish())
        }
    }

    const SIGNER: &str = r#"
[module]
name = "signer"
description = "signs"
[run]
command = ["signer", "--key-file", "${file:key}"]
env = { DB_PASSWORD = "${secret:db-password}", MODE = "plain" }
secrets-in-environment = "the driver reads its password only from DB_PASSWORD"
[[file]]
name = "key"
path = "secrets/key"
content = "${secret:signing-key}"
[[file]]
name = "conf"
path = "conf.toml"
content = "mode = 1"
"#;

    #[test]
    fn secrets_are_sealed_to_the_node_and_only_a_new_value_is_a_change() {
        let no_left_out = BTreeMap::new();
        let c = catalogue(&[SIGNER]);
        let r = records(&[("n1", "signer")]);
        let empty = BTreeMap::new();
        let secrets = |pw: &str| TestSecrets {
            values: BTreeMap::from([
                (n("db-password"), pw.to_string()),
                (n("signing-key"), "KEY-PLAINTEXT".to_string()),
            ]),
            sealable: vec![n("n1")],
            key: "k",
            nonce: std::sync::atomic::AtomicU32::new(0),
        };
        let first = secrets("PW-ONE");
        let inputs = Inputs {
            catalogue: &c,
            records: &r,
            versions: &empty,
            addresses: &empty,
            users_file: Ok("USERS"),
            left_out: &no_left_out,
            seat_ports: &NO_PORTS,
            secrets: &first,
            keys: &NO_KEYS,
        };
        let ms = composed(compose_modules(&inputs, &n("n1")));
        let m = &ms[0];
        assert_eq!(m.run.env.keys().collect::<Vec<_>>(), ["MODE"]);
        assert_eq!(m.run.sealed_env.keys().collect::<Vec<_>>(), ["DB_PASSWORD"]);
        assert!(matches!(&m.files[0].body, FileBody::Sealed(b) if b.starts_with("box")));
        assert_eq!(m.files[1].body, FileBody::Content("mode = 1".into()));
        let wire = String::from_utf8(
            next_declaration(&n("n1"), ms.clone(), None, None, 1)
                .unwrap()
                .to_bytes(),
        )
        .unwrap();
        // Nor does the manifest's reason for a secret in the environment
        // reach the machine: it stays in the catalogue (L87).
        assert!(
            !wire.contains("reads its password only") && !wire.contains("secrets-in-environment"),
            "{wire}"
        );
        assert!(
            !wire.contains("PW-ONE") && !wire.contains("KEY-PLAINTEXT"),
            "{wire}"
        );

        // Sealed again (another nonce), the same values: no new declaration.
        let last = next_declaration(&n("n1"), ms.clone(), None, None, 1).unwrap();
        let again = composed(compose_modules(&inputs, &n("n1")));
        assert_ne!(again[0].run.sealed_env, ms[0].run.sealed_env, "fresh seals");
        assert_eq!(
            next_declaration(&n("n1"), again, None, Some(&last), 2),
            None
        );
        // A new value: a new declaration.
        let second = secrets("PW-TWO");
        let inputs2 = Inputs {
            secrets: &second,
            ..inputs
        };
        let changed = composed(compose_modules(&inputs2, &n("n1")));
        assert_ne!(changed[0].secrets, ms[0].secrets);
        assert!(next_declaration(&n("n1"), changed, None, Some(&last), 3).is_some());
    }

    #[test]
    fn a_secret_with_no_value_or_no_sealing_key_leaves_its_module_out() {
        let no_left_out = BTreeMap::new();
        let c = catalogue(&[SIGNER, STORE]);
        let r = records(&[("n2", "signer"), ("n2", "store")]);
        let empty = BTreeMap::new();
        let none = TestSecrets {
            values: BTreeMap::from([(n("signing-key"), "K".to_string())]),
            sealable: vec![n("n2")],
            key: "k",
            nonce: std::sync::atomic::AtomicU32::new(0),
        };
        let inputs = Inputs {
            catalogue: &c,
            records: &r,
            versions: &empty,
            addresses: &empty,
            users_file: Ok("USERS"),
            left_out: &no_left_out,
            seat_ports: &NO_PORTS,
            secrets: &none,
            keys: &NO_KEYS,
        };
        let m = compose_modules(&inputs, &n("n2"));
        assert_eq!(m.modules.len(), 1, "store is still declared");
        assert!(
            m.left_out[0]
                .to_string()
                .contains("no value is recorded for secret db-password; set one with `mesh secret set db-password`"),
            "{}",
            m.left_out[0]
        );
        let unsealable = TestSecrets {
            values: BTreeMap::from([
                (n("db-password"), "P".to_string()),
                (n("signing-key"), "K".to_string()),
            ]),
            sealable: vec![],
            key: "k",
            nonce: std::sync::atomic::AtomicU32::new(0),
        };
        let inputs = Inputs {
            secrets: &unsealable,
            ..inputs
        };
        let m = compose_modules(&inputs, &n("n2"));
        assert!(
            matches!(&m.left_out[..], [ComposeError::Unsealable { node, why, .. }]
                if node.as_str() == "n2" && why.contains("no sealing key")),
            "{:?}",
            m.left_out
        );
    }

    #[test]
    fn a_seat_address_takes_the_nodes_given_port_over_the_manifests() {
        let no_left_out = BTreeMap::new();
        let c = catalogue(&[ECHO, STORE]);
        let r = records(&[("n1", "echo"), ("n2", "store")]);
        let versions = BTreeMap::new();
        let addresses = BTreeMap::from([(n("n2"), "10.0.0.2".to_string())]);
        let given = BTreeMap::from([((n("n2"), n("store")), 6432u16)]);
        let inputs = Inputs {
            catalogue: &c,
            records: &r,
            versions: &versions,
            addresses: &addresses,
            users_file: Ok("USERS"),
            left_out: &no_left_out,
            seat_ports: &given,
            secrets: &NoSecrets,
            keys: &NO_KEYS,
        };
        let ms = composed(compose_modules(&inputs, &n("n1")));
        assert_eq!(ms[0].run.command[2], "10.0.0.2:6432");
        // Given on another node: the manifest's number.
        let elsewhere = BTreeMap::from([((n("n1"), n("store")), 6432u16)]);
        let inputs = Inputs {
            seat_ports: &elsewhere,
            ..inputs
        };
        let ms = composed(compose_modules(&inputs, &n("n1")));
        assert_eq!(ms[0].run.command[2], "10.0.0.2:5432");
    }

    #[test]
    fn paths_stay_inside_the_module_directory() {
        for ok in ["a", "a/b.toml", "conf/echo.toml"] {
            assert!(is_inside(ok), "{ok}");
        }
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a/."] {
            assert!(!is_inside(bad), "{bad}");
        }
    }

    #[test]
    fn only_a_change_makes_a_new_declaration() {
        let m = ModuleDecl {
            name: n("echo"),
            version: "v1".into(),
            run: RunDecl {
                driver: crate::manifest::Driver::Process,
                image: None,
                command: vec!["e".into()],
                env: BTreeMap::new(),
                stop_grace_s: 10,
                sealed_env: BTreeMap::new(),
            },
            files: vec![],
            secrets: None,
            key: None,
            artifacts: Vec::new(),
        };
        let bus = |port: u16| {
            Some(BusDecl {
                urls: vec![format!("tls://127.0.0.1:{port}")],
            })
        };
        let first = next_declaration(&n("n1"), vec![m.clone()], bus(4222), None, 7).unwrap();
        assert_eq!((first.sequence, first.composed_at), (1, 7));
        assert_eq!(
            next_declaration(&n("n1"), vec![m.clone()], bus(4222), Some(&first), 8),
            None
        );
        let mut changed = m.clone();
        changed.version = "v2".into();
        let at4 = Declaration {
            sequence: 4,
            ..first.clone()
        };
        let next = next_declaration(&n("n1"), vec![changed], bus(4222), Some(&at4), 9).unwrap();
        assert_eq!(next.sequence, 5);
        // Everything unassigned is a declaration too: run nothing.
        let none = next_declaration(&n("n1"), vec![], bus(4222), Some(&next), 9).unwrap();
        assert!(none.modules.is_empty());
        // The broker moved: a new declaration, modules unchanged.
        let moved = next_declaration(&n("n1"), vec![m.clone()], bus(4333), Some(&first), 10)
            .expect("a new address is a change");
        assert_eq!((moved.sequence, moved.modules), (2, vec![m]));
        assert_eq!(moved.bus, bus(4333));
    }
}

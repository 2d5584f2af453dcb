//! `mesh plan` (and `mesh assign|unassign --dry-run`): what a pending change
//! would do before it is made. The records are read as the controller reads
//! them, the change is applied to a copy in memory, and `mesh_core::change`
//! compares the two; nothing is written.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use mesh_core::authority::Cause;
use mesh_core::catalogue::Catalogue;
use mesh_core::change::{self, Direction, Entry, Field, Object, Side};
use mesh_core::declaration::seat_address::{self, Unaddressed};
use mesh_core::declaration::{Inputs, ModuleDecl};
use mesh_core::names::Name;
use mesh_core::records::{Assignment, ControllerSpec, Records};
use serde::Serialize;

use crate::authority::open_existing_store;
use crate::output;
use crate::output::ListFormat;
use crate::state::MeshArgs;

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(subcommand)]
    pub change: PlanCommand,
}

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// What assigning a module to a node would change.
    #[command(after_help = "Examples:
  mesh plan assign notifier n1
  mesh plan assign notifier n1 --output json
  mesh plan assign audit n1 --version 1.4.0
  mesh plan assign db n2 --move-from n1")]
    Assign(PlanAssignArgs),
    /// What unassigning a module from a node would change.
    #[command(after_help = "Example:\n  mesh plan unassign notifier n1")]
    Unassign(PlanAssignArgs),
    /// What registering a catalogue (new or changed manifests) would change.
    #[command(after_help = "Example:\n  mesh plan register examples/catalogue")]
    Register(PlanRegisterArgs),
}

#[derive(Debug, Args)]
pub struct PlanAssignArgs {
    pub module: String,
    pub node: String,
    /// With assign: the version to pin (`mesh assign --version`).
    #[arg(long)]
    pub version: Option<String>,
    /// With assign: move the module from this node in one step (`mesh
    /// assign --move-from`).
    #[arg(long, value_name = "NODE")]
    pub move_from: Option<String>,
    #[command(flatten)]
    pub opts: PlanOpts,
}

#[derive(Debug, Args)]
pub struct PlanRegisterArgs {
    /// Catalogue directories or manifest files, as for `mesh check`.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    #[command(flatten)]
    pub opts: PlanOpts,
}

#[derive(Debug, Clone, Args)]
pub struct PlanOpts {
    #[arg(long, value_enum, default_value_t = ListFormat::Text)]
    pub output: ListFormat,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

/// A change not yet made.
#[derive(Debug, Clone)]
pub enum Pending {
    Assign {
        module: Name,
        node: Name,
        /// The version to pin (`--version`); none: the version it ran
        /// where it moves from, else the newest recorded, for a module not
        /// yet assigned there.
        version: Option<String>,
        /// Moved from this node in the same step (`--move-from`).
        from: Option<Name>,
    },
    Unassign {
        module: Name,
        node: Name,
    },
    /// Manifest texts by module name.
    Register {
        sources: BTreeMap<Name, String>,
    },
}

impl std::fmt::Display for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pending::Assign {
                module,
                node,
                version,
                from,
            } => {
                match from {
                    Some(from) => write!(f, "move {module} from {from} to {node}")?,
                    None => write!(f, "assign {module} to {node}")?,
                }
                match version {
                    Some(v) => write!(f, " at version {v}"),
                    None => Ok(()),
                }
            }
            Pending::Unassign { module, node } => write!(f, "unassign {module} from {node}"),
            Pending::Register { sources } => write!(
                f,
                "register {}",
                sources
                    .keys()
                    .map(Name::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
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

pub fn name(what: &str, s: &str) -> anyhow::Result<Name> {
    Name::new(s).with_context(|| format!("{s:?} is not a {what} name"))
}

pub fn run(args: &PlanArgs) -> anyhow::Result<ExitCode> {
    let (pending, opts) = match &args.change {
        PlanCommand::Assign(a) => (
            Pending::Assign {
                module: name("module", &a.module)?,
                node: name("node", &a.node)?,
                version: a.version.clone(),
                from: a
                    .move_from
                    .as_deref()
                    .map(|n| name("node", n))
                    .transpose()?,
            },
            &a.opts,
        ),
        PlanCommand::Unassign(a) if a.move_from.is_some() || a.version.is_some() => {
            bail!("--move-from and --version are for `mesh plan assign`")
        }
        PlanCommand::Unassign(a) => (
            Pending::Unassign {
                module: name("module", &a.module)?,
                node: name("node", &a.node)?,
            },
            &a.opts,
        ),
        PlanCommand::Register(a) => (register(&a.paths, &a.opts.mesh)?, &a.opts),
    };
    print_plan(&pending, &opts.mesh, opts.output)
}

/// The manifests of `paths`, checked as `mesh catalogue register` checks
/// them: with the registered catalogue in view.
fn register(paths: &[PathBuf], mesh: &MeshArgs) -> anyhow::Result<Pending> {
    let registered = crate::block_on(async {
        let store = open_existing_store(&mesh.store_url()?).await?;
        let read = crate::registering::InView::read(&store).await;
        store.close().await;
        read
    })??;
    let report = crate::registering::checked(paths, &registered, "nothing is planned")?.report;
    let mut sources = BTreeMap::new();
    for m in report.catalogue.manifests() {
        let text = report
            .sources
            .get(&m.path)
            .with_context(|| format!("the text of {} was not kept", m.path))?;
        sources.insert(m.name.value.clone(), text.clone());
    }
    Ok(Pending::Register { sources })
}

/// Computes and prints the plan for `pending` (also `--dry-run`).
pub fn print_plan(
    pending: &Pending,
    mesh: &MeshArgs,
    format: ListFormat,
) -> anyhow::Result<ExitCode> {
    let plan = crate::block_on(compute(pending, mesh))??;
    match format {
        ListFormat::Json => output::print(&format!("{}\n", serde_json::to_string_pretty(&plan)?))?,
        ListFormat::Text => output::print(&render(&plan))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads the mesh as the controller does (registered catalogue, records,
/// manifest digests) and plans `pending` against it.
pub async fn compute(pending: &Pending, mesh: &MeshArgs) -> anyhow::Result<Plan> {
    let store = open_existing_store(&mesh.store_url()?).await?;
    let read = async {
        let registered = mesh_state::registered::read(&store).await?;
        let snapshot = mesh_state::read(&store).await?;
        let modules = store.modules().await?;
        let nodes = store.nodes().await?;
        let seat_ports = store.node_seat_ports().await?;
        let secrets = store.secrets().await?;
        // What a new assignment would pin: each module's newest version.
        let mut newest = BTreeMap::new();
        for r in store.artifacts(None).await? {
            newest.entry(r.module).or_insert(r.version);
        }
        anyhow::Ok((
            registered, snapshot, modules, nodes, seat_ports, secrets, newest,
        ))
    }
    .await;
    store.close().await;
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
) -> anyhow::Result<Option<Catalogue>> {
    match pending {
        Pending::Assign {
            module,
            node,
            version,
            from,
        } => {
            if catalogue.module(module).is_none() {
                bail!(
                    "module {module} is not registered; register its catalogue first with `mesh catalogue register DIR`"
                );
            }
            if !records.nodes.contains(node) {
                bail!("node {node} is not recorded; add it with `mesh node add {node}`");
            }
            // A move: gone from where it ran, keeping what it ran.
            let mut ran = None;
            if let Some(from) = from {
                if from == node {
                    bail!(
                        "--move-from {from} names the node it is assigned to; give the node it runs on now"
                    );
                }
                let was = Assignment::new(from.clone(), module.clone());
                if !records.assignments.contains(&was) {
                    bail!(
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
                bail!(
                    "module {module} has no version {v}; `mesh artifact list --module {module}` lists its versions"
                );
            }
            if records.assignments.contains(&a) {
                match version {
                    Some(v) if records.pins.get(&key) != Some(v) => {
                        records.pins.insert(key, v.clone());
                    }
                    _ => bail!("{module} is already assigned to {node}: nothing would change"),
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
        Pending::Unassign { module, node } => {
            let a = Assignment::new(node.clone(), module.clone());
            let before = records.assignments.len();
            records.assignments.retain(|x| *x != a);
            if records.assignments.len() == before {
                bail!("{module} is not assigned to {node}; `mesh modules` lists what runs where");
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
                let path = mesh_state::registered::source_name(module.as_str());
                let m = mesh_core::manifest::parse(&path, text).map_err(|d| {
                    anyhow::anyhow!(
                        "the manifest of {module} does not parse: {}",
                        d.first().map(|d| d.message.clone()).unwrap_or_default()
                    )
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

/// Each module left without an address, its line starting with `lead`,
/// and what mends it (each remedy once), starting with `help`.
pub fn unaddressed_text(unaddressed: &[Unaddressed], lead: &str, help: &str) -> String {
    let mut out = String::new();
    let mut remedies = Vec::new();
    for u in unaddressed {
        let _ = writeln!(
            out,
            "{lead}{u}: the controller leaves it out of {}'s declaration until a holder is assigned",
            u.node
        );
        let remedy = u.remedy();
        if !remedies.contains(&remedy) {
            let _ = writeln!(out, "{help}{remedy}");
            remedies.push(remedy);
        }
    }
    out
}

fn causes(out: &mut String, causes: &[Cause]) {
    for c in causes {
        let _ = writeln!(out, "          because {c}");
    }
}

fn field(f: &Field) -> String {
    match f {
        Field::Version { before, after } => format!("version {before} -> {after}"),
        Field::Command { before, after } => {
            format!("command {before:?} -> {after:?}")
        }
        Field::StopGrace { before, after } => format!("stop grace {before}s -> {after}s"),
        Field::EnvAdded { key } => format!("env {key} added"),
        Field::EnvRemoved { key } => format!("env {key} removed"),
        Field::EnvChanged { key } => format!("env {key} changed"),
        Field::FileAdded { name, path } => format!("file {name} ({path}) added"),
        Field::FileRemoved { name, path } => format!("file {name} ({path}) removed"),
        Field::FileChanged { name, path } => format!("file {name} ({path}) changed"),
        Field::Artifact {
            name,
            before,
            after,
        } => format!(
            "artifact {name} {} -> {}",
            before.as_deref().unwrap_or("(none)"),
            after.as_deref().unwrap_or("(none)")
        ),
    }
}

fn object(o: &Object) -> String {
    match o {
        Object::Stream(s) => format!("stream {} ({})", s.name, s.subjects.join(", ")),
        Object::Consumer(c) => format!(
            "consumer {} on {}{}",
            c.name,
            c.stream,
            if c.filter_subjects.is_empty() {
                String::new()
            } else {
                format!(" filtering {}", c.filter_subjects.join(", "))
            }
        ),
    }
}

/// The text of a plan: declarations by node, authority by principal, then
/// the bus objects.
pub fn render(plan: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "plan: {}", plan.pending);
    if plan.entries.is_empty() {
        let _ = writeln!(out, "nothing would change");
        return out;
    }
    let _ = writeln!(out, "declarations:");
    let mut node: Option<&Name> = None;
    let mut any = false;
    for e in &plan.entries {
        let Some(n) = e.node() else { continue };
        any = true;
        if node != Some(n) {
            let _ = writeln!(out, "  node {n}:");
            node = Some(n);
        }
        let _ = match e {
            Entry::Start {
                module, version, ..
            } => match plan.pins.get(n).and_then(|p| p.get(module)) {
                Some(pin) => writeln!(
                    out,
                    "    start  {module} (version {version}, runs version {pin} of {module})"
                ),
                None => writeln!(out, "    start  {module} (version {version})"),
            },
            Entry::Stop { module, .. } => writeln!(out, "    stop   {module}"),
            Entry::LeftOut { module, reason, .. } => {
                writeln!(out, "    left out {module}: {reason}")
            }
            Entry::Update {
                module, field: f, ..
            } => {
                writeln!(out, "    update {module}: {}", field(f))
            }
            _ => Ok(()),
        };
    }
    if !any {
        let _ = writeln!(out, "  (no node's declaration changes)");
    }
    if !plan.unaddressed.is_empty() {
        let _ = writeln!(out, "left without an address:");
        out.push_str(&unaddressed_text(&plan.unaddressed, "  ", "    = help: "));
    }
    let _ = writeln!(out, "authority:");
    let mut principal: Option<&str> = None;
    any = false;
    for e in &plan.entries {
        let Some(p) = e.principal() else { continue };
        any = true;
        if principal != Some(p) {
            let _ = writeln!(out, "  principal {p}:");
            principal = Some(p);
        }
        let dir = |d: &Direction| match d {
            Direction::Publish => "publish",
            Direction::Subscribe => "subscribe",
        };
        match e {
            Entry::PrincipalAdded { source, .. } => {
                let _ = writeln!(out, "    + new principal ({source})");
            }
            Entry::PrincipalRemoved { source, .. } => {
                let _ = writeln!(out, "    - principal gone ({source})");
            }
            Entry::GrantAdded {
                direction,
                subject,
                causes: c,
                ..
            }
            | Entry::GrantRemoved {
                direction,
                subject,
                causes: c,
                ..
            } => {
                let sign = if matches!(e, Entry::GrantAdded { .. }) {
                    '+'
                } else {
                    '-'
                };
                let _ = writeln!(out, "    {sign} {:<9} {subject}", dir(direction));
                causes(&mut out, c);
            }
            Entry::AllowResponses { after, .. } => {
                let _ = match after {
                    Some(c) => writeln!(out, "    + allow_responses, because {c}"),
                    None => writeln!(out, "    - allow_responses"),
                };
            }
            _ => {}
        }
    }
    if !any {
        let _ = writeln!(out, "  (no principal's authority changes)");
    }
    let objects: Vec<String> = plan
        .entries
        .iter()
        .filter_map(|e| match e {
            Entry::ObjectAdded(o) => Some(format!("  + {}", object(o))),
            Entry::ObjectRemoved(o) => Some(format!("  - {}", object(o))),
            Entry::ObjectChanged { before, after } => {
                Some(format!("  ~ {} (was {})", object(after), object(before)))
            }
            _ => None,
        })
        .collect();
    let _ = writeln!(out, "bus objects:");
    if objects.is_empty() {
        let _ = writeln!(out, "  (no stream or consumer changes)");
    }
    for o in objects {
        let _ = writeln!(out, "{o}");
    }
    out
}

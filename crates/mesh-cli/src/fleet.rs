//! `mesh fleet load FILE`: records a fleet described in one file — nodes and
//! what runs on them, persons, enrolment tokens — registers the catalogue's
//! manifests, and mints a credential for every principal that has none.
//! Loading the same file again changes nothing and mints nothing. The file
//! format and its checks are `mesh_core::fleet`.
//!
//! All or nothing: the whole file is checked first (every problem reported);
//! then secrets are generated and staged as temporary files in the secrets
//! directory, the store is changed in one transaction, and only then are the
//! files renamed into place. On any failure before the commit the temporary
//! files are removed and the store is as it was.
//!
//! Minted secrets are shown once: each is written to `<secrets-dir>/<principal>`
//! (mode 0600), never printed. A machine's secret is its NKey seed (the store
//! records the public key), a person's a password (the store records its
//! bcrypt hash), a token's the enrolment seed.

mod secrets;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use mesh_core::authority::{Principal, PrincipalKind};
use mesh_core::diagnostic::{Diagnostic, render_text, suggest};
use mesh_core::fleet::Fleet;
use mesh_core::names::Name;
use mesh_core::records::{Assignment, ControllerSpec, PersonRecord, Records};
use mesh_store::{FleetApplied, FleetChange, Secret, Store, principal};

use crate::authority;
use crate::check::plural;
use crate::registering::{self, InView, Registering};
use crate::{files, output};

/// How long an enrolment token issued by a fleet file stays live.
const TOKEN_TTL: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug, Clone, Args)]
pub struct FleetArgs {
    /// The fleet file.
    pub file: PathBuf,
    #[command(flatten)]
    pub sources: authority::Sources,
    /// Where minted secrets are written, one file per principal [default:
    /// `secrets` in the mesh's directory].
    #[arg(long = "secrets-dir", value_name = "DIR")]
    pub secrets: Option<PathBuf>,
    /// Mint this principal's credential (or reissue `enrol_<node>`'s token)
    /// again, replacing the recorded one; repeatable.
    #[arg(long, value_name = "PRINCIPAL")]
    pub remint: Vec<String>,
    /// Forget the nodes (with their credentials), assignments and persons the
    /// store holds and the file does not name.
    #[arg(long)]
    pub prune: bool,
}

impl FleetArgs {
    /// `--secrets-dir`, else `secrets` beside the store in the mesh's
    /// directory (`./.mesh` when no mesh is found: a load makes one).
    pub fn secrets_dir(&self) -> PathBuf {
        self.secrets
            .clone()
            .unwrap_or_else(|| self.sources.mesh.dir_or_new().join("secrets"))
    }

    /// The store: `--store`, else the mesh found's, else `./.mesh`'s, made.
    fn store_url(&self) -> anyhow::Result<String> {
        self.sources.mesh.store_url_or_new()
    }
}

pub fn run(args: &FleetArgs) -> anyhow::Result<ExitCode> {
    // Resolved once: the load makes `./.mesh`, which a second lookup would
    // then find under another spelling.
    let mut resolved = args.clone();
    resolved.secrets = Some(args.secrets_dir());
    resolved.sources.mesh.store = Some(args.store_url()?);
    crate::block_on(load_fleet(&resolved))?
}

async fn load_fleet(args: &FleetArgs) -> anyhow::Result<ExitCode> {
    let path = args.file.display().to_string();
    let text = std::fs::read_to_string(&args.file).with_context(|| format!("reading {path}"))?;
    let url = args.store_url()?;
    mesh_store::check_url(&url)?;
    // Read before a store is created: a directory of another store's
    // secrets refuses this load, and a catalogue or fleet file refused
    // here leaves no store behind empty. A store this cannot read now (an
    // older schema, or one away) is read once opened.
    let mut store = None;
    let registered = match existing(&url).await? {
        Some((id, registered)) => {
            secrets::check_marker(&args.secrets_dir(), id.as_deref())?;
            registered
        }
        None => {
            let opened = authority::open_store(&url).await?;
            let read = InView::read(&opened).await;
            if read.is_err() {
                opened.close().await;
            }
            let read = read?;
            store = Some(opened);
            read
        }
    };
    let loaded = async {
        // The catalogue checked as `mesh catalogue register` checks it,
        // with what is registered in view; the fleet names its modules.
        let registering = registering::checked(
            &args.sources.catalogue,
            &registered,
            "nothing was recorded: fix them first",
        )?;
        let fleet = match mesh_core::fleet::read(&path, &text, &registering.after) {
            Ok(f) => f,
            Err(diags) => return Err(refused(&path, &text, &diags)),
        };
        // Before anything is minted: a secret whose file cannot be written
        // is lost, since the store keeps only its public key or hash.
        files::private_dir(&args.secrets_dir())?;
        if store.is_none() {
            store = Some(authority::open_store(&url).await?);
        }
        let opened = store.as_ref().context("the store was opened")?;
        let outcome = record(args, &fleet, &registering, opened).await?;
        anyhow::Ok((outcome, fleet))
    }
    .await;
    if let Some(s) = store {
        s.close().await;
    }
    let (outcome, fleet) = loaded?;
    outcome.print(args, &fleet)?;
    Ok(if outcome.missing.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The store at `url` read without creating or migrating anything: its
/// identity and what it has registered (no identity and nothing
/// registered when there is no store yet), or `None` when it cannot be
/// read now: a store of an older schema (brought forward once opened), or
/// one away (whose error comes from opening it).
async fn existing(url: &str) -> anyhow::Result<Option<(Option<String>, InView)>> {
    use mesh_store::StoreError::{Missing, SchemaTooOld};
    match Store::open_existing(url).await {
        Ok(store) => {
            let read = async {
                let id = store.id().await?;
                anyhow::Ok((Some(id), InView::read(&store).await?))
            }
            .await;
            store.close().await;
            Ok(read.ok())
        }
        Err(Missing { .. }) => Ok(Some((None, InView::empty()))),
        Err(SchemaTooOld { .. }) => Ok(None),
        Err(_) => Ok(None),
    }
}

/// Prints every diagnostic of a refused file and says nothing was recorded.
fn refused(path: &str, text: &str, diags: &[Diagnostic]) -> anyhow::Error {
    for d in diags {
        // Through note(): a failed write to stderr must not panic either.
        output::note(render_text(d, Some(text)).trim_end_matches('\n'));
    }
    let errors = diags.iter().filter(|d| d.is_error()).count();
    anyhow::anyhow!(
        "{path} has {errors} error{}; nothing was recorded: fix {} and load again",
        plural(errors),
        if errors == 1 { "it" } else { "them" }
    )
}

/// What a load did, for the summary.
struct Outcome {
    applied: FleetApplied,
    secrets_placed: usize,
    /// What the store holds and the file does not name (kept without --prune).
    unnamed: Vec<String>,
    /// Principals with a credential recorded and no secret file.
    missing: Vec<String>,
}

/// The plan: what the change records and which secrets it mints.
async fn record(
    args: &FleetArgs,
    fleet: &Fleet,
    registering: &Registering,
    store: &Store,
) -> anyhow::Result<Outcome> {
    let store_id = store.id().await?;
    let needs_marker = secrets::check_marker(&args.secrets_dir(), Some(&store_id))?;
    let before = mesh_state::read(store).await?;

    let file_nodes: BTreeSet<&Name> = fleet
        .nodes
        .iter()
        .map(|n| &n.name.value)
        .chain(fleet.tokens.iter().map(|t| &t.value))
        .collect();
    let mut change = FleetChange {
        registration: registering.registration.clone(),
        nodes: file_nodes.iter().map(|n| (*n).clone()).collect(),
        assignments: fleet
            .nodes
            .iter()
            .flat_map(|n| {
                n.modules
                    .iter()
                    .map(|m| (n.name.value.clone(), m.value.clone()))
            })
            .collect(),
        persons: fleet
            .persons
            .iter()
            .map(|p| (p.name.value.clone(), p.tools.clone()))
            .collect(),
        prune: args.prune,
        ..FleetChange::default()
    };
    let (after, unnamed) = records_after(&before.records, &change, fleet);

    let loaded = authority::Loaded {
        catalogue: registering.after.clone(),
        records: after,
        credentials: BTreeMap::new(),
        controller: ControllerSpec::default(),
    };
    let principals = authority::derive(&loaded)?;
    check_remint(&args.remint, &principals)?;
    let remint = |name: &str| args.remint.iter().any(|r| r == name);
    // A node listed only under [[token]] makes its host credential when it
    // enrols, not here.
    let to_mint = mesh_core::authority::credentials_to_mint(
        &principals,
        |name| before.credentials.contains_key(name) && !remint(name),
        |node| !fleet.nodes.iter().any(|n| &n.name.value == node),
    );
    let live: BTreeSet<&Name> = before.records.live_tokens.iter().collect();
    let tokens: Vec<&Name> = fleet
        .tokens
        .iter()
        .map(|t| &t.value)
        .filter(|n| !live.contains(n) || remint(&principal::enrolment(n)))
        .collect();

    let mut minted: Vec<(String, Secret)> = Vec::new();
    for node in tokens {
        let (secret, t) = mesh_store::prepare_token(node, TOKEN_TTL);
        minted.push((principal::enrolment(node), secret));
        change.tokens.push(t);
    }
    for p in to_mint {
        let (secret, c) = match &p.kind {
            PrincipalKind::Person { .. } => mesh_store::prepare_password(&p.kind).await?,
            // Generated here, where the store's caller runs: only the public
            // key goes into the records.
            machine => {
                let (seed, public_key) = mesh_store::new_user_key();
                (seed, mesh_store::prepare_machine_key(machine, &public_key)?)
            }
        };
        minted.push((p.name.clone(), secret));
        change.credentials.push(c);
    }
    for (name, _) in &minted {
        secrets::check_target(&secrets::target(&args.secrets_dir(), name), name)?;
    }

    // Staged files are removed when `staged` drops unless placed.
    let mut staged = secrets::Staged::default();
    if needs_marker {
        staged.stage_bytes(
            &args.secrets_dir(),
            secrets::MARKER,
            secrets::marker_text(&store_id, store.url()).as_bytes(),
        )?;
    }
    for (name, secret) in &minted {
        staged.stage(&args.secrets_dir(), name, secret)?;
    }
    let applied = store
        .apply_fleet(&change)
        .await
        .context("recording the fleet; nothing was recorded and no secret was kept")?;
    // No secret in the trail: the fleet file by name, what it was told.
    crate::audit::record_local(
        store,
        "fleet-load",
        serde_json::json!({
            "file": args.file.display().to_string(),
            "prune": args.prune,
            "remint": args.remint,
        }),
    )
    .await?;
    let failed = staged.place();
    let secrets_placed = minted.len() - failed.iter().filter(|(n, _)| n != secrets::MARKER).count();
    for (name, e) in &failed {
        output::note(format_args!(
            "error: {e:#}\n  = help: {}",
            remint_command(args, name)
        ));
    }

    forget_secrets(&args.secrets_dir(), &applied);
    let missing = missing_secrets(args, fleet, store).await?;
    Ok(Outcome {
        applied,
        secrets_placed,
        unnamed,
        missing,
    })
}

/// Removes the secret files of the credentials a prune deleted: they admit
/// nobody now, and a file left behind reads as a way in.
fn forget_secrets(dir: &std::path::Path, applied: &FleetApplied) {
    let gone = applied
        .nodes_pruned
        .iter()
        .flat_map(|(_, f)| f.credentials.iter().cloned())
        .chain(
            applied
                .assignments_pruned
                .iter()
                .map(|(n, m)| principal::module(n, m)),
        )
        .chain(applied.persons_pruned.iter().map(principal::person));
    for p in gone {
        let _ = std::fs::remove_file(secrets::target(dir, &p));
    }
}

/// The records as they will be once `change` is applied, and what the store
/// holds that the file does not name.
fn records_after(before: &Records, change: &FleetChange, fleet: &Fleet) -> (Records, Vec<String>) {
    let named: BTreeSet<&Name> = change.nodes.iter().collect();
    let wanted: BTreeSet<(&Name, &Name)> = change.assignments.iter().map(|(n, m)| (n, m)).collect();
    let persons: BTreeSet<&Name> = change.persons.iter().map(|(p, _)| p).collect();
    let mut unnamed = Vec::new();
    let mut after = Records::default();
    for n in &before.nodes {
        if !named.contains(n) {
            unnamed.push(format!("node {n}"));
            if change.prune {
                continue;
            }
        }
        after.nodes.push(n.clone());
    }
    for a in &before.assignments {
        if !wanted.contains(&(&a.node, &a.module)) {
            if named.contains(&a.node) {
                unnamed.push(format!("assignment {a}"));
            }
            if change.prune {
                continue;
            }
        }
        after.assignments.push(a.clone());
    }
    for p in &before.persons {
        if !persons.contains(&p.name) {
            unnamed.push(format!("person {}", p.name));
            if !change.prune {
                after.persons.push(p.clone());
            }
        }
    }
    for n in &change.nodes {
        if !after.nodes.contains(n) {
            after.nodes.push(n.clone());
        }
    }
    for (n, m) in &change.assignments {
        let a = Assignment::new(n.clone(), m.clone());
        if !after.assignments.contains(&a) {
            after.assignments.push(a);
        }
    }
    for p in &fleet.persons {
        after.persons.push(PersonRecord {
            name: p.name.value.clone(),
            tools: p.tools.clone(),
            role: None,
        });
    }
    after.live_tokens = before
        .live_tokens
        .iter()
        .filter(|n| after.nodes.contains(n))
        .chain(fleet.tokens.iter().map(|t| &t.value))
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    // A login lives on with its person.
    after.live_logins = before
        .live_logins
        .iter()
        .filter(|p| after.persons.iter().any(|a| a.name == **p))
        .cloned()
        .collect();
    after.nodes.sort();
    after.assignments.sort();
    after.persons.sort_by(|a, b| a.name.cmp(&b.name));
    (after, unnamed)
}

/// Every `--remint` must name a principal of this fleet.
fn check_remint(remint: &[String], principals: &[Principal]) -> anyhow::Result<()> {
    for r in remint {
        if principals.iter().any(|p| &p.name == r) {
            continue;
        }
        let names = principals.iter().map(|p| p.name.as_str());
        let help = match suggest(r, names.clone()) {
            Some(close) => format!("did you mean {close}?"),
            None => format!(
                "the principals are: {}",
                names.collect::<Vec<_>>().join(", ")
            ),
        };
        bail!("--remint {r}: no such principal in this fleet; {help}");
    }
    Ok(())
}

fn remint_command(args: &FleetArgs, principal: &str) -> String {
    let catalogue: Vec<String> = args
        .sources
        .catalogue
        .iter()
        .map(|c| format!("--catalogue {}", c.display()))
        .collect();
    format!(
        "re-mint it with `mesh fleet load {} {} --remint {principal}`",
        args.file.display(),
        catalogue.join(" ")
    )
}

/// Principals whose credential (or live token) the store holds while the
/// secrets directory has no file for it: nobody can connect as them. Hosts
/// that enrol themselves keep their secret on their node, not here.
async fn missing_secrets(
    args: &FleetArgs,
    fleet: &Fleet,
    store: &Store,
) -> anyhow::Result<Vec<String>> {
    let now = mesh_state::read(store).await?;
    let listed = |node: &Name| fleet.nodes.iter().any(|n| &n.name.value == node);
    let mut missing = Vec::new();
    for name in now.credentials.keys() {
        // A node the file does not list enrolled itself: its host made its
        // own key and its modules' keys, which never leave that node. The
        // controller's key is the genesis's. Advising a re-mint of either
        // would rotate a live key for nothing.
        let held_elsewhere = name == mesh_core::authority::CONTROLLER
            || now.records.nodes.iter().any(|n| {
                !listed(n)
                    && (&principal::host(n) == name || name.starts_with(&format!("module_{n}_")))
            });
        if held_elsewhere || secrets::target(&args.secrets_dir(), name).is_file() {
            continue;
        }
        missing.push(name.clone());
    }
    Ok(missing)
}

impl Outcome {
    fn print(&self, args: &FleetArgs, fleet: &Fleet) -> Result<(), output::StdoutError> {
        let mut out = output::Stdout::lock();
        let a = &self.applied;
        let count = |added: usize, total: usize, what: &str| {
            format!(
                "{added} {what}{} added, {} already recorded",
                plural(added),
                total.saturating_sub(added)
            )
        };
        let nodes: BTreeSet<&Name> = fleet
            .nodes
            .iter()
            .map(|n| &n.name.value)
            .chain(fleet.tokens.iter().map(|t| &t.value))
            .collect();
        let assignments: usize = fleet.nodes.iter().map(|n| n.modules.len()).sum();
        out.line(format_args!(
            "fleet loaded: {}; {}; {}; {} token{} issued; {} credential{} minted; {} secret{} written to {}",
            count(a.nodes_added.len(), nodes.len(), "node"),
            count(a.assignments_added, assignments, "assignment"),
            count(a.persons_added.len(), fleet.persons.len(), "person"),
            a.tokens_issued,
            plural(a.tokens_issued),
            a.credentials_recorded,
            plural(a.credentials_recorded),
            self.secrets_placed,
            plural(self.secrets_placed),
            args.secrets_dir().display()
        ))?;
        if args.prune {
            for (node, f) in &a.nodes_pruned {
                let creds = if f.credentials.is_empty() {
                    String::new()
                } else {
                    format!(" with the credentials of {}", f.credentials.join(", "))
                };
                out.line(format_args!("pruned: node {node}{creds}"))?;
            }
            for (n, m) in &a.assignments_pruned {
                out.line(format_args!("pruned: assignment {m} on {n}"))?;
            }
            for p in &a.persons_pruned {
                out.line(format_args!("pruned: person {p}"))?;
            }
        } else if !self.unnamed.is_empty() {
            out.line(format_args!(
                "kept, though {} does not name them: {} (--prune forgets them)",
                args.file.display(),
                self.unnamed.join(", ")
            ))?;
        }
        out.flush()?;
        for m in &self.missing {
            output::note(format_args!(
                "warning: {m} has a credential recorded but no secret in {}; nobody can connect as {m}\n  = help: {}",
                args.secrets_dir().display(),
                remint_command(args, m)
            ));
        }
        Ok(())
    }
}

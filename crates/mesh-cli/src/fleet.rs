//! `mesh fleet load FILE`: records a fleet described in one file — nodes and
//! what runs on them, persons, enrolment tokens — registers the catalogue's
//! manifests, and mints a credential for every principal that has none.
//! Loading the same file again changes nothing and mints nothing.
//!
//! ```toml
//! [[node]]
//! name = "n1"
//! modules = ["git-server", "audit-log"]
//!
//! [[person]]
//! name = "alice"
//! tools = ["*"]                 # or ["seat:git.clone", "audit-log.search"]
//!
//! [[token]]
//! node = "n4"                   # a node to be enrolled; its token is issued here
//! ```
//!
//! Minted secrets are shown once: each is written to `<secrets-dir>/<principal>`
//! (mode 0600), never printed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use mesh_core::authority::PrincipalKind;
use mesh_core::catalogue::Catalogue;
use mesh_core::names::Name;
use mesh_core::records::{ControllerSpec, ToolAccess};
use mesh_store::{Secret, Store, principal};
use serde::Deserialize;

use crate::authority::{self, Loaded, Sources};
use crate::check::plural;
use crate::files;
use mesh_state::CatalogueCheck;

/// How long an enrolment token issued by a fleet file stays live.
const TOKEN_TTL: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug, Args)]
pub struct FleetArgs {
    /// The fleet file.
    pub file: PathBuf,
    #[command(flatten)]
    pub sources: Sources,
    /// Where minted secrets are written, one file per principal.
    #[arg(long, default_value = ".mesh/secrets")]
    pub secrets_dir: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fleet {
    #[serde(default)]
    pub node: Vec<FleetNode>,
    #[serde(default)]
    pub person: Vec<FleetPerson>,
    #[serde(default)]
    pub token: Vec<FleetToken>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetNode {
    pub name: Name,
    #[serde(default)]
    pub modules: Vec<Name>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetPerson {
    pub name: Name,
    pub tools: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetToken {
    pub node: Name,
}

/// Parses a fleet file; errors carry the file, line and column.
pub fn parse(path: &Path, text: &str) -> anyhow::Result<Fleet> {
    toml::from_str(text).map_err(|e| {
        let at = e
            .span()
            .map(|s| {
                let before = &text[..s.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                format!("{}:{line}:{col}", path.display())
            })
            .unwrap_or_else(|| path.display().to_string());
        anyhow::anyhow!("{at}: {}", e.message())
    })
}

pub fn run(args: &FleetArgs) -> anyhow::Result<ExitCode> {
    crate::block_on(load_fleet(args))?
}

/// A fleet file checked against the catalogue, ready to record.
struct Checked {
    /// person → the grant to record
    grants: Vec<(Name, ToolAccess)>,
}

/// Checks the whole fleet file before anything is written, so a bad file
/// leaves the store as it was.
fn check_fleet(path: &Path, fleet: &Fleet, catalogue: &Catalogue) -> anyhow::Result<Checked> {
    for node in &fleet.node {
        for module in &node.modules {
            if catalogue.module(module).is_none() {
                bail!(
                    "{}: node {} runs module {module}, which is not in the catalogue",
                    path.display(),
                    node.name
                );
            }
        }
    }
    let grants = fleet
        .person
        .iter()
        .map(|p| {
            ToolAccess::from_written(&p.tools)
                .map(|g| (p.name.clone(), g))
                .map_err(|e| anyhow::anyhow!("{}: person {}: {e}", path.display(), p.name))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(Checked { grants })
}

async fn load_fleet(args: &FleetArgs) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let fleet = parse(&args.file, &text)?;
    let report = authority::checked_catalogue(&args.sources.catalogue, "fix them first")?;
    let checked = check_fleet(&args.file, &fleet, &report.catalogue)?;
    // Before anything is minted: a secret whose file cannot be written is lost,
    // since the store keeps only its hash.
    files::private_dir(&args.secrets_dir)?;

    let store = authority::open_store(&args.sources.store).await?;
    let loaded = record(args, &fleet, checked, report, &store).await;
    store.close().await;
    let (written, minted) = loaded?;
    println!(
        "fleet loaded: {} node{}, {} person{}, {} token{} issued, {} credential{} minted (secrets in {})",
        fleet.node.len(),
        plural(fleet.node.len()),
        fleet.person.len(),
        plural(fleet.person.len()),
        written,
        plural(written),
        minted,
        plural(minted),
        args.secrets_dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Records the checked fleet and mints what is missing; returns (tokens
/// issued, credentials minted).
async fn record(
    args: &FleetArgs,
    fleet: &Fleet,
    checked: Checked,
    report: CatalogueCheck,
    store: &Store,
) -> anyhow::Result<(usize, usize)> {
    for m in report.catalogue.manifests() {
        let source = report.sources.get(&m.path).cloned().unwrap_or_default();
        store.register_module(&m.name.value, &source).await?;
    }
    for node in &fleet.node {
        if store.node(&node.name).await?.is_none() {
            store.add_node(&node.name, &[]).await?;
        }
        for module in &node.modules {
            store.assign(&node.name, module).await?;
        }
    }
    for (person, grant) in &checked.grants {
        store.put_person(person, grant).await?;
    }
    let live: Vec<Name> = store
        .live_tokens()
        .await?
        .into_iter()
        .map(|t| t.node)
        .collect();
    let mut written = 0;
    for token in &fleet.token {
        if store.node(&token.node).await?.is_none() {
            store.add_node(&token.node, &[]).await?;
        }
        if !live.contains(&token.node) {
            let issued = store.issue_token(&token.node, TOKEN_TTL).await?;
            write_secret(
                &args.secrets_dir,
                &principal::enrolment(&token.node),
                &issued.secret,
            )?;
            written += 1;
        }
    }

    // Mint for every derived principal that has no credential yet.
    let (records, hashes) = authority::read_records(store).await?;
    let loaded = Loaded {
        catalogue: report.catalogue,
        records,
        hashes,
        controller: ControllerSpec::default(),
    };
    let principals = authority::derive(&loaded)?;
    // A node listed only under [[token]] makes its host credential when it
    // enrols, not here.
    let to_mint = mesh_core::authority::credentials_to_mint(
        &principals,
        |name| loaded.hashes.contains_key(name),
        |node| !fleet.node.iter().any(|n| &n.name == node),
    );
    let mut minted = 0;
    for p in to_mint {
        let secret = match &p.kind {
            PrincipalKind::Controller => store.mint_controller_credential().await?,
            PrincipalKind::Host { node } => store.mint_host_credential(node).await?,
            PrincipalKind::Module { node, module } => {
                store.mint_module_credential(node, module).await?
            }
            PrincipalKind::Person { person } => store.mint_person_credential(person).await?,
            PrincipalKind::Enrolment { node } => {
                bail!("no credential is minted for the enrolment of {node}: its token is")
            }
        };
        write_secret(&args.secrets_dir, &p.name, &secret)?;
        minted += 1;
    }
    Ok((written, minted))
}

/// Writes one secret, readable by its owner only.
fn write_secret(dir: &Path, principal: &str, secret: &Secret) -> anyhow::Result<()> {
    files::write_private(&dir.join(principal), secret.expose().as_bytes())
}

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
use mesh_core::manifest::refs::parse_tool_ref;
use mesh_core::names::Name;
use mesh_store::{Secret, Store, ToolGrant};
use serde::Deserialize;

use crate::authority::{Sources, derive, load};
use crate::check;

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
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(load_fleet(args))
}

async fn load_fleet(args: &FleetArgs) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let fleet = parse(&args.file, &text)?;

    let report = check::check_paths(&args.sources.catalogue)?;
    if report.errors() > 0 {
        check::print_text(&report)?;
        bail!(
            "the catalogue has {} error(s); fix them first",
            report.errors()
        );
    }
    let store = Store::open(&args.sources.store).await.with_context(|| {
        format!(
            "opening the store {}",
            mesh_store::redact_url(&args.sources.store)
        )
    })?;

    for m in report.catalogue.manifests() {
        let source = report.sources.get(&m.path).cloned().unwrap_or_default();
        store.register_module(&m.name.value, &source).await?;
    }
    for node in &fleet.node {
        if store.node(&node.name).await?.is_none() {
            store.add_node(&node.name, &[]).await?;
        }
        for module in &node.modules {
            if report.catalogue.module(module).is_none() {
                bail!(
                    "{}: node {} runs module {module}, which is not in the catalogue",
                    args.file.display(),
                    node.name
                );
            }
            store.assign(&node.name, module).await?;
        }
    }
    for person in &fleet.person {
        let grant = if person.tools.iter().any(|t| t == "*") {
            ToolGrant::All
        } else {
            for t in &person.tools {
                parse_tool_ref(t).map_err(|e| {
                    anyhow::anyhow!(
                        "{}: person {}: tool {t:?}: {}",
                        args.file.display(),
                        person.name,
                        e.message
                    )
                })?;
            }
            ToolGrant::Tools(person.tools.clone())
        };
        store.put_person(&person.name, &grant).await?;
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
            let name = PrincipalKind::Enrolment {
                node: token.node.clone(),
            }
            .principal_name();
            write_secret(&args.secrets_dir, &name, &issued.secret)?;
            written += 1;
        }
    }

    // Mint for every derived principal that has no credential yet.
    let loaded = load(&args.sources).await?;
    let mut minted = 0;
    for p in derive(&loaded)? {
        if loaded.hashes.contains_key(&p.name) {
            continue;
        }
        let secret = match &p.kind {
            PrincipalKind::Controller => store.mint_controller_credential().await?,
            // A node listed only under [[token]] gets its host credential at
            // enrolment, not here.
            PrincipalKind::Host { node } if fleet.node.iter().any(|n| &n.name == node) => {
                store.mint_host_credential(node).await?
            }
            PrincipalKind::Host { .. } => continue,
            PrincipalKind::Module { node, module } => {
                store.mint_module_credential(node, module).await?
            }
            PrincipalKind::Person { person } => store.mint_person_credential(person).await?,
            // Its password is the token's secret, issued above.
            PrincipalKind::Enrolment { .. } => continue,
        };
        write_secret(&args.secrets_dir, &p.name, &secret)?;
        minted += 1;
    }
    store.close().await;
    println!(
        "fleet loaded: {}, {}, {} issued, {} minted (secrets in {})",
        count(fleet.node.len(), "node"),
        count(fleet.person.len(), "person"),
        count(written, "token"),
        count(minted, "credential"),
        args.secrets_dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn count(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// Writes one secret, readable by its owner only.
fn write_secret(dir: &Path, principal: &str, secret: &Secret) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(principal);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(secret.expose().as_bytes())?;
    Ok(())
}

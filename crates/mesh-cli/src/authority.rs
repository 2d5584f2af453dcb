//! `mesh authority explain|compose`: every principal's permissions derived
//! from the catalogue and the store's records, each with what caused it; and
//! the users file the broker includes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use mesh_core::authority::{
    self, ControllerSpec, Grant, PersonRecord, Principal, Records, ToolAccess,
};
use mesh_core::catalogue::Catalogue;
use mesh_core::jetstream::ConsumerSpec;
use mesh_core::manifest::refs::parse_tool_ref;
use mesh_core::users_file;
use mesh_store::{Store, ToolGrant};

use crate::check;

#[derive(Debug, Args)]
pub struct AuthorityArgs {
    #[command(subcommand)]
    pub command: AuthorityCommand,
}

#[derive(Debug, Subcommand)]
pub enum AuthorityCommand {
    /// Every permission a principal gets, each with what caused it.
    Explain(ExplainArgs),
    /// Write the users file (bus users and their permissions) for the broker.
    Compose(ComposeArgs),
}

/// Where the records come from.
#[derive(Debug, Args)]
pub struct Sources {
    /// The catalogue: manifests (directories or files), as for `mesh check`.
    #[arg(long = "catalogue", required = true)]
    pub catalogue: Vec<PathBuf>,
    /// The store holding the mesh's records (`sqlite://PATH` or `postgres://...`).
    // The URL may carry the database password: `--help` must not print it.
    #[arg(long, env = "MESH_STORE", hide_env_values = true, default_value = mesh_store::DEFAULT_URL)]
    pub store: String,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The principal's name (`controller`, `host_<node>`, `module_<node>_<module>`,
    /// `enrol_<node>`, `person_<name>`).
    pub principal: String,
    #[command(flatten)]
    pub sources: Sources,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct ComposeArgs {
    #[command(flatten)]
    pub sources: Sources,
    /// Where to write the users file; standard output when absent.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// The catalogue and the records, read fresh: authority is never stored.
pub struct Loaded {
    pub catalogue: Catalogue,
    pub records: Records,
    /// principal → bcrypt hash
    pub hashes: BTreeMap<String, String>,
}

/// Reads the catalogue (refusing one that does not check clean) and the
/// store's records and credential hashes.
pub async fn load(sources: &Sources) -> anyhow::Result<Loaded> {
    let report = check::check_paths(&sources.catalogue)?;
    if report.errors() > 0 {
        check::print_text(&report)?;
        bail!(
            "the catalogue has {} error(s); authority is derived only from a catalogue that checks clean",
            report.errors()
        );
    }
    let catalogue = report.catalogue;
    let store = Store::open(&sources.store).await.with_context(|| {
        format!(
            "opening the store {}",
            mesh_store::redact_url(&sources.store)
        )
    })?;
    let mut records = Records::default();
    for node in store.nodes().await? {
        records.nodes.push(node.name);
    }
    for a in store.assignments().await? {
        records.assignments.push((a.node, a.module));
    }
    let mut hashes = BTreeMap::new();
    for t in store.live_tokens().await? {
        hashes.insert(
            authority::PrincipalKind::Enrolment {
                node: t.node.clone(),
            }
            .principal_name(),
            t.bus_hash,
        );
        records.live_tokens.push(t.node);
    }
    for p in store.persons().await? {
        let tools = match p.tools {
            ToolGrant::All => ToolAccess::All,
            ToolGrant::Tools(list) => ToolAccess::Only(
                list.iter()
                    .map(|t| {
                        parse_tool_ref(t).map_err(|e| {
                            anyhow::anyhow!("person {}: tool {t:?}: {}", p.name, e.message)
                        })
                    })
                    .collect::<anyhow::Result<_>>()?,
            ),
        };
        records.persons.push(PersonRecord {
            name: p.name,
            tools,
        });
    }
    for c in store.credentials().await? {
        hashes.insert(c.principal, c.bcrypt_hash);
    }
    store.close().await;
    Ok(Loaded {
        catalogue,
        records,
        hashes,
    })
}

pub fn derive(loaded: &Loaded) -> anyhow::Result<Vec<Principal>> {
    Ok(authority::derive(
        &loaded.catalogue,
        &loaded.records,
        &ControllerSpec::default(),
    )?)
}

pub fn run(args: &AuthorityArgs) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    match &args.command {
        AuthorityCommand::Explain(a) => rt.block_on(explain(a)),
        AuthorityCommand::Compose(a) => rt.block_on(compose(a)),
    }
}

async fn explain(args: &ExplainArgs) -> anyhow::Result<ExitCode> {
    let loaded = load(&args.sources).await?;
    let principals = derive(&loaded)?;
    let Some(p) = principals.iter().find(|p| p.name == args.principal) else {
        let names: Vec<&str> = principals.iter().map(|p| p.name.as_str()).collect();
        bail!(
            "no principal {:?} in this mesh; the principals are: {}",
            args.principal,
            names.join(", ")
        );
    };
    let has_credential = loaded.hashes.contains_key(&p.name);
    let objects = mesh_core::jetstream::derive(
        &loaded.catalogue,
        &loaded.records,
        &ControllerSpec::default(),
    )?;
    // The consumers delivering to this principal: what it hears, and through which filters.
    let consumers: Vec<&ConsumerSpec> = objects
        .consumers
        .iter()
        .filter(|c| {
            p.permissions
                .subscribe_subjects()
                .contains(c.deliver_subject.as_str())
        })
        .collect();
    match args.format {
        Format::Json => {
            let mut v = serde_json::to_value(p)?;
            v["has_credential"] = serde_json::Value::Bool(has_credential);
            v["consumers"] = serde_json::to_value(&consumers)?;
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        Format::Text => print!("{}", render(p, has_credential, &consumers)),
    }
    Ok(ExitCode::SUCCESS)
}

/// The text of `mesh authority explain`.
pub fn render(p: &Principal, has_credential: bool, consumers: &[&ConsumerSpec]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "principal {} ({})", p.name, p.source);
    let _ = writeln!(
        out,
        "credential: {}",
        if has_credential {
            "recorded"
        } else {
            "none: left out of the users file until one is minted"
        }
    );
    let section = |out: &mut String, title: &str, grants: &[Grant]| {
        let _ = writeln!(out, "{title}:");
        if grants.is_empty() {
            let _ = writeln!(out, "  (nothing)");
        }
        let mut by_subject: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for g in grants {
            by_subject
                .entry(&g.subject)
                .or_default()
                .push(g.cause.to_string());
        }
        for (subject, causes) in by_subject {
            let _ = writeln!(out, "  {subject}");
            for c in causes {
                let _ = writeln!(out, "      because {c}");
            }
        }
    };
    section(&mut out, "publish", &p.permissions.publish);
    section(&mut out, "subscribe", &p.permissions.subscribe);
    for c in consumers {
        let _ = writeln!(
            out,
            "consumer {} on {} delivers to {}{}:",
            c.name,
            c.stream,
            c.deliver_subject,
            c.deliver_group
                .as_deref()
                .map(|g| format!(" (group {g})"))
                .unwrap_or_default()
        );
        for f in &c.filter_subjects {
            let _ = writeln!(out, "  {f}");
        }
        if c.filter_subjects.is_empty() {
            let _ = writeln!(out, "  (every subject of {})", c.stream);
        }
    }
    match &p.permissions.allow_responses {
        Some(c) => {
            let _ = writeln!(out, "allow_responses: yes, because {c}");
        }
        None => {
            let _ = writeln!(out, "allow_responses: no");
        }
    }
    out
}

async fn compose(args: &ComposeArgs) -> anyhow::Result<ExitCode> {
    let loaded = load(&args.sources).await?;
    let principals = derive(&loaded)?;
    let file = users_file::compose(&principals, &loaded.hashes)?;
    match &args.out {
        Some(path) => {
            write_private(path, &file.text)?;
            eprintln!(
                "wrote {} ({} users, {} bytes)",
                path.display(),
                principals.len() - file.omitted.len(),
                file.text.len()
            );
        }
        None => print!("{}", file.text),
    }
    if !file.omitted.is_empty() {
        eprintln!(
            "left out (no credential recorded; mint one to admit them): {}",
            file.omitted.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes the file readable by its owner only: it holds every user's hash.
fn write_private(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    // Renamed into place: a watcher never reads a half-written file.
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

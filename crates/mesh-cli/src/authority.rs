//! `mesh authority explain|compose`: every principal's permissions derived
//! from the catalogue and the store's records, each with what caused it; and
//! the users file the broker includes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use mesh_core::authority::amqp::{AmqpPermissions, Rendered};
use mesh_core::authority::{self, Grant, Principal};
use mesh_core::catalogue::Catalogue;
use mesh_core::jetstream::ConsumerSpec;
use mesh_core::records::{ControllerSpec, Records};
use mesh_core::users_file::{self, MINT_REMEDY, UserCredential, listed};
use mesh_state::CatalogueCheck;
use mesh_store::Store;

use crate::files::{self, OutPath};
use crate::state::MeshArgs;
use crate::{check, output};

#[derive(Debug, Args)]
pub struct AuthorityArgs {
    #[command(subcommand)]
    pub command: AuthorityCommand,
}

#[derive(Debug, Subcommand)]
pub enum AuthorityCommand {
    /// Every permission a principal gets, each with what caused it.
    #[command(after_help = "Examples:
  mesh authority explain host_n1
  mesh authority explain person_bob --catalogue examples/catalogue
  mesh authority explain module_n1_audit-log --catalogue examples/catalogue --format json")]
    Explain(ExplainArgs),
    /// Write the users file (bus users and their permissions) for the broker.
    #[command(after_help = "Examples:
  mesh authority compose --catalogue examples/catalogue --out broker/users.conf
  mesh authority compose --catalogue examples/catalogue --out - | less")]
    Compose(ComposeArgs),
}

/// Where the records come from.
#[derive(Debug, Clone, Args)]
pub struct Sources {
    /// The catalogue: manifests (directories or files), as for `mesh
    /// check`; by default the registered one (what the controller derives
    /// from).
    #[arg(long = "catalogue")]
    pub catalogue: Vec<PathBuf>,
    /// The mesh whose store holds the records.
    #[command(flatten)]
    pub mesh: MeshArgs,
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
    /// Where to write the users file (a regular file, replaced whole, mode
    /// 0600); `-` or absent: standard output.
    #[arg(long, value_name = "FILE", value_parser = out_path())]
    pub out: Option<OutPath>,
}

/// Parses `--out` as a path (any bytes, as a path may hold) or `-`.
fn out_path() -> impl clap::builder::TypedValueParser<Value = OutPath> {
    use clap::builder::TypedValueParser as _;
    clap::builder::OsStringValueParser::new().try_map(|s| {
        if s.is_empty() {
            Err("an empty path; give a file's path, or `-` for standard output")
        } else {
            Ok(OutPath::from(s.as_os_str()))
        }
    })
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
    /// principal → the credential the users file names it by
    pub credentials: BTreeMap<String, UserCredential>,
    /// What the controller follows and submits; principals and objects are
    /// derived from this one value so they cannot disagree.
    pub controller: ControllerSpec,
}

/// Reads and checks the catalogue; one that does not check clean is refused,
/// its diagnostics printed, with `refusal` saying what it blocks.
pub fn checked_catalogue(paths: &[PathBuf], refusal: &str) -> anyhow::Result<CatalogueCheck> {
    let report = mesh_state::load(paths)?;
    refuse_errors(&report, paths, refusal)?;
    Ok(report)
}

/// Refuses a catalogue read from `paths` with errors, printing them, with
/// `refusal` saying what it blocks.
pub fn refuse_errors(
    report: &CatalogueCheck,
    paths: &[PathBuf],
    refusal: &str,
) -> anyhow::Result<()> {
    if report.errors() > 0 {
        check::print_text(report)?;
        bail!(
            "the catalogue has {} error{} (printed above; `mesh check {}` shows them again); {refusal}",
            mesh_core::diagnostic::thousands(report.errors()),
            check::plural(report.errors()),
            shown(paths)
        );
    }
    Ok(())
}

/// Paths as an operator typed them, space-separated.
pub fn shown(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Opens (creating or bringing forward) the store; the URL in the error has
/// its password removed.
pub async fn open_store(url: &str) -> anyhow::Result<Store> {
    opened(url, Store::open(url).await)
}

/// Opens an existing store to read it: nothing is created or migrated.
pub async fn open_existing_store(url: &str) -> anyhow::Result<Store> {
    opened(url, Store::open_existing(url).await)
}

/// Reads from the mesh's existing store with `read` and closes it again,
/// whatever `read` returned (a listing's whole use of the store).
pub fn read_store<T, E>(
    mesh: &crate::state::MeshArgs,
    read: impl AsyncFnOnce(&Store) -> Result<T, E>,
) -> anyhow::Result<T>
where
    anyhow::Error: From<E>,
{
    crate::block_on(async {
        let store = open_existing_store(&mesh.store_url()?).await?;
        let got = read(&store).await;
        store.close().await;
        Ok(got?)
    })?
}

/// The module a listing is narrowed to, if one is named.
pub fn module_filter(module: Option<&str>) -> anyhow::Result<Option<mesh_core::names::Name>> {
    use anyhow::Context as _;
    module
        .map(|m| {
            mesh_core::names::Name::new(m).with_context(|| format!("{m:?} is not a module name"))
        })
        .transpose()
}

/// Opens an existing store to change its records, bringing an older one
/// forward; none at `url` is an error, and nothing is created: a record
/// written from the wrong directory must not start an empty mesh of its own.
pub async fn open_store_to_write(url: &str) -> anyhow::Result<Store> {
    match Store::open_existing(url).await {
        Ok(s) => s.close().await,
        Err(mesh_store::StoreError::SchemaTooOld { .. }) => {}
        Err(e) => return opened(url, Err(e)),
    }
    open_store(url).await
}

fn opened(url: &str, r: Result<Store, mesh_store::StoreError>) -> anyhow::Result<Store> {
    use mesh_store::StoreError::{BadUrl, Missing};
    match r {
        Ok(s) => Ok(s),
        Err(Missing { url }) => Err(anyhow::anyhow!(
            "no mesh store at {url}; `mesh init` or `mesh up` makes a mesh and its store (`mesh fleet load FILE --catalogue DIR` records a fleet into a new one), or point at an existing mesh with --dir DIR, MESH_DIR=DIR or --store URL"
        )),
        // It names the URL already; saying it twice says nothing more.
        Err(e @ BadUrl { .. }) => Err(e.into()),
        Err(e) => {
            Err(e).with_context(|| format!("opening the store {}", mesh_store::redact_url(url)))
        }
    }
}

/// The records authority is derived from, and every credential hash by
/// principal, read fresh from the store.
pub async fn read_records(
    store: &Store,
) -> anyhow::Result<(Records, BTreeMap<String, UserCredential>)> {
    let s = mesh_state::read(store).await?;
    Ok((s.records, s.credentials))
}

/// Reads the catalogue (refusing one that does not check clean) and the
/// store's records and credentials.
pub async fn load(sources: &Sources) -> anyhow::Result<Loaded> {
    let given = if sources.catalogue.is_empty() {
        None
    } else {
        Some(
            checked_catalogue(
                &sources.catalogue,
                "authority is derived only from a catalogue that checks clean",
            )?
            .catalogue,
        )
    };
    let store = open_existing_store(&sources.mesh.store_url()?).await?;
    let read = async {
        let catalogue = match given {
            Some(c) => c,
            None => mesh_state::registered::catalogue(&store).await?,
        };
        let (records, credentials) = read_records(&store).await?;
        anyhow::Ok((catalogue, records, credentials))
    }
    .await;
    store.close().await;
    let (catalogue, records, credentials) = read?;
    Ok(Loaded {
        catalogue,
        records,
        credentials,
        controller: ControllerSpec::default(),
    })
}

pub fn derive(loaded: &Loaded) -> anyhow::Result<Vec<Principal>> {
    Ok(authority::derive(
        &loaded.catalogue,
        &loaded.records,
        &loaded.controller,
    )?)
}

pub fn run(args: &AuthorityArgs) -> anyhow::Result<ExitCode> {
    match &args.command {
        AuthorityCommand::Explain(a) => crate::block_on(explain(a))?,
        AuthorityCommand::Compose(a) => crate::block_on(compose(a))?,
    }
}

async fn explain(args: &ExplainArgs) -> anyhow::Result<ExitCode> {
    let loaded = load(&args.sources).await?;
    let principals = derive(&loaded)?;
    let Some(p) = principals.iter().find(|p| p.name == args.principal) else {
        bail!("{}", unknown_principal(&args.principal, &principals));
    };
    let has_credential = loaded.credentials.contains_key(&p.name);
    let objects =
        mesh_core::jetstream::derive(&loaded.catalogue, &loaded.records, &loaded.controller)?;
    let consumers = p.consumers(&objects);
    let amqp = mesh_core::authority::amqp::render(p, &objects);
    match args.format {
        Format::Json => {
            let mut v = serde_json::to_value(p)?;
            v["has_credential"] = serde_json::Value::Bool(has_credential);
            v["consumers"] = serde_json::to_value(&consumers)?;
            v["amqp"] = serde_json::to_value(&amqp)?;
            output::print(&format!("{}\n", serde_json::to_string_pretty(&v)?))?;
        }
        Format::Text => {
            let mut text = render(p, has_credential, &consumers);
            text.push_str(&render_amqp(&amqp));
            output::print(&text)?
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The prefixes of the principal naming scheme, after `controller`.
const SCHEME: [&str; 4] = ["host_", "module_", "enrol_", "person_"];

/// At most this many names are suggested, whatever the mesh's size.
const SUGGESTIONS: usize = 5;

/// Why `name` names no principal, in a bounded message: the principals it
/// most likely meant (`bob` → `person_bob`, a typo → the names a few edits
/// away) and the naming scheme.
pub fn unknown_principal(name: &str, principals: &[Principal]) -> String {
    let names = || principals.iter().map(|p| p.name.as_str());
    let mut close: Vec<&str> = SCHEME
        .iter()
        .filter_map(|prefix| names().find(|n| n.strip_prefix(prefix) == Some(name)))
        .collect();
    // Only when no prefix alone explains it: a typo, in the name as written
    // or under a prefix it left out (`node12x` → `host_node12`).
    if close.is_empty() {
        let forms = std::iter::once(name.to_string()).chain(SCHEME.map(|p| format!("{p}{name}")));
        for form in forms {
            for n in mesh_core::diagnostic::closest(&form, names(), SUGGESTIONS) {
                if !close.contains(&n) && close.len() < SUGGESTIONS {
                    close.push(n);
                }
            }
        }
    }
    let meant = match close.as_slice() {
        [] => String::new(),
        [one] => format!("; did you mean {one}?"),
        more => format!("; did you mean one of {}?", more.join(", ")),
    };
    format!(
        "no principal \"{}\" in this mesh{meant} (principals are named controller, \
         host_<node>, module_<node>_<module>, enrol_<node> and person_<person>; \
         `mesh fleet load FILE` records nodes, assignments, persons and tokens)",
        mesh_core::diagnostic::clip(name, 100)
    )
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
            "recorded".to_string()
        } else {
            format!("none: left out of the users file until one is minted; {MINT_REMEDY}")
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

/// The same grants as a RabbitMQ user's permissions (a mesh on AMQP).
pub fn render_amqp(a: &AmqpPermissions) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "on AMQP (RabbitMQ user {}):", a.user);
    for (what, regex) in [
        ("configure", &a.configure),
        ("write", &a.write),
        ("read", &a.read),
        ("topic write", &a.topic_write),
        ("topic read", &a.topic_read),
    ] {
        let on = if what.starts_with("topic") {
            format!(" (exchange {})", mesh_core::authority::amqp::EXCHANGE)
        } else {
            String::new()
        };
        let _ = writeln!(out, "  {what}{on}: {regex}");
    }
    for r in &a.renderings {
        let became = match &r.rendered {
            Rendered::TopicWrite { regex } => format!("topic write {regex}"),
            Rendered::TopicRead { regex } => format!("topic read {regex}"),
            Rendered::ReadQueue { queue } => format!("read queue {queue}"),
            Rendered::NatsOnly { why } => format!("nothing: {why}"),
        };
        let _ = writeln!(out, "  {} {}  ->  {became}", r.grant, r.subject);
    }
    out
}

async fn compose(args: &ComposeArgs) -> anyhow::Result<ExitCode> {
    let out = args.out.clone().unwrap_or(OutPath::Stdout);
    // Refused before anything is read: a wrong --out is the operator's to
    // fix, and the write itself checks again.
    if let OutPath::File(path) = &out {
        files::refuse_special(path).map_err(out_refusal)?;
    }
    let loaded = load(&args.sources).await?;
    let principals = derive(&loaded)?;
    let file = users_file::compose(&principals, &loaded.credentials)?;
    match &out {
        OutPath::File(path) => {
            // Owner-only: it holds every user's hash.
            files::write_private(path, file.text.as_bytes()).map_err(out_refusal)?;
            output::note(format_args!(
                "wrote {} ({} users, {} bytes)",
                path.display(),
                file.users,
                file.text.len()
            ));
        }
        OutPath::Stdout => output::print(&file.text)?,
    }
    if !file.omitted.is_empty() {
        output::note(format_args!(
            "left out (no credential recorded): {}; {MINT_REMEDY}",
            listed(&file.omitted)
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// A `--out` that is not a regular file, with what to write instead.
fn out_refusal(e: anyhow::Error) -> anyhow::Error {
    match e.downcast_ref::<files::NotRegular>() {
        Some(n) => anyhow::anyhow!(
            "{n}; give the path of a regular file, or `--out -` to write the users file to standard output"
        ),
        None => e,
    }
}

//! A module's manifest (`mesh.toml`, DESIGN §3): the model and its strict
//! parser.
//!
//! [`parse`] refuses anything it does not understand — an unknown field, a
//! wrong type, a bad name, an emitted event named as another module's, a
//! malformed placeholder — with the file, line and column, and keeps the
//! position of everything later code must cite (each event emitted or
//! consumed, each seat declared, held or used, each tool served or used), so
//! `mesh authority explain` can name the manifest line behind a permission.
//!
//! Format (every field below; nothing else is accepted):
//!
//! ```toml
//! [module]
//! name = "audit-log"              # required; a Name
//! description = "..."             # optional
//! repository = "file:///srv/git/audit-log"   # optional: where `mesh build` fetches it (a git URL)
//!
//! [run]                           # optional: how a host runs the module
//! command = ["audit-log", "--data", "${file:data}"]   # required, non-empty
//! env = { DATABASE_URL = "${seat:mesh-store:5432}" }  # NAME = value
//! driver = "process"              # default "process", the only driver today
//! secrets-in-environment = "why"  # required when an env value holds ${secret:..}
//!
//! [build]                         # optional
//! command = ["cargo", "build", "--release"]           # required, non-empty
//! artifacts = { audit-log = "target/release/audit-log" }  # Name = relative path
//!
//! [[seat]]                        # a seat this module declares (any number)
//! name = "packet-filter"          # required
//! scope = "node"                  # required: "node" or "mesh"
//! protocol = ""                   # required; "" makes the seat a marker
//! accepts = ["rule-change"]       # work kinds it takes
//! emits = ["applied"]             # events its holder announces
//! tools = ["list-rules"]          # requests its holder answers
//!
//! [holds]
//! seats = ["packet-filter"]       # claims; existence is checked by the catalogue
//!
//! [events]
//! emits = ["entry-written"]       # local names only
//! consumes = ["git-server.pushed", "seat:mesh-build-machine.built", "watcher.**"]
//!
//! [tools]
//! serves = ["search"]             # local names
//! uses = ["seat:git.clone", "audit-log.search"]
//!
//! [uses]
//! seats = ["mesh-build-machine"]  # seats this module submits work to
//!
//! [[file]]                        # a file the mesh writes for this module
//! name = "bus-users"              # a Name; `${file:bus-users}` is its path
//! path = "accounts.conf"          # relative to the module's directory, no `..`
//!
//! [health]                        # optional: how its host tells it is well
//! http = "http://127.0.0.1:8080/healthz"  # one of: http (2xx), tcp = "HOST:PORT", exec = [argv]
//! interval = "2s"                 # default 2s
//! timeout = "1s"                  # default 1s; at most the interval
//! healthy_after = "2s"            # passing this long before `healthy`; default 2s
//! ```
//!
//! Placeholders (`${seat:NAME:PORT}`, `${secret:NAME}`, `${file:NAME}`) are
//! read in `[run] command` and `[run] env` values, seats and files in
//! `[health]`; see [`crate::placeholders`].

mod decode;
mod health_section;
mod parser;
pub mod refs;
mod run_section;
pub(crate) mod toml_access;

use std::fmt;

use crate::diagnostic::{Diagnostic, Kind, Location, Pos};
use crate::names::Name;
use crate::placeholders::{Placeholder, Template};

pub use parser::{parse, parse_bytes};
pub use refs::{EventRef, Target, ToolRef};

/// The name of the role whose holder is the bus; only its holder may ask for
/// the `bus-users` file.
pub const BROKER_ROLE: &str = "mesh-broker";
/// The file holding every bus user's password hash.
pub const BUS_USERS_FILE: &str = "bus-users";

/// A value and where it was written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Located<T> {
    pub value: T,
    pub pos: Pos,
}

impl<T> Located<T> {
    pub fn new(value: T, pos: Pos) -> Self {
        Located { value, pos }
    }
}

impl<T: fmt::Display> fmt::Display for Located<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.value.fmt(f)
    }
}

/// A parsed `mesh.toml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The file it was read from, as given to [`parse`].
    pub path: String,
    /// `[module] name`.
    pub name: Located<Name>,
    pub description: Option<Located<String>>,
    /// `[module] repository`: the git URL a build machine fetches.
    pub repository: Option<Located<String>>,
    pub run: Option<Run>,
    pub build: Option<Build>,
    /// `[[seat]]`: seats this module declares.
    pub seats: Vec<SeatDecl>,
    /// `[holds] seats`: seats this module claims (as written: aliases are
    /// resolved by the catalogue).
    pub holds: Vec<Located<Name>>,
    /// `[events] emits`: local event names.
    pub emits: Vec<Located<Name>>,
    /// `[events] consumes`.
    pub consumes: Vec<Located<EventRef>>,
    /// `[tools] serves`: local tool names.
    pub serves: Vec<Located<Name>>,
    /// `[tools] uses`.
    pub uses_tools: Vec<Located<ToolRef>>,
    /// `[uses] seats`: seats this module submits work to.
    pub uses_seats: Vec<Located<Name>>,
    /// `[[file]]`.
    pub files: Vec<FileDecl>,
    /// `[health]`.
    pub health: Option<HealthSection>,
}

impl Manifest {
    /// `file:line:col` of a position in this manifest.
    pub fn locate(&self, pos: Pos) -> Location {
        Location::new(self.path.clone(), pos)
    }

    /// Whether `[holds] seats` names `seat` as written.
    pub fn holds_seat(&self, seat: &str) -> bool {
        self.holds.iter().any(|h| h.value.as_str() == seat)
    }
}

/// `"node"`: one holder per node; `"mesh"`: one holder in the mesh.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    Node,
    Mesh,
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scope::Node => "node",
            Scope::Mesh => "mesh",
        })
    }
}

/// A `[[seat]]`, or one of the mesh's own roles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeatDecl {
    pub name: Located<Name>,
    pub scope: Located<Scope>,
    /// Empty for a marker seat.
    pub protocol: Located<String>,
    pub accepts: Vec<Located<Name>>,
    pub emits: Vec<Located<Name>>,
    pub tools: Vec<Located<Name>>,
    /// Where the `[[seat]]` header is.
    pub pos: Pos,
}

impl SeatDecl {
    /// A marker seat says who does a job and carries no protocol; valid.
    pub fn is_marker(&self) -> bool {
        self.protocol.value.is_empty()
    }
}

/// The driver a host runs the module with.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Driver {
    #[default]
    Process,
    /// One container per module, from `image` (DESIGN §6 "Container driver").
    Container,
}

impl fmt::Display for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Driver::Process => "process",
            Driver::Container => "container",
        })
    }
}

/// A `[run]` string: its text, its parsed placeholders and where each
/// placeholder itself sits in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunValue {
    pub text: String,
    pub template: Template,
    pub pos: Pos,
    pub placeholders: Vec<Located<Placeholder>>,
}

impl RunValue {
    /// The artifact this value is, when it is exactly one
    /// `${artifact:NAME}` and nothing beside it.
    pub fn artifact_alone(&self) -> Option<&Name> {
        match self.placeholders.as_slice() {
            [p] => match &p.value {
                Placeholder::Artifact { name } if self.text == p.value.to_string() => Some(name),
                _ => None,
            },
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvVar {
    pub name: Located<String>,
    pub value: RunValue,
}

/// `[run]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// What runs (process driver), or the arguments to the image's
    /// entrypoint (container driver; may be empty).
    pub command: Vec<RunValue>,
    /// The container's image (container driver only).
    pub image: Option<RunValue>,
    pub env: Vec<EnvVar>,
    pub driver: Located<Driver>,
    pub secrets_in_environment: Option<Located<String>>,
    pub pos: Pos,
}

/// Why `url` cannot be a module's repository: a git URL a build machine
/// can fetch — `file://`, `https://`, `http://`, `ssh://`, `git://` or
/// `user@host:path` — with no credentials in it (records and `built`
/// events quote it) and nothing git would read as an option.
pub fn repository_ok(url: &str) -> Result<(), String> {
    if url.is_empty() {
        return Err("is empty".into());
    }
    if url.starts_with('-') {
        return Err("starts with `-`, which git reads as an option".into());
    }
    if url.bytes().any(|b| !b.is_ascii_graphic()) {
        return Err("holds a space or a control character".into());
    }
    if let Some((scheme, rest)) = url.split_once("://") {
        if !matches!(scheme, "file" | "https" | "http" | "ssh" | "git") {
            return Err(format!(
                "has scheme {scheme}://, not file, https, http, ssh or git"
            ));
        }
        let authority = rest.split('/').next().unwrap_or_default();
        // A user before `@` is how ssh says who logs in; over http it is a
        // token, and a password is one anywhere.
        if let Some((user, _)) = authority.split_once('@')
            && (scheme != "ssh" || user.contains(':'))
        {
            return Err("carries credentials; keep them out of the manifest (the build machine's git configuration or agent holds them)".into());
        }
        if rest.is_empty() || (scheme == "file" && !rest.starts_with('/')) {
            return Err("names no path".into());
        }
        return Ok(());
    }
    match url.split_once(':') {
        Some((host, path)) if !host.is_empty() && !path.is_empty() && !host.contains('/') => Ok(()),
        _ => Err("is not a git URL".into()),
    }
}

/// `[health]`: how a module's host tells it is well (DESIGN "health and
/// deploys"). A module without it is healthy once it has run for
/// [`DEFAULT_HEALTHY_AFTER_MS`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthSection {
    pub check: HealthCheck,
    pub interval_ms: u64,
    pub timeout_ms: u64,
    /// How long the check must keep passing before the module is healthy.
    pub healthy_after_ms: u64,
    pub pos: Pos,
}

pub const DEFAULT_INTERVAL_MS: u64 = 2000;
pub const DEFAULT_TIMEOUT_MS: u64 = 1000;
pub const DEFAULT_HEALTHY_AFTER_MS: u64 = 2000;

/// One check, run by the module's host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthCheck {
    /// `GET` answered 2xx.
    Http(RunValue),
    /// A connection accepted at `HOST:PORT`.
    Tcp(RunValue),
    /// The program exits 0 (inside the container for a container module).
    Exec(Vec<RunValue>),
    /// `sdk = true`: the module says ready itself, through the SDK.
    Sdk,
}

impl HealthCheck {
    pub fn values(&self) -> &[RunValue] {
        match self {
            HealthCheck::Http(v) | HealthCheck::Tcp(v) => std::slice::from_ref(v),
            HealthCheck::Exec(argv) => argv,
            HealthCheck::Sdk => &[],
        }
    }
}

/// `[build]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Build {
    pub command: Vec<Located<String>>,
    pub artifacts: Vec<Artifact>,
    pub pos: Pos,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    pub name: Located<Name>,
    pub path: Located<String>,
}

/// `[[file]]`: a file the mesh writes for this module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDecl {
    pub name: Located<Name>,
    pub path: Located<String>,
    /// What the host writes into it (placeholders filled; a
    /// `${secret:..}` reaches the node sealed); none: an empty file, or
    /// the mesh's own content (`bus-users`).
    pub content: Option<RunValue>,
    pub pos: Pos,
}

impl Manifest {
    /// Every value placeholders are filled into: `[run]` command, image
    /// and env, and each file's content.
    pub fn filled_values(&self) -> impl Iterator<Item = &RunValue> {
        let run = self.run.iter().flat_map(|r| {
            r.command
                .iter()
                .chain(r.image.iter())
                .chain(r.env.iter().map(|e| &e.value))
        });
        run.chain(self.files.iter().filter_map(|f| f.content.as_ref()))
            .chain(self.health.iter().flat_map(|h| h.check.values()))
    }

    /// The secrets this module's run spec and files name (`${secret:..}`).
    pub fn secrets_used(&self) -> std::collections::BTreeSet<Name> {
        self.filled_values()
            .flat_map(|v| v.placeholders.iter())
            .filter_map(|p| match &p.value {
                Placeholder::Secret { name } => Some(name.clone()),
                _ => None,
            })
            .collect()
    }

    /// The seats this module's values address (`${seat:S:PORT}`), as written.
    pub fn seats_addressed(&self) -> std::collections::BTreeSet<Name> {
        self.filled_values()
            .flat_map(|v| v.placeholders.iter())
            .filter_map(|p| match &p.value {
                Placeholder::Seat { seat, .. } => Some(seat.clone()),
                _ => None,
            })
            .collect()
    }
}

/// Warnings about a manifest that parsed: things that are allowed but
/// probably not meant. Run by [`crate::catalogue::check`] for every manifest.
pub fn lint(m: &Manifest) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    if let Some(run) = &m.run
        && let Some(reason) = &run.secrets_in_environment
    {
        let any_secret = run.env.iter().any(|e| {
            e.value
                .placeholders
                .iter()
                .any(|p| matches!(p.value, Placeholder::Secret { .. }))
        });
        if !any_secret {
            out.push(
                Diagnostic::new(
                    Kind::UnusedSecretsReason,
                    m.locate(reason.pos),
                    "`secrets-in-environment` is given but no `env` value holds a `${secret:..}`",
                )
                .with_help("remove it, so a secret added later must be justified again"),
            );
        }
    }
    if let Some(held) = m.holds.iter().find(|h| h.value.as_str() == BROKER_ROLE)
        && !m
            .files
            .iter()
            .any(|f| f.name.value.as_str() == BUS_USERS_FILE)
    {
        out.push(
            Diagnostic::new(
                Kind::BrokerWithoutUsersFile,
                m.locate(held.pos),
                format!(
                    "holds `{BROKER_ROLE}` but declares no `[[file]] name = \"{BUS_USERS_FILE}\"`: the mesh has nowhere to write the bus user list"
                ),
            )
            .with_help(format!(
                "add `[[file]]` with `name = \"{BUS_USERS_FILE}\"` and the path the broker's configuration includes"
            )),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secrets_a_manifest_uses_are_those_of_its_env_and_files() {
        let m = parse(
            "m.toml",
            r#"
[module]
name = "m"
description = "uses two secrets"
[run]
command = ["m", "--conf", "${file:conf}"]
env = { A = "${secret:one}", B = "plain" }
secrets-in-environment = "the library reads A only"
[[file]]
name = "conf"
path = "conf"
content = "token = ${secret:two}, again ${secret:one}"
"#,
        )
        .unwrap();
        let used = m.secrets_used();
        let used: Vec<&str> = used.iter().map(Name::as_str).collect();
        assert_eq!(used, ["one", "two"]);
    }

    /// A command line repeats arguments (`--count 1 --every 1`); a list
    /// of names (`emits`) does not.
    #[test]
    fn a_command_may_repeat_an_argument_and_emits_may_not() {
        let m = parse(
            "m.toml",
            r#"
[module]
name = "m"
description = "repeats"
[run]
command = ["m", "--count", "1", "--every", "1"]
"#,
        )
        .unwrap();
        assert_eq!(m.run.unwrap().command.len(), 5);
        // A build's command is an argv too: `make -C a -C b` repeats `-C`.
        let m = parse(
            "m.toml",
            r#"
[module]
name = "m"
description = "builds"
[run]
command = ["m"]
[build]
command = ["make", "-C", "a", "-C", "b"]
artifacts = { m = "out/m" }
"#,
        )
        .unwrap();
        let build = m.build.expect("a [build] section is kept");
        let argv: Vec<&str> = build.command.iter().map(|a| a.value.as_str()).collect();
        assert_eq!(argv, ["make", "-C", "a", "-C", "b"]);
        assert_eq!(build.artifacts[0].path.value, "out/m");
        let e = parse(
            "m.toml",
            r#"
[module]
name = "m"
description = "twice"
[run]
command = ["m"]
[events]
emits = ["tick", "tick"]
"#,
        )
        .unwrap_err();
        assert!(
            format!("{e:?}").contains("listed twice in `emits`"),
            "{e:?}"
        );
    }
}

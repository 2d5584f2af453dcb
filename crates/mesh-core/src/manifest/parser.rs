//! The strict `mesh.toml` parser: walks the spanned TOML tree, refusing every
//! field it does not know, and collects every problem rather than stopping at
//! the first (an operator fixing a manifest wants the whole list at once).
//! Here are the readers of each section; the typed reads under them are in
//! [`super::toml_access`].

use std::ops::Range;

use toml::de::{DeTable, DeValue};

use super::refs;
use super::run_section::Context;
use super::toml_access::{Reader, Val, get};
use super::{
    Artifact, BROKER_ROLE, BUS_USERS_FILE, Build, FileDecl, Located, Manifest, Scope, SeatDecl,
};
use crate::diagnostic::{Diagnostic, Kind, LineIndex, Location, suggest};
use crate::names::Name;

const ROOT: &[&str] = &[
    "module", "run", "build", "seat", "holds", "events", "tools", "uses", "file", "health",
];
const MODULE: &[&str] = &["name", "description", "repository"];
pub(super) const RUN: &[&str] = &[
    "command",
    "env",
    "driver",
    "image",
    "secrets-in-environment",
];
const BUILD: &[&str] = &["command", "artifacts"];
const SEAT: &[&str] = &["name", "scope", "protocol", "accepts", "emits", "tools"];
const HOLDS: &[&str] = &["seats"];
const EVENTS: &[&str] = &["emits", "consumes"];
const TOOLS: &[&str] = &["serves", "uses"];
const USES: &[&str] = &["seats"];
const FILE: &[&str] = &["name", "path", "content"];

/// Every section and its fields, to say where a misplaced field belongs.
const SECTIONS: &[(&str, &[&str])] = &[
    ("[module]", MODULE),
    ("[run]", RUN),
    ("[build]", BUILD),
    ("[[seat]]", SEAT),
    ("[holds]", HOLDS),
    ("[events]", EVENTS),
    ("[tools]", TOOLS),
    ("[uses]", USES),
    ("[[file]]", FILE),
    ("[health]", super::health_section::HEALTH),
];

const SCOPES: &[&str] = &["node", "mesh"];

/// Parses a manifest from raw bytes: a file that is not UTF-8 is refused at
/// the first bad byte instead of being read with replacement characters.
pub fn parse_bytes(path: &str, bytes: &[u8]) -> Result<Manifest, Vec<Diagnostic>> {
    match std::str::from_utf8(bytes) {
        Ok(text) => parse(path, text),
        Err(e) => {
            let good =
                std::str::from_utf8(bytes.get(..e.valid_up_to()).unwrap_or(&[])).unwrap_or("");
            let pos = LineIndex::new(good).pos(good.len(), good.len());
            Err(vec![Diagnostic::new(
                Kind::NotUtf8,
                Location::new(path, pos),
                "the file is not UTF-8 (a manifest is TOML, which must be)",
            )])
        }
    }
}

/// Parses and checks one manifest. `path` is only used to name the file in
/// diagnostics and in the returned [`Manifest`].
///
/// On refusal every diagnostic found is returned (all errors; warnings come
/// from [`super::lint`] and the catalogue).
pub fn parse(path: &str, text: &str) -> Result<Manifest, Vec<Diagnostic>> {
    let mut p = Parser {
        toml: Reader::new(path, text),
    };
    let Some(root) = p.toml.root() else {
        return Err(p.toml.into_diagnostics());
    };
    let manifest = p.manifest(root.get_ref());
    let mut diags = p.toml.into_diagnostics();
    if diags.iter().any(Diagnostic::is_error) {
        crate::diagnostic::sort(&mut diags);
        return Err(diags);
    }
    // Without an error every required part is present.
    manifest.ok_or(diags)
}

/// One manifest being read; every problem found goes to `toml`.
pub(super) struct Parser<'a> {
    pub(super) toml: Reader<'a>,
}

impl Parser<'_> {
    fn manifest(&mut self, root: &DeTable<'_>) -> Option<Manifest> {
        self.check_fields(root, None, ROOT);

        let mut name = None;
        let mut description = None;
        let mut repository = None;
        match self.toml.section(root, "module") {
            Some((t, header)) => {
                self.check_fields(t, Some("[module]"), MODULE);
                name = self
                    .toml
                    .required_name(t, &header, "[module]", "name", "module");
                description = get(t, "description").and_then(|(_, v)| {
                    let s = self.toml.string(v, "description")?;
                    Some(Located::new(s.to_string(), self.toml.pos(&v.span())))
                });
                repository = get(t, "repository").and_then(|(_, v)| {
                    let s = self.toml.string(v, "repository")?;
                    if let Err(why) = super::repository_ok(s) {
                        self.toml.push(
                            Kind::BadValue,
                            v.span(),
                            format!("`repository` {why}"),
                            Some("write a git URL without credentials: `file:///srv/git/audit-log`, `https://git.example.net/audit-log.git`".into()),
                        );
                        return None;
                    }
                    Some(Located::new(s.to_string(), self.toml.pos(&v.span())))
                });
            }
            None if get(root, "module").is_none() => self.toml.push(
                Kind::MissingField,
                0..0,
                "the manifest has no [module] section".into(),
                Some("add `[module]` with `name = \"<module>\"`".into()),
            ),
            None => {}
        }
        let module = name.as_ref().map(|n: &Located<Name>| n.value.clone());

        let holds = self.name_list_in(root, "holds", HOLDS, "seats", "seat");
        let files = self.files(root, &holds);
        let run = self
            .toml
            .section(root, "run")
            .and_then(|(t, h)| self.run(t, &h, &files));
        let build = self
            .toml
            .section(root, "build")
            .and_then(|(t, h)| self.build(t, &h));
        let seats = self.seats(root);
        let health = self
            .toml
            .section(root, "health")
            .and_then(|(t, h)| self.health(t, &h, &files));

        let mut emits = Vec::new();
        let mut consumes = Vec::new();
        if let Some((t, _)) = self.toml.section(root, "events") {
            self.check_fields(t, Some("[events]"), EVENTS);
            if let Some((_, v)) = get(t, "emits") {
                emits = self.emits(v, module.as_ref());
            }
            if let Some((_, v)) = get(t, "consumes") {
                consumes = self.refs(v, "consumes", refs::parse_event_ref);
            }
        }
        let mut serves = Vec::new();
        let mut uses_tools = Vec::new();
        if let Some((t, _)) = self.toml.section(root, "tools") {
            self.check_fields(t, Some("[tools]"), TOOLS);
            if let Some((_, v)) = get(t, "serves") {
                serves = self.toml.names(v, "serves", "tool");
            }
            if let Some((_, v)) = get(t, "uses") {
                uses_tools = self.refs(v, "uses", refs::parse_tool_ref);
            }
        }
        let uses_seats = self.name_list_in(root, "uses", USES, "seats", "seat");

        Some(Manifest {
            path: self.toml.path().to_string(),
            name: name?,
            description,
            repository,
            run,
            build,
            seats,
            holds,
            emits,
            consumes,
            serves,
            uses_tools,
            uses_seats,
            files,
            health,
        })
    }

    /// Refuses every key of `t` not in `known`, suggesting the close one or
    /// the section it belongs in.
    pub(super) fn check_fields(&mut self, t: &DeTable<'_>, section: Option<&str>, known: &[&str]) {
        let message = |key: &str| match section {
            None => format!("unknown section `{key}`"),
            Some(s) => format!("unknown field `{key}` in {s}"),
        };
        let otherwise = |key: &str| {
            let homes: Vec<&str> = SECTIONS
                .iter()
                .filter(|(_, fields)| fields.contains(&key))
                .map(|(s, _)| *s)
                .collect();
            if !homes.is_empty() {
                return Some(format!("`{key}` belongs in {}", homes.join(" or ")));
            }
            Some(match section {
                None => format!("a manifest has the sections {}", ROOT.join(", ")),
                Some(s) => format!("{s} has the fields {}", known.join(", ")),
            })
        };
        self.toml.check_keys(t, known, message, otherwise);
    }

    /// `[section] field = [names]`, the whole of a one-field section.
    fn name_list_in(
        &mut self,
        root: &DeTable<'_>,
        section: &str,
        known: &[&str],
        field: &str,
        what: &str,
    ) -> Vec<Located<Name>> {
        let Some((t, _)) = self.toml.section(root, section) else {
            return Vec::new();
        };
        self.check_fields(t, Some(&format!("[{section}]")), known);
        match get(t, field) {
            Some((_, v)) => self.toml.names(v, field, what),
            None => Vec::new(),
        }
    }

    fn refs<T>(
        &mut self,
        v: &Val<'_>,
        field: &str,
        parse: fn(&str) -> Result<T, refs::RefError>,
    ) -> Vec<Located<T>> {
        let mut out = Vec::new();
        for (s, span) in self.toml.strings(v, field) {
            match parse(&s) {
                Ok(r) => out.push(Located::new(r, self.toml.pos(&span))),
                Err(e) => {
                    let at = self.toml.inner(&span, &s, e.range.clone());
                    self.toml.push(e.kind, at, e.message, e.help);
                }
            }
        }
        out
    }

    /// `[events] emits`: local names. A qualified name is this module's own
    /// event written the long way, or an attempt to speak as someone else.
    fn emits(&mut self, v: &Val<'_>, module: Option<&Name>) -> Vec<Located<Name>> {
        let mut out = Vec::new();
        for (s, span) in self.toml.strings(v, "emits") {
            if let Some(rest) = s.strip_prefix(refs::SEAT_PREFIX) {
                let (seat, event) = rest.split_once('.').unwrap_or((rest, "<event>"));
                self.toml.push(
                    Kind::ForeignEvent,
                    span,
                    format!("`{s}` emits as seat `{seat}`; a seat's events are declared on the seat, not in [events]"),
                    Some(format!(
                        "list `{event}` in the `emits` of the [[seat]] named `{seat}`; its holder publishes it"
                    )),
                );
            } else if let Some((prefix, rest)) = s.split_once('.') {
                if module.is_some_and(|m| m.as_str() == prefix) {
                    self.toml.push(
                        Kind::QualifiedEvent,
                        span,
                        format!("event names are local: `{s}` qualifies this module's own event with its name"),
                        Some(format!("write `{rest}`")),
                    );
                } else {
                    self.toml.push(
                        Kind::ForeignEvent,
                        span,
                        format!(
                            "`{s}` reads as an event of `{prefix}`; a module emits only under its own name"
                        ),
                        Some(format!(
                            "if any holder of a job announces `{rest}`, declare it on a seat: `[[seat]]` with `emits = [\"{rest}\"]`, held in [holds]; if it is this module's own event, write `{rest}`"
                        )),
                    );
                }
            } else if let Some(n) = self.toml.located_name(&s, &span, "event") {
                out.push(n);
            }
        }
        out
    }

    fn seats(&mut self, root: &DeTable<'_>) -> Vec<SeatDecl> {
        let mut out: Vec<SeatDecl> = Vec::new();
        for (t, header) in self.toml.tables(root, "seat") {
            self.check_fields(t, Some("[[seat]]"), SEAT);
            let name = self
                .toml
                .required_name(t, &header, "[[seat]]", "name", "seat");
            let scope = self
                .toml.required(t, &header, "[[seat]]", "scope", Some("write `scope = \"node\"` (one holder per node) or `scope = \"mesh\"` (one holder in the mesh)".into()))
                .and_then(|v| {
                    let s = self.toml.string(v, "scope")?;
                    let scope = match s {
                        "node" => Scope::Node,
                        "mesh" => Scope::Mesh,
                        other => {
                            let help = suggest(other, SCOPES.iter().copied())
                                .map(|c| format!("did you mean `{c}`?"));
                            self.toml.push(
                                Kind::BadValue,
                                v.span(),
                                format!("scope `{other}` is neither `node` nor `mesh`"),
                                help,
                            );
                            return None;
                        }
                    };
                    Some(Located::new(scope, self.toml.pos(&v.span())))
                });
            let protocol = self
                .toml.required(t, &header, "[[seat]]", "protocol", Some("write `protocol = \"\"` for a marker seat, which only says which module does a job".into()))
                .and_then(|v| {
                    let s = self.toml.string(v, "protocol")?.to_string();
                    // Empty is a marker, valid; anything else is a name.
                    if !s.is_empty() {
                        self.toml.name(&s, &v.span(), "protocol")?;
                    }
                    Some(Located::new(s, self.toml.pos(&v.span())))
                });
            let mut list = |field: &str, what: &str| match get(t, field) {
                Some((_, v)) => self.toml.names(v, field, what),
                None => Vec::new(),
            };
            let accepts = list("accepts", "work kind");
            let emits = list("emits", "event");
            let tools = list("tools", "tool");
            if let (Some(name), Some(scope), Some(protocol)) = (name, scope, protocol) {
                if let Some(first) = out.iter().find(|s| s.name.value == name.value) {
                    let line = first.name.pos.line;
                    self.toml.push(
                        Kind::DuplicateEntry,
                        header.clone(),
                        format!("seat `{}` is declared twice in this manifest", name.value),
                        Some(format!("the first is on line {line}; merge the two")),
                    );
                    continue;
                }
                out.push(SeatDecl {
                    name,
                    scope,
                    protocol,
                    accepts,
                    emits,
                    tools,
                    pos: self.toml.pos(&header),
                });
            }
        }
        out
    }

    fn files(&mut self, root: &DeTable<'_>, holds: &[Located<Name>]) -> Vec<FileDecl> {
        let mut out: Vec<FileDecl> = Vec::new();
        for (t, header) in self.toml.tables(root, "file") {
            self.check_fields(t, Some("[[file]]"), FILE);
            let name = self
                .toml
                .required_name(t, &header, "[[file]]", "name", "file");
            let path = self
                .toml
                .required(t, &header, "[[file]]", "path", None)
                .and_then(|v| {
                    let s = self.toml.string(v, "path")?.to_string();
                    self.relative_path(&s, &v.span(), "path")?;
                    Some(Located::new(s, self.toml.pos(&v.span())))
                });
            // The bus user list holds every principal's password hash: asking
            // for it must not be enough to receive it.
            if let Some(n) = &name
                && n.value.as_str() == BUS_USERS_FILE
                && !holds.iter().any(|h| h.value.as_str() == BROKER_ROLE)
            {
                self.toml.push_at(
                    Kind::BusUsersWithoutBroker,
                    n.pos,
                    format!("only the holder of `{BROKER_ROLE}` may have the `{BUS_USERS_FILE}` file: it holds every bus user's password hash"),
                    Some(format!("add `{BROKER_ROLE}` to [holds] seats if this module is the bus, or remove this file")),
                );
                continue;
            }
            let content = match get(t, "content") {
                None => None,
                Some((_, v)) => {
                    let Some(s) = self.toml.string(v, "content") else {
                        continue;
                    };
                    let s = s.to_string();
                    match self.run_value(&s, &v.span(), &[], Context::File) {
                        Some(c) => Some(c),
                        None => continue,
                    }
                }
            };
            let (Some(name), Some(path)) = (name, path) else {
                continue;
            };
            if let Some(first) = out.iter().find(|f| f.name.value == name.value) {
                let line = first.name.pos.line;
                self.toml.push_at(
                    Kind::DuplicateEntry,
                    name.pos,
                    format!("file `{}` is declared twice", name.value),
                    Some(format!("the first is on line {line}")),
                );
                continue;
            }
            if let Some(first) = out.iter().find(|f| f.path.value == path.value) {
                let line = first.path.pos.line;
                self.toml.push_at(
                    Kind::DuplicateEntry,
                    path.pos,
                    format!("two files are written to `{}`", path.value),
                    Some(format!(
                        "the other is on line {line}; give each its own path"
                    )),
                );
                continue;
            }
            out.push(FileDecl {
                name,
                path,
                content,
                pos: self.toml.pos(&header),
            });
        }
        out
    }

    /// A path the mesh writes into (or a build reads from) must stay inside
    /// the module's directory.
    pub(super) fn relative_path(
        &mut self,
        s: &str,
        span: &Range<usize>,
        field: &str,
    ) -> Option<()> {
        let why = if s.is_empty() {
            Some("is empty")
        } else if s.starts_with('/') || s.starts_with('\\') || s.get(1..2) == Some(":") {
            Some("is absolute")
        } else if s.split(['/', '\\']).any(|c| c == "..") {
            Some("climbs out with `..`")
        } else {
            None
        };
        match why {
            None => Some(()),
            Some(why) => {
                self.toml.push(
                    Kind::BadValue,
                    span.clone(),
                    format!("`{field}` `{s}` {why}"),
                    Some("write a path relative to the module's directory, inside it".into()),
                );
                None
            }
        }
    }

    fn build(&mut self, t: &DeTable<'_>, header: &Range<usize>) -> Option<Build> {
        self.check_fields(t, Some("[build]"), BUILD);
        let command = self
            .toml
            .required(t, header, "[build]", "command", None)
            .map(|v| {
                let items = self.toml.argv(v, "command");
                if items.is_empty() && matches!(v.get_ref(), DeValue::Array(_)) {
                    self.toml
                        .push(Kind::BadValue, v.span(), "`command` is empty".into(), None);
                }
                items
                    .into_iter()
                    .map(|(s, span)| Located::new(s, self.toml.pos(&span)))
                    .collect::<Vec<_>>()
            });
        let mut artifacts = Vec::new();
        let items = get(t, "artifacts").and_then(|(_, v)| {
            let help = Some("write `artifacts = { name = \"path/in/the/build\" }`".into());
            self.toml.table(v, "artifacts", help)
        });
        for (k, val) in items.into_iter().flat_map(DeTable::iter) {
            let key: &str = k.get_ref();
            let name = self.toml.located_name(key, &k.span(), "artifact");
            let path = self.toml.string(val, key).map(str::to_string);
            if let (Some(name), Some(path)) = (name, path)
                && self.relative_path(&path, &val.span(), key).is_some()
            {
                artifacts.push(Artifact {
                    name,
                    path: Located::new(path, self.toml.pos(&val.span())),
                });
            }
        }
        Some(Build {
            command: command?,
            artifacts,
            pos: self.toml.pos(header),
        })
    }
}

//! The catalogue: every registered manifest plus the mesh's own roles,
//! checked together.
//!
//! The check that matters most compares the two halves of every
//! subscription: the subject a consumer's filter will have (derived through
//! [`crate::subjects`]) against the subjects its emitter publishes, with NATS
//! wildcard overlap. Names agreeing is not enough — a role's event lives under
//! `mesh.seat.`, and a consumer deriving `mesh.mod.<role>.event.<e>` hears
//! nothing, without any error anywhere.
//!
//! Seat renames are data: an aliases file (`aliases.toml` at the root of a
//! catalogue directory) maps old seat names to new ones, and every seat a
//! manifest names is resolved through it before anything is checked:
//!
//! ```toml
//! [seats]
//! artifacts = "artifact-store"   # old name = new name
//! ```

use std::collections::{BTreeMap, BTreeSet};

use toml::de::{DeTable, DeValue};

use crate::diagnostic::{self, Diagnostic, Kind, LineIndex, Location, Pos, suggest};
use crate::manifest::{
    self, BROKER_ROLE, EventRef, Located, Manifest, Scope, SeatDecl, Target, ToolRef,
};
use crate::names::Name;
use crate::placeholders::Placeholder;
use crate::subjects::{self, EventSelector, pattern};

/// The role whose holder runs the store.
pub const STORE_ROLE: &str = "mesh-store";
/// The role whose holder builds: takes `build` work, announces `built`.
pub const BUILD_MACHINE_ROLE: &str = "mesh-build-machine";

/// The seats the mesh itself declares. Same fields as a module's seat; their
/// positions are [`Pos::START`] and their [`Origin`] is [`Origin::Mesh`].
pub fn builtin_roles() -> Vec<SeatDecl> {
    let role = |name: &str, protocol: &str, accepts: &[&str], emits: &[&str]| {
        let names = |xs: &[&str]| {
            xs.iter()
                .filter_map(|x| Name::new(*x).ok())
                .map(|n| Located::new(n, Pos::START))
                .collect::<Vec<_>>()
        };
        Name::new(name).ok().map(|n| SeatDecl {
            name: Located::new(n, Pos::START),
            scope: Located::new(Scope::Mesh, Pos::START),
            protocol: Located::new(protocol.to_string(), Pos::START),
            accepts: names(accepts),
            emits: names(emits),
            tools: Vec::new(),
            pos: Pos::START,
        })
    };
    [
        role(BROKER_ROLE, "nats", &[], &[]),
        role(STORE_ROLE, "postgres", &[], &[]),
        role(BUILD_MACHINE_ROLE, "", &["build"], &["built"]),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Who declared something: the mesh itself, or a manifest line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Mesh,
    Manifest(Location),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Mesh => f.write_str("the mesh itself"),
            Origin::Manifest(l) => write!(f, "{}:{}", l.file, l.line),
        }
    }
}

/// A declared seat: a module's `[[seat]]` or a built-in role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeatEntry {
    pub decl: SeatDecl,
    /// The declaring module; `None` for a role.
    pub module: Option<Name>,
    pub origin: Origin,
}

/// One seat rename.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alias {
    pub old: Located<Name>,
    pub new: Located<Name>,
    /// The aliases file it was read from.
    pub file: String,
}

/// Seat renames, old name → new name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Aliases {
    entries: Vec<Alias>,
}

impl Aliases {
    pub fn new() -> Self {
        Aliases::default()
    }

    pub fn entries(&self) -> &[Alias] {
        &self.entries
    }

    /// Adds a rename (for callers building aliases from records).
    pub fn push(&mut self, alias: Alias) {
        self.entries.push(alias);
    }

    /// Adds every alias of `other` (several aliases files).
    pub fn extend(&mut self, other: Aliases) {
        self.entries.extend(other.entries);
    }

    /// Parses an aliases file: one `[seats]` table of `old = "new"`.
    pub fn parse(path: &str, text: &str) -> Result<Aliases, Vec<Diagnostic>> {
        let ix = LineIndex::new(text);
        let at = |span: std::ops::Range<usize>| Location::new(path, ix.pos(span.start, span.end));
        let mut diags = Vec::new();
        let (root, errors) = DeTable::parse_recoverable(text);
        for e in &errors {
            diags.push(Diagnostic::new(
                Kind::TomlSyntax,
                at(e.span().unwrap_or(0..0)),
                e.message().trim().to_string(),
            ));
        }
        if !diags.is_empty() {
            return Err(diags);
        }
        let mut out = Aliases::new();
        for (k, v) in root.get_ref().iter() {
            let key: &str = k.get_ref();
            if key != "seats" {
                let mut d = Diagnostic::new(
                    Kind::UnknownField,
                    at(k.span()),
                    format!("unknown section `{key}` in an aliases file"),
                );
                d.help = Some(match suggest(key, ["seats"]) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => {
                        "an aliases file has one section, `[seats]`, of `old-name = \"new-name\"`"
                            .into()
                    }
                });
                diags.push(d);
                continue;
            }
            let DeValue::Table(t) = v.get_ref() else {
                diags.push(Diagnostic::new(
                    Kind::WrongType,
                    at(v.span()),
                    format!("`seats` must be a table, found {}", v.get_ref().type_str()),
                ));
                continue;
            };
            for (old, new) in t.iter() {
                let old_name = Name::new(old.get_ref().as_ref());
                let new_name = match new.get_ref() {
                    DeValue::String(s) => Name::new(s.as_ref()).map_err(|e| e.to_string()),
                    other => Err(format!("must be a string, found {}", other.type_str())),
                };
                match (old_name, new_name) {
                    (Ok(o), Ok(n)) => out.entries.push(Alias {
                        old: Located::new(o, ix.pos(old.span().start, old.span().end)),
                        new: Located::new(n, ix.pos(new.span().start, new.span().end)),
                        file: path.to_string(),
                    }),
                    (Err(e), _) => diags.push(Diagnostic::new(
                        Kind::BadName,
                        at(old.span()),
                        format!("bad seat name: {e}"),
                    )),
                    (_, Err(e)) => diags.push(Diagnostic::new(
                        if matches!(new.get_ref(), DeValue::String(_)) {
                            Kind::BadName
                        } else {
                            Kind::WrongType
                        },
                        at(new.span()),
                        format!("the new name of `{}` {e}", old.get_ref()),
                    )),
                }
            }
        }
        if diags.is_empty() {
            Ok(out)
        } else {
            Err(diags)
        }
    }

    fn get(&self, old: &Name) -> Option<&Alias> {
        self.entries.iter().find(|a| a.old.value == *old)
    }

    /// Follows renames from `name` to its current name. A cycle stops where
    /// it would repeat (and is reported by [`check`]).
    pub fn resolve(&self, name: &Name) -> Name {
        self.follow(name).0
    }

    /// Follows renames from `name` as far as they go: the name reached, and
    /// whether the renames ran into a cycle (stopping where it would repeat).
    pub fn follow(&self, name: &Name) -> (Name, bool) {
        let mut seen = BTreeSet::new();
        let mut cur = name.clone();
        while let Some(a) = self.get(&cur) {
            if !seen.insert(cur.clone()) {
                return (cur, true);
            }
            cur = a.new.value.clone();
        }
        (cur, false)
    }
}

/// A consumed event, resolved: whose, which, and the subject the consumer's
/// filter has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consume {
    /// As written in the manifest (before alias resolution).
    pub written: EventRef,
    /// The emitter after alias resolution.
    pub emitter: Target,
    pub event: EventSelector,
    /// The consumer filter subject, from [`crate::subjects`].
    pub subject: String,
    /// The `consumes` entry.
    pub location: Location,
}

/// A used tool, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolUse {
    pub written: ToolRef,
    pub provider: Target,
    pub tool: Name,
    /// The subject a call is published to.
    pub subject: String,
    pub location: Location,
}

/// A seat a module names in `[holds]` or `[uses]`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeatRef {
    /// As written.
    pub written: Name,
    /// After alias resolution.
    pub seat: Name,
    pub location: Location,
}

/// A subject an emitter publishes events on, and the declaration that says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    pub event: Name,
    pub subject: String,
    pub origin: Origin,
}

/// Every registered manifest, the roles, and the seat aliases, indexed.
#[derive(Debug, Clone)]
pub struct Catalogue {
    manifests: Vec<Manifest>,
    aliases: Aliases,
    modules: BTreeMap<Name, usize>,
    seats: BTreeMap<Name, SeatEntry>,
    /// Duplicate modules and seats found while indexing.
    conflicts: Vec<Diagnostic>,
}

impl Catalogue {
    /// Indexes `manifests` (sorted by path, so "first" is stable) with the
    /// built-in roles and `aliases`. Never fails: conflicts are kept and
    /// reported by [`check`]; the first declaration of a name is the one used.
    pub fn build(mut manifests: Vec<Manifest>, aliases: Aliases) -> Catalogue {
        manifests.sort_by(|a, b| a.path.cmp(&b.path));
        let mut conflicts = Vec::new();
        let mut seats: BTreeMap<Name, SeatEntry> = BTreeMap::new();
        for role in builtin_roles() {
            seats.insert(
                role.name.value.clone(),
                SeatEntry {
                    decl: role,
                    module: None,
                    origin: Origin::Mesh,
                },
            );
        }
        let mut modules: BTreeMap<Name, usize> = BTreeMap::new();
        for (i, m) in manifests.iter().enumerate() {
            if let Some(first) = modules.get(&m.name.value).and_then(|j| manifests.get(*j)) {
                conflicts.push(
                    Diagnostic::new(
                        Kind::DuplicateModule,
                        m.locate(m.name.pos),
                        format!(
                            "module `{}` is registered twice: {}:{} and {}:{}",
                            m.name.value, first.path, first.name.pos.line, m.path, m.name.pos.line
                        ),
                    )
                    .with_help("rename one of them; a module name is its bus identity"),
                );
                continue;
            }
            modules.insert(m.name.value.clone(), i);
            for s in &m.seats {
                let here = m.locate(s.name.pos);
                if let Some(prev) = seats.get(&s.name.value) {
                    let message = match &prev.origin {
                        Origin::Mesh => format!(
                            "seat `{}` is a role the mesh itself declares; {} declares it again",
                            s.name.value, m.path
                        ),
                        Origin::Manifest(l) => format!(
                            "seat `{}` is declared twice: {}:{} and {}:{}",
                            s.name.value, l.file, l.line, here.file, here.line
                        ),
                    };
                    conflicts.push(
                        Diagnostic::new(Kind::DuplicateSeat, here, message).with_help(
                            "one module declares a seat; others claim it in [holds] seats",
                        ),
                    );
                    continue;
                }
                seats.insert(
                    s.name.value.clone(),
                    SeatEntry {
                        decl: s.clone(),
                        module: Some(m.name.value.clone()),
                        origin: Origin::Manifest(here),
                    },
                );
            }
        }
        Catalogue {
            manifests,
            aliases,
            modules,
            seats,
            conflicts,
        }
    }

    pub fn manifests(&self) -> &[Manifest] {
        &self.manifests
    }

    pub fn aliases(&self) -> &Aliases {
        &self.aliases
    }

    /// The registered module of that name.
    pub fn module(&self, name: &Name) -> Option<&Manifest> {
        self.modules.get(name).and_then(|i| self.manifests.get(*i))
    }

    /// The current name of a seat (aliases followed).
    pub fn resolve_seat(&self, name: &Name) -> Name {
        self.aliases.resolve(name)
    }

    /// The declared seat (or role) of that name, aliases followed.
    pub fn seat(&self, name: &Name) -> Option<&SeatEntry> {
        self.seats.get(&self.resolve_seat(name))
    }

    /// Every declared seat and role, by name.
    pub fn seats(&self) -> impl Iterator<Item = &SeatEntry> {
        self.seats.values()
    }

    fn seat_ref(&self, m: &Manifest, n: &Located<Name>) -> SeatRef {
        SeatRef {
            written: n.value.clone(),
            seat: self.resolve_seat(&n.value),
            location: m.locate(n.pos),
        }
    }

    /// `[holds] seats` of `m`, resolved.
    pub fn held_seats(&self, m: &Manifest) -> Vec<SeatRef> {
        m.holds.iter().map(|h| self.seat_ref(m, h)).collect()
    }

    /// `[uses] seats` of `m`, resolved.
    pub fn used_seats(&self, m: &Manifest) -> Vec<SeatRef> {
        m.uses_seats.iter().map(|h| self.seat_ref(m, h)).collect()
    }

    fn resolve_target(&self, t: &Target) -> Target {
        match t {
            Target::Module(n) => Target::Module(n.clone()),
            Target::Seat(s) => Target::Seat(self.resolve_seat(s)),
        }
    }

    /// `[events] consumes` of `m`, resolved to emitter and subject.
    pub fn consumes(&self, m: &Manifest) -> Vec<Consume> {
        m.consumes
            .iter()
            .map(|c| {
                let resolved = EventRef {
                    emitter: self.resolve_target(&c.value.emitter),
                    event: c.value.event.clone(),
                };
                Consume {
                    written: c.value.clone(),
                    subject: resolved.subject(),
                    emitter: resolved.emitter,
                    event: resolved.event,
                    location: m.locate(c.pos),
                }
            })
            .collect()
    }

    /// `[tools] uses` of `m`, resolved to provider and subject.
    pub fn tool_uses(&self, m: &Manifest) -> Vec<ToolUse> {
        m.uses_tools
            .iter()
            .map(|u| {
                let resolved = ToolRef {
                    provider: self.resolve_target(&u.value.provider),
                    tool: u.value.tool.clone(),
                };
                ToolUse {
                    written: u.value.clone(),
                    subject: resolved.subject(),
                    provider: resolved.provider,
                    tool: resolved.tool,
                    location: m.locate(u.pos),
                }
            })
            .collect()
    }

    /// The event subjects `emitter` publishes, each with its declaration;
    /// `None` when the emitter is not registered.
    pub fn publications(&self, emitter: &Target) -> Option<Vec<Publication>> {
        match emitter {
            Target::Module(name) => {
                let m = self.module(name)?;
                Some(
                    m.emits
                        .iter()
                        .map(|e| Publication {
                            event: e.value.clone(),
                            subject: subjects::module_event(
                                name,
                                &EventSelector::Named(e.value.clone()),
                            ),
                            origin: Origin::Manifest(m.locate(e.pos)),
                        })
                        .collect(),
                )
            }
            Target::Seat(seat) => {
                let entry = self.seat(seat)?;
                Some(
                    entry
                        .decl
                        .emits
                        .iter()
                        .map(|e| Publication {
                            event: e.value.clone(),
                            subject: subjects::seat_event(
                                &entry.decl.name.value,
                                &EventSelector::Named(e.value.clone()),
                            ),
                            origin: match &entry.origin {
                                Origin::Mesh => Origin::Mesh,
                                Origin::Manifest(l) => {
                                    Origin::Manifest(Location::new(l.file.clone(), e.pos))
                                }
                            },
                        })
                        .collect(),
                )
            }
        }
    }

    /// The tool subjects `provider` answers; `None` when not registered.
    pub fn served_tools(&self, provider: &Target) -> Option<Vec<(Name, String)>> {
        match provider {
            Target::Module(name) => {
                let m = self.module(name)?;
                Some(
                    m.serves
                        .iter()
                        .map(|t| (t.value.clone(), subjects::module_tool(name, &t.value)))
                        .collect(),
                )
            }
            Target::Seat(seat) => {
                let entry = self.seat(seat)?;
                Some(
                    entry
                        .decl
                        .tools
                        .iter()
                        .map(|t| {
                            (
                                t.value.clone(),
                                subjects::seat_tool(&entry.decl.name.value, &t.value),
                            )
                        })
                        .collect(),
                )
            }
        }
    }
}

/// Every problem in the catalogue: each manifest's lints, and everything
/// that only shows with all declarations in view. Sorted by file and line.
pub fn check(cat: &Catalogue) -> Vec<Diagnostic> {
    let mut out = cat.conflicts.clone();
    check_aliases(cat, &mut out);
    for m in &cat.manifests {
        out.extend(manifest::lint(m));
        check_seat_refs(cat, m, &mut out);
        check_consumes(cat, m, &mut out);
        check_tools(cat, m, &mut out);
        check_emit_names(cat, m, &mut out);
    }
    diagnostic::sort(&mut out);
    out
}

fn check_aliases(cat: &Catalogue, out: &mut Vec<Diagnostic>) {
    for a in cat.aliases.entries() {
        let loc = |pos| Location::new(a.file.clone(), pos);
        if let Some(dup) = cat
            .aliases
            .entries()
            .iter()
            .take_while(|b| !std::ptr::eq(*b, a))
            .find(|b| b.old.value == a.old.value)
        {
            out.push(Diagnostic::new(
                Kind::DuplicateEntry,
                loc(a.old.pos),
                format!(
                    "seat `{}` is renamed twice: {}:{} and here",
                    a.old.value, dup.file, dup.old.pos.line
                ),
            ));
            continue;
        }
        if let Some(entry) = cat.seats.get(&a.old.value) {
            out.push(
                Diagnostic::new(
                    Kind::AliasShadowsSeat,
                    loc(a.old.pos),
                    format!(
                        "seat `{}` is renamed to `{}` but is still declared by {}",
                        a.old.value, a.new.value, entry.origin
                    ),
                )
                .with_help("finish the rename in the declaring manifest, or drop the alias"),
            );
            continue;
        }
        // `a` is the first rename of its old name (later ones are duplicates,
        // reported above), so following from the old name starts with `a`.
        let (cur, cycle) = cat.aliases.follow(&a.old.value);
        if cycle {
            out.push(Diagnostic::new(
                Kind::AliasCycle,
                loc(a.old.pos),
                format!("renaming seat `{}` leads back to itself", a.old.value),
            ));
            continue;
        }
        if !cat.seats.contains_key(&cur) {
            out.push(
                Diagnostic::new(
                    Kind::AliasUnknownTarget,
                    loc(a.new.pos),
                    format!(
                        "seat `{}` is renamed to `{cur}`, which nobody declares",
                        a.old.value
                    ),
                )
                .with_help(seat_help(cat, &cur)),
            );
        }
    }
}

/// "did you mean" over declared seats, or the list of them.
fn seat_help(cat: &Catalogue, name: &Name) -> String {
    match suggest(name.as_str(), cat.seats.keys().map(Name::as_str)) {
        Some(s) => format!("did you mean `{s}`?"),
        None => {
            let all: Vec<&str> = cat.seats.keys().map(Name::as_str).collect();
            format!(
                "declare it in a module's [[seat]]; declared seats are: {}",
                all.join(", ")
            )
        }
    }
}

fn renamed(out: &mut Vec<Diagnostic>, r: &SeatRef) {
    if r.written != r.seat {
        out.push(
            Diagnostic::new(
                Kind::RenamedSeat,
                r.location.clone(),
                format!("seat `{}` was renamed to `{}`", r.written, r.seat),
            )
            .with_help(format!("write `{}`", r.seat)),
        );
    }
}

fn check_seat_refs(cat: &Catalogue, m: &Manifest, out: &mut Vec<Diagnostic>) {
    for r in cat.held_seats(m) {
        renamed(out, &r);
        if !cat.seats.contains_key(&r.seat) {
            out.push(
                Diagnostic::new(
                    Kind::UnknownSeat,
                    r.location.clone(),
                    format!("`{}` is claimed in [holds] but no module declares that seat and it is not a role", r.seat),
                )
                .with_help(seat_help(cat, &r.seat)),
            );
        }
    }
    for r in cat.used_seats(m) {
        renamed(out, &r);
        match cat.seats.get(&r.seat) {
            None => out.push(
                Diagnostic::new(
                    Kind::UnknownSeat,
                    r.location.clone(),
                    format!(
                        "[uses] seats names `{}`, which no module declares and is not a role",
                        r.seat
                    ),
                )
                .with_help(seat_help(cat, &r.seat)),
            ),
            Some(e) if e.decl.accepts.is_empty() => out.push(
                Diagnostic::new(
                    Kind::SeatTakesNoWork,
                    r.location.clone(),
                    format!(
                        "seat `{}` accepts no work, so using it submits nothing anywhere",
                        r.seat
                    ),
                )
                .with_help("to call its tools, list them in [tools] uses as `seat:<seat>.<tool>`"),
            ),
            Some(_) => {}
        }
    }
    let Some(run) = &m.run else { return };
    let values = run.command.iter().chain(run.env.iter().map(|e| &e.value));
    for p in values.flat_map(|v| v.placeholders.iter()) {
        if let Placeholder::Seat { seat, .. } = &p.value {
            let r = SeatRef {
                written: seat.clone(),
                seat: cat.resolve_seat(seat),
                location: m.locate(p.pos),
            };
            renamed(out, &r);
            if !cat.seats.contains_key(&r.seat) {
                out.push(
                    Diagnostic::new(
                        Kind::UnknownSeat,
                        r.location.clone(),
                        format!("`{}` names seat `{}`, which nobody declares: there is no holder to address", p.value, r.seat),
                    )
                    .with_help(seat_help(cat, &r.seat)),
                );
            }
        }
    }
}

fn names_list(items: &[Name]) -> String {
    if items.is_empty() {
        "nothing".into()
    } else {
        items
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn check_consumes(cat: &Catalogue, m: &Manifest, out: &mut Vec<Diagnostic>) {
    for c in cat.consumes(m) {
        if let Target::Seat(_) = &c.written.emitter {
            let r = SeatRef {
                written: c.written.emitter.name().clone(),
                seat: c.emitter.name().clone(),
                location: c.location.clone(),
            };
            renamed(out, &r);
        }
        let Some(pubs) = cat.publications(&c.emitter) else {
            unregistered(cat, Reference::Event(&c), out);
            continue;
        };
        // The comparison that matters: the subject subscribed against the
        // subjects published, not the names.
        if pubs
            .iter()
            .any(|p| pattern::overlap(&c.subject, &p.subject))
        {
            continue;
        }
        let emitted: Vec<Name> = pubs.iter().map(|p| p.event.clone()).collect();
        let mut d = Diagnostic::new(
            Kind::UnmatchedConsume,
            c.location.clone(),
            format!(
                "`{}` subscribes to `{}`, which `{}` never publishes (it emits {})",
                c.written,
                c.subject,
                c.emitter,
                names_list(&emitted)
            ),
        );
        if let EventSelector::Named(e) = &c.event
            && let Some(close) = suggest(e.as_str(), emitted.iter().map(Name::as_str))
        {
            d = d.with_help(format!("did you mean `{}.{close}`?", c.emitter));
        }
        out.push(d);
    }
}

/// A consumed event or a used tool, for [`unregistered`].
enum Reference<'a> {
    Event(&'a Consume),
    Tool(&'a ToolUse),
}

impl Reference<'_> {
    /// The same event or tool of `target` instead: as a manifest writes it,
    /// and its subject.
    fn of(&self, target: Target) -> (String, String) {
        match self {
            Reference::Event(c) => {
                let r = EventRef {
                    emitter: target,
                    event: c.event.clone(),
                };
                (r.to_string(), r.subject())
            }
            Reference::Tool(u) => {
                let r = ToolRef {
                    provider: target,
                    tool: u.tool.clone(),
                };
                (r.to_string(), r.subject())
            }
        }
    }
}

/// A reference to an emitter or provider that is not registered: a seat
/// named as a module (or the reverse) is an error, since the derived subject
/// is one nothing will ever publish on; otherwise a warning, as a module may
/// be installed before the one it listens to.
fn unregistered(cat: &Catalogue, r: Reference<'_>, out: &mut Vec<Diagnostic>) {
    let (target, written, subject, loc, event) = match r {
        Reference::Event(c) => (
            &c.emitter,
            c.written.to_string(),
            &c.subject,
            &c.location,
            true,
        ),
        Reference::Tool(u) => (
            &u.provider,
            u.written.to_string(),
            &u.subject,
            &u.location,
            false,
        ),
    };
    match target {
        Target::Module(name) if cat.seat(name).is_some() => {
            let what = if cat.seat(name).is_some_and(|s| s.module.is_none()) {
                "a role of the mesh"
            } else {
                "a seat"
            };
            let (fix, seat_subject) = r.of(Target::Seat(name.clone()));
            let (nobody, holder) = if event {
                ("published by nothing", "its holder publishes on")
            } else {
                ("served by nothing", "its holder serves")
            };
            out.push(
                Diagnostic::new(
                    Kind::SeatReadAsModule,
                    loc.clone(),
                    format!("`{written}` reads `{name}` as a module, but it is {what}: {subject} is {nobody}; {holder} {seat_subject}"),
                )
                .with_help(format!("write `{fix}`")),
            );
        }
        Target::Seat(name) if cat.module(name).is_some() => {
            let (fix, _) = r.of(Target::Module(name.clone()));
            out.push(
                Diagnostic::new(
                    Kind::ModuleReadAsSeat,
                    loc.clone(),
                    format!("`{written}` reads `{name}` as a seat, but it is a module and no seat has that name"),
                )
                .with_help(format!("write `{fix}`")),
            );
        }
        _ => {
            let (kind, noun) = if event {
                (Kind::UnregisteredEmitter, "emitter")
            } else {
                (Kind::UnregisteredProvider, "provider")
            };
            out.push(Diagnostic::new(
                kind,
                loc.clone(),
                format!("`{written}`: the {noun} `{target}` is not registered, so this cannot be checked yet"),
            ));
        }
    }
}

fn check_tools(cat: &Catalogue, m: &Manifest, out: &mut Vec<Diagnostic>) {
    for u in cat.tool_uses(m) {
        if let Target::Seat(_) = &u.written.provider {
            renamed(
                out,
                &SeatRef {
                    written: u.written.provider.name().clone(),
                    seat: u.provider.name().clone(),
                    location: u.location.clone(),
                },
            );
        }
        let Some(served) = cat.served_tools(&u.provider) else {
            unregistered(cat, Reference::Tool(&u), out);
            continue;
        };
        if served.iter().any(|(_, s)| pattern::covers(s, &u.subject)) {
            continue;
        }
        let names: Vec<Name> = served.iter().map(|(n, _)| n.clone()).collect();
        let mut d = Diagnostic::new(
            Kind::UnservedTool,
            u.location.clone(),
            format!(
                "`{}` calls `{}`, which `{}` does not serve (it serves {})",
                u.written,
                u.subject,
                u.provider,
                names_list(&names)
            ),
        );
        if let Some(close) = suggest(u.tool.as_str(), names.iter().map(Name::as_str)) {
            d = d.with_help(format!("did you mean `{}.{close}`?", u.provider));
        }
        out.push(d);
    }
}

/// An emitted local name `<x>-<e>` where `<x>` is another registered module
/// or a seat this module does not hold, and `<x>` itself emits `<e>`: it
/// reads as `<x>`'s event (consumers would look for it there).
fn check_emit_names(cat: &Catalogue, m: &Manifest, out: &mut Vec<Diagnostic>) {
    for e in &m.emits {
        let s = e.value.as_str();
        for (i, _) in s.match_indices('-') {
            let (Some(prefix), Some(rest)) = (s.get(..i), s.get(i + 1..)) else {
                continue;
            };
            let (Ok(prefix), Ok(rest)) = (Name::new(prefix), Name::new(rest)) else {
                continue;
            };
            let module_emits = prefix != m.name.value
                && cat
                    .module(&prefix)
                    .is_some_and(|o| o.emits.iter().any(|x| x.value == rest));
            let seat_emits = !m.holds.iter().any(|h| cat.resolve_seat(&h.value) == prefix)
                && cat
                    .seat(&prefix)
                    .is_some_and(|st| st.decl.emits.iter().any(|x| x.value == rest));
            let help = if seat_emits {
                format!(
                    "if this module does that job, hold seat `{prefix}`; its holder publishes `{rest}`"
                )
            } else {
                format!(
                    "consumers of `{prefix}.{rest}` will not hear this; name the event for what this module does"
                )
            };
            if module_emits || seat_emits {
                let whose = if seat_emits { "seat" } else { "module" };
                out.push(
                    Diagnostic::new(
                        Kind::EventReadsAsForeign,
                        m.locate(e.pos),
                        format!(
                            "`{s}` reads as event `{rest}` of {whose} `{prefix}`, but it is published as {}",
                            subjects::module_event(&m.name.value, &EventSelector::Named(e.value.clone()))
                        ),
                    )
                    .with_help(help),
                );
                break;
            }
        }
    }
}

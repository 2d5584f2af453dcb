//! The catalogue's index: every registered manifest and declared seat by
//! name, and each manifest's references resolved through the aliases to the
//! subjects they stand for.

use std::collections::BTreeMap;

use super::{Aliases, builtin_roles};
use crate::diagnostic::{Diagnostic, Kind, Location};
use crate::manifest::{EventRef, Located, Manifest, Scope, SeatDecl, Target, ToolRef};
use crate::names::Name;
use crate::subjects::{self, EventSelector};

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
    /// By declared name, aliases not followed: the checks must tell a name
    /// that is declared from one that only resolves to a declared seat.
    pub(super) seats: BTreeMap<Name, SeatEntry>,
    /// Duplicate modules and seats found while indexing.
    pub(super) conflicts: Vec<Diagnostic>,
}

impl Catalogue {
    /// Indexes `manifests` (sorted by path, so "first" is stable) with the
    /// built-in roles and `aliases`. Never fails: conflicts are kept and
    /// reported by [`super::check`]; the first declaration of a name is the one used.
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
                    subject: self.event_subject(&resolved),
                    emitter: resolved.emitter,
                    event: resolved.event,
                    location: m.locate(c.pos),
                }
            })
            .collect()
    }

    /// The subject events of `r` (its emitter resolved) are consumed on: a
    /// node-scoped seat's from any node's holder.
    pub fn event_subject(&self, r: &EventRef) -> String {
        match &r.emitter {
            Target::Seat(seat) if self.is_node_scoped(seat) => {
                subjects::seat_any_node_event(seat, &r.event)
            }
            _ => r.subject(),
        }
    }

    /// Whether `seat` is declared with `scope = "node"`.
    pub fn is_node_scoped(&self, seat: &Name) -> bool {
        self.seat(seat)
            .is_some_and(|e| e.decl.scope.value == Scope::Node)
    }

    /// `[tools] uses` of `m`, resolved to provider and subject.
    pub fn tool_uses(&self, m: &Manifest) -> Vec<ToolUse> {
        m.uses_tools
            .iter()
            .map(|u| self.tool_use(&u.value, m.locate(u.pos)))
            .collect()
    }

    /// One tool called as `written` at `location` (a manifest's `[tools]
    /// uses`, or a person's tools in a fleet file), resolved.
    pub fn tool_use(&self, written: &ToolRef, location: Location) -> ToolUse {
        let resolved = ToolRef {
            provider: self.resolve_target(&written.provider),
            tool: written.tool.clone(),
        };
        // A node-scoped seat's tool is answered by each node's holder; a
        // caller may ask any of them.
        let subject = match &resolved.provider {
            Target::Seat(seat) if self.is_node_scoped(seat) => {
                subjects::seat_any_node_tool(seat, &resolved.tool)
            }
            _ => resolved.subject(),
        };
        ToolUse {
            written: written.clone(),
            subject,
            provider: resolved.provider,
            tool: resolved.tool,
            location,
        }
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
                            subject: if entry.decl.scope.value == Scope::Node {
                                subjects::seat_any_node_event(
                                    &entry.decl.name.value,
                                    &EventSelector::Named(e.value.clone()),
                                )
                            } else {
                                subjects::seat_event(
                                    &entry.decl.name.value,
                                    &EventSelector::Named(e.value.clone()),
                                )
                            },
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

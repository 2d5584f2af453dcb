//! The checks that only show with every manifest in view. The one that
//! matters most compares the two halves of every subscription: the subject a
//! consumer's filter will have (derived through [`crate::subjects`]) against
//! the subjects its emitter publishes, with NATS wildcard overlap. Names
//! agreeing is not enough — a role's event lives under `mesh.seat.`, and a
//! consumer deriving `mesh.mod.<role>.event.<e>` hears nothing, without any
//! error anywhere.

use super::{Catalogue, Consume, SeatRef, ToolUse};
use crate::diagnostic::{self, Diagnostic, Kind, Location, suggest};
use crate::manifest::{self, EventRef, Manifest, Target, ToolRef};
use crate::names::Name;
use crate::placeholders::Placeholder;
use crate::subjects::{self, EventSelector, pattern};

/// Every problem in the catalogue: each manifest's lints, and everything
/// that only shows with all declarations in view. Sorted by file and line.
pub fn check(cat: &Catalogue) -> Vec<Diagnostic> {
    let mut out = cat.conflicts.clone();
    check_aliases(cat, &mut out);
    for m in cat.manifests() {
        out.extend(manifest::lint(m));
        check_seat_refs(cat, m, &mut out);
        check_consumes(cat, m, &mut out);
        check_consumer_filters(cat, m, &mut out);
        check_tools(cat, m, &mut out);
        check_emit_names(cat, m, &mut out);
    }
    diagnostic::sort(&mut out);
    out
}

fn check_aliases(cat: &Catalogue, out: &mut Vec<Diagnostic>) {
    for a in cat.aliases().entries() {
        let loc = |pos| Location::new(a.file.clone(), pos);
        if let Some(dup) = cat
            .aliases()
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
        let (cur, cycle) = cat.aliases().follow(&a.old.value);
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
    for p in m.filled_values().flat_map(|v| v.placeholders.iter()) {
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

pub(super) fn names_list(items: &[Name]) -> String {
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

/// A module's `consumes` become the filters of its one consumer, and the
/// server refuses a consumer whose filters overlap (JetStream error 10138):
/// the controller asserting it would fail to start, every time. Each
/// overlapping pair is reported once, at the entry to drop.
fn check_consumer_filters(cat: &Catalogue, m: &Manifest, out: &mut Vec<Diagnostic>) {
    let consumes = cat.consumes(m);
    for (i, first) in consumes.iter().enumerate() {
        for second in &consumes[i + 1..] {
            // The same text twice is the parser's duplicate entry.
            if first.written == second.written || !pattern::overlap(&first.subject, &second.subject)
            {
                continue;
            }
            out.push(overlapping(first, second));
        }
    }
}

/// The diagnostic for two overlapping entries, `first` written before
/// `second`: at the narrower one, naming the wider.
fn overlapping(first: &Consume, second: &Consume) -> Diagnostic {
    let (wide, narrow) =
        if first.subject != second.subject && pattern::covers(&second.subject, &first.subject) {
            (second, first)
        } else {
            (first, second)
        };
    let (message, help) = if wide.subject == narrow.subject {
        (
            format!(
                "`{}` and `{}` both subscribe to `{}`: the module's consumer would carry one filter twice, which the server refuses",
                wide.written, narrow.written, wide.subject
            ),
            format!(
                "drop `{}`: `{}` delivers the same events",
                narrow.written, wide.written
            ),
        )
    } else if pattern::covers(&wide.subject, &narrow.subject) {
        (
            format!(
                "`{}` (`{}`) is inside the wider `{}` (`{}`) of the same consumer: the server refuses overlapping filters",
                narrow.written, narrow.subject, wide.written, wide.subject
            ),
            format!(
                "drop the narrower `{}`: `{}` delivers its events already",
                narrow.written, wide.written
            ),
        )
    } else {
        (
            format!(
                "`{}` (`{}`) overlaps `{}` (`{}`) in the same consumer: the server refuses overlapping filters",
                narrow.written, narrow.subject, wide.written, wide.subject
            ),
            "make the two disjoint, or replace both with one wider entry".to_string(),
        )
    };
    Diagnostic::new(Kind::OverlappingConsumes, narrow.location.clone(), message).with_help(help)
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
        out.extend(check_tool_use(cat, &u));
    }
}

/// What is wrong with one used tool: a provider not registered (a warning),
/// a seat read as a module or the reverse, a tool its provider does not
/// serve (with the close one). Shared by manifests' `[tools] uses` and a
/// fleet file's persons, so both are held to the same rules.
pub fn check_tool_use(cat: &Catalogue, u: &ToolUse) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    if let Target::Seat(_) = &u.written.provider {
        renamed(
            &mut out,
            &SeatRef {
                written: u.written.provider.name().clone(),
                seat: u.provider.name().clone(),
                location: u.location.clone(),
            },
        );
    }
    let Some(served) = cat.served_tools(&u.provider) else {
        unregistered(cat, Reference::Tool(u), &mut out);
        return out;
    };
    if served.iter().any(|(_, s)| pattern::covers(s, &u.subject)) {
        return out;
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
    out
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

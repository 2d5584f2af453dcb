//! References to another module's or a seat's events and tools, as written in
//! `[events] consumes` and `[tools] uses`:
//!
//! | written               | means                                   | subject                             |
//! |-----------------------|-----------------------------------------|-------------------------------------|
//! | `git-server.pushed`   | event `pushed` of module `git-server`   | `mesh.mod.git-server.event.pushed`  |
//! | `seat:git.pushed`     | event `pushed` of whoever holds `git`   | `mesh.seat.git.event.pushed`        |
//! | `watcher.*`           | any one event token of `watcher`        | `mesh.mod.watcher.event.*`          |
//! | `watcher.**`          | every event of `watcher`                | `mesh.mod.watcher.event.>`          |
//! | `audit-log.search`    | tool `search` of module `audit-log`     | `mesh.mod.audit-log.tool.search`    |
//! | `seat:git.clone`      | tool `clone` of whoever holds `git`     | `mesh.seat.git.tool.clone`          |
//!
//! Tools take no wildcards: a caller names each request it makes.

use std::fmt;
use std::ops::Range;

use crate::diagnostic::Kind;
use crate::names::{Name, NameError};
use crate::subjects::{self, EventSelector};

/// Whose events or tools a reference names: a module by its name, or a seat
/// (including the mesh's own roles), whichever module holds it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    Module(Name),
    Seat(Name),
}

impl Target {
    pub fn name(&self) -> &Name {
        match self {
            Target::Module(n) | Target::Seat(n) => n,
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Module(n) => write!(f, "{n}"),
            Target::Seat(n) => write!(f, "{SEAT_PREFIX}{n}"),
        }
    }
}

/// A consumed event: emitter and which of its events.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventRef {
    pub emitter: Target,
    pub event: EventSelector,
}

impl EventRef {
    /// The subject a consumer filter on this reference has. A seat's (or
    /// role's) event is under `mesh.seat.`, never a module namespace. A
    /// node-scoped seat's events carry the node: only the catalogue knows a
    /// seat's scope, so consumers resolve through `Catalogue::consumes`.
    pub fn subject(&self) -> String {
        match &self.emitter {
            Target::Module(m) => subjects::module_event(m, &self.event),
            Target::Seat(s) => subjects::seat_event(s, &self.event),
        }
    }
}

impl fmt::Display for EventRef {
    /// In manifest syntax (`**`, not NATS `>`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.emitter, self.event.written())
    }
}

/// A used tool: provider and tool name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ToolRef {
    pub provider: Target,
    pub tool: Name,
}

impl ToolRef {
    /// The subject a call to this tool is published to.
    pub fn subject(&self) -> String {
        match &self.provider {
            Target::Module(m) => subjects::module_tool(m, &self.tool),
            Target::Seat(s) => subjects::seat_tool(s, &self.tool),
        }
    }
}

impl fmt::Display for ToolRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.provider, self.tool)
    }
}

/// Why a reference does not parse; `range` is the byte range (within the
/// written string) to point at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RefError {
    pub kind: Kind,
    pub range: Range<usize>,
    pub message: String,
    pub help: Option<String>,
}

#[derive(Clone, Copy, PartialEq)]
enum What {
    Event,
    Tool,
}

impl What {
    fn bad(self) -> Kind {
        match self {
            What::Event => Kind::BadEventRef,
            What::Tool => Kind::BadToolRef,
        }
    }
    fn noun(self) -> &'static str {
        match self {
            What::Event => "event",
            What::Tool => "tool",
        }
    }
}

/// What marks a reference to a seat rather than a module.
pub(crate) const SEAT_PREFIX: &str = "seat:";

/// Parses `<module>.<event>` or `seat:<seat>.<event>`; the event may be a
/// name, `*` (one event) or `**` (every event).
pub fn parse_event_ref(s: &str) -> Result<EventRef, RefError> {
    let (emitter, (event, range)) = split(s, What::Event)?;
    let event = match event {
        "*" => EventSelector::AnyOne,
        "**" => EventSelector::All,
        ">" => {
            return Err(RefError {
                kind: Kind::BadEventRef,
                range,
                message: format!("`>` in `{s}` is NATS syntax, not manifest syntax"),
                help: Some("write `**` for every event".into()),
            });
        }
        e => EventSelector::Named(name(e, range.start, "event")?),
    };
    Ok(EventRef { emitter, event })
}

/// Parses `<module>.<tool>` or `seat:<seat>.<tool>`.
pub fn parse_tool_ref(s: &str) -> Result<ToolRef, RefError> {
    let (provider, (tool, range)) = split(s, What::Tool)?;
    if tool.contains('*') || tool == ">" {
        return Err(RefError {
            kind: Kind::BadToolRef,
            range,
            message: format!("`{s}` uses a wildcard; tools are named one by one"),
            help: Some("list each tool this module calls".into()),
        });
    }
    Ok(ToolRef {
        provider,
        tool: name(tool, range.start, "tool")?,
    })
}

/// Splits into the target and the last token (with its byte range).
fn split(s: &str, what: What) -> Result<(Target, (&str, Range<usize>)), RefError> {
    let bad = |range: Range<usize>, message: String, help: Option<String>| RefError {
        kind: what.bad(),
        range,
        message,
        help,
    };
    let form = format!("`<module>.<{0}>` or `seat:<seat>.<{0}>`", what.noun());
    if let Some(short) = from_subject(s, what) {
        return Err(bad(
            0..s.len(),
            format!(
                "`{s}` is a subject; manifests name {}s, and mesh derives the subject",
                what.noun()
            ),
            Some(format!("write `{short}`")),
        ));
    }
    let (is_seat, offset) = match s.strip_prefix(SEAT_PREFIX) {
        Some(_) => (true, SEAT_PREFIX.len()),
        None => {
            let first_dot = s.find('.').unwrap_or(s.len());
            if let Some(colon) = s.get(..first_dot).and_then(|h| h.find(':')) {
                let prefix = s.get(..colon).unwrap_or("");
                return Err(bad(
                    0..colon + 1,
                    format!("unknown prefix `{prefix}:` in `{s}`; the only prefix is `seat:`"),
                    Some(format!("write {form}")),
                ));
            }
            (false, 0)
        }
    };
    let body = s.get(offset..).unwrap_or("");
    let mut tokens = Vec::new();
    let mut start = offset;
    for t in body.split('.') {
        tokens.push((t, start..start + t.len()));
        start += t.len() + 1;
    }
    if s.is_empty() {
        return Err(bad(
            0..0,
            format!("an empty {} reference", what.noun()),
            Some(format!("write {form}")),
        ));
    }
    let (first, first_range) = tokens.first().cloned().unwrap_or(("", 0..0));
    if matches!(first, "*" | "**" | ">") {
        return Err(RefError {
            kind: Kind::MisplacedWildcard,
            range: first_range,
            message: format!(
                "`{s}` has a wildcard in place of the emitter; a consumer names whose {}s it wants",
                what.noun()
            ),
            help: Some(format!("write {form}")),
        });
    }
    if tokens.len() == 1 {
        let help = match what {
            What::Event => format!("write `{s}.<event>`, or `{s}.**` for every event"),
            What::Tool => format!("write `{s}.<tool>`"),
        };
        return Err(bad(
            0..s.len(),
            format!("`{s}` names no {}", what.noun()),
            Some(help),
        ));
    }
    if what == What::Event {
        // `**` means "the rest"; anywhere but last it would be derived to a
        // `>` in the middle of a subject, which NATS refuses.
        for (t, r) in tokens.iter().take(tokens.len() - 1).skip(1) {
            if *t == "**" {
                return Err(RefError {
                    kind: Kind::MisplacedWildcard,
                    range: r.clone(),
                    message: format!("`**` in `{s}` is not the last token"),
                    help: Some("`**` means every event and may only end a reference".into()),
                });
            }
        }
    }
    if tokens.len() > 2 {
        return Err(bad(
            0..s.len(),
            format!(
                "`{s}` has {} dots; a reference is {form}, and names contain no dots",
                tokens.len() - 1
            ),
            None,
        ));
    }
    let owner = name(
        first,
        first_range.start,
        if is_seat { "seat" } else { "module" },
    )?;
    let target = if is_seat {
        Target::Seat(owner)
    } else {
        Target::Module(owner)
    };
    let (last, last_range) = tokens.last().cloned().unwrap_or(("", s.len()..s.len()));
    Ok((target, (last, last_range)))
}

/// `mesh.mod.X.event.Y` → `X.Y`, `mesh.seat.X.tool.Y` → `seat:X.Y`: someone
/// wrote the derived subject instead of the reference.
fn from_subject(s: &str, what: What) -> Option<String> {
    let t: Vec<&str> = s.split('.').collect();
    let verb = match what {
        What::Event => "event",
        What::Tool => "tool",
    };
    match t.as_slice() {
        ["mesh", "mod", m, v, e] if *v == verb => {
            Some(format!("{m}.{}", EventSelector::written_token(e)))
        }
        ["mesh", "seat", m, v, e] if *v == verb => Some(format!(
            "{SEAT_PREFIX}{m}.{}",
            EventSelector::written_token(e)
        )),
        _ => None,
    }
}

/// Validates one token (at `offset` of the reference) as a [`Name`],
/// pointing at the offending character.
fn name(token: &str, offset: usize, what: &str) -> Result<Name, RefError> {
    valid_name(
        token,
        what,
        |r| offset + r.start..offset + r.end,
        offset..offset + token.len(),
    )
}

/// Validates `token` as a [`Name`]. A bad one is refused as a bad `what`
/// name pointing at the offending character (its range within `token`,
/// mapped by `at`), or at `whole` where no one character is to blame.
pub(crate) fn valid_name(
    token: &str,
    what: &str,
    at: impl FnOnce(Range<usize>) -> Range<usize>,
    whole: Range<usize>,
) -> Result<Name, RefError> {
    Name::new(token).map_err(|e| RefError {
        kind: Kind::BadName,
        range: name_error_range(token, &e).map(at).unwrap_or(whole),
        message: format!("bad {what} name: {e}"),
        help: None,
    })
}

/// The byte range within `s` of the character a [`NameError`] names.
pub fn name_error_range(s: &str, e: &NameError) -> Option<Range<usize>> {
    let position = match e {
        NameError::BadChar { position, .. } => *position,
        NameError::BadStart { .. } => 1,
        NameError::Empty | NameError::TooLong { .. } => return None,
    };
    let (i, c) = s.char_indices().nth(position.checked_sub(1)?)?;
    Some(i..i + c.len_utf8())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    #[test]
    fn event_refs_resolve_to_subjects() {
        let cases = [
            ("git-server.pushed", "mesh.mod.git-server.event.pushed"),
            ("seat:git.pushed", "mesh.seat.git.event.pushed"),
            (
                "seat:mesh-build-machine.built",
                "mesh.seat.mesh-build-machine.event.built",
            ),
            ("catalogue.*", "mesh.mod.catalogue.event.*"),
            ("watcher.**", "mesh.mod.watcher.event.>"),
        ];
        for (written, subject) in cases {
            let r = parse_event_ref(written).unwrap();
            assert_eq!(r.subject(), subject);
            assert_eq!(r.to_string(), written);
        }
    }

    #[test]
    fn tool_refs_resolve_to_subjects() {
        let r = parse_tool_ref("seat:git.clone").unwrap();
        assert_eq!(
            r,
            ToolRef {
                provider: Target::Seat(n("git")),
                tool: n("clone")
            }
        );
        assert_eq!(r.subject(), "mesh.seat.git.tool.clone");
        assert_eq!(
            parse_tool_ref("audit-log.search").unwrap().subject(),
            "mesh.mod.audit-log.tool.search"
        );
    }

    #[test]
    fn refusals_point_at_the_token() {
        let cases: [(&str, Kind, Range<usize>); 11] = [
            ("git.**.x", Kind::MisplacedWildcard, 4..6),
            ("**.pushed", Kind::MisplacedWildcard, 0..2),
            ("git", Kind::BadEventRef, 0..3),
            ("git.a.b", Kind::BadEventRef, 0..7),
            ("seats:git.x", Kind::BadEventRef, 0..6),
            ("git.>", Kind::BadEventRef, 4..5),
            ("git.Pushed", Kind::BadName, 4..5),
            ("seat:Git.x", Kind::BadName, 5..6),
            ("mesh.mod.git.event.pushed", Kind::BadEventRef, 0..25),
            ("", Kind::BadEventRef, 0..0),
            ("git.", Kind::BadName, 4..4),
        ];
        for (s, kind, range) in cases {
            let e = parse_event_ref(s).unwrap_err();
            assert_eq!((e.kind, e.range.clone()), (kind, range), "{s}: {e:?}");
        }
        let e = parse_event_ref("mesh.seat.git.event.>").unwrap_err();
        assert_eq!(e.help.as_deref(), Some("write `seat:git.**`"));
        assert_eq!(parse_tool_ref("git.*").unwrap_err().kind, Kind::BadToolRef);
    }
}

//! Diagnostics as data: what `mesh check` (and registration) reports, where,
//! and how to fix it. Rendering is pure: text with the source line and a
//! caret, or JSON.

use std::fmt;

use serde::{Serialize, Serializer};

mod render;

pub use render::{
    Entry, MAX_PER_FILE, MESSAGE_LIMIT, More, SOURCE_WINDOW, cap_per_file, clip, escape_controls,
    render_json, render_text, thousands,
};

/// A position in a source file: 1-based line and column (in characters), and
/// how many characters to underline (at least 1, never past the line's end).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Pos {
    pub line: usize,
    pub col: usize,
    pub len: usize,
}

impl Pos {
    /// The start of a file: where a problem with no better place is reported.
    pub const START: Pos = Pos {
        line: 1,
        col: 1,
        len: 1,
    };
}

impl Default for Pos {
    fn default() -> Self {
        Pos::START
    }
}

/// A [`Pos`] in a named file: what a later `mesh authority explain` prints as
/// the cause of a permission.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Location {
    pub file: String,
    pub line: usize,
    pub col: usize,
    #[serde(skip)]
    pub len: usize,
}

impl Location {
    pub fn new(file: impl Into<String>, pos: Pos) -> Self {
        Location {
            file: file.into(),
            line: pos.line,
            col: pos.col,
            len: pos.len,
        }
    }

    pub fn pos(&self) -> Pos {
        Pos {
            line: self.line,
            col: self.col,
            len: self.len,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.col)
    }
}

/// Whether a diagnostic refuses the catalogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

macro_rules! kinds {
    ($( $(#[$doc:meta])* $variant:ident = $code:literal, )*) => {
        /// What is wrong, as a stable code (printed as `error[code]` and in
        /// JSON): scripts and tests match on these, so never rename one.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Kind {
            $( $(#[$doc])* $variant, )*
        }

        impl Kind {
            /// Every kind, in declaration order.
            pub const ALL: &'static [Kind] = &[$( Kind::$variant, )*];

            /// The kebab-case code.
            pub fn code(self) -> &'static str {
                match self {
                    $( Kind::$variant => $code, )*
                }
            }

            /// The kind with this code.
            pub fn from_code(code: &str) -> Option<Kind> {
                match code {
                    $( $code => Some(Kind::$variant), )*
                    _ => None,
                }
            }
        }
    };
}

kinds! {
    /// The file is not UTF-8 (TOML must be).
    NotUtf8 = "not-utf8",
    /// The file is not valid TOML.
    TomlSyntax = "toml-syntax",
    /// A field the manifest format does not have (usually a typo).
    UnknownField = "unknown-field",
    /// A field of the wrong TOML type.
    WrongType = "wrong-type",
    /// A required field is absent.
    MissingField = "missing-field",
    /// A name outside `[a-z0-9][a-z0-9-]*` or longer than 64.
    BadName = "bad-name",
    /// A value outside the field's allowed set (scope, driver, a path, a reason).
    BadValue = "bad-value",
    /// The same entry twice in one list or table.
    DuplicateEntry = "duplicate-entry",
    /// `emits` names the module's own event qualified (`audit-log.written`).
    QualifiedEvent = "qualified-event",
    /// `emits` names an event under another module's or a seat's name.
    ForeignEvent = "foreign-event",
    /// A consumed event reference that is not `<module>.<event>` or `seat:<seat>.<event>`.
    BadEventRef = "bad-event-ref",
    /// `**` anywhere but last, or a wildcard in place of the emitter.
    MisplacedWildcard = "misplaced-wildcard",
    /// A used tool reference that is not `<module>.<tool>` or `seat:<seat>.<tool>`.
    BadToolRef = "bad-tool-ref",
    /// A `${...}` placeholder that does not parse.
    BadPlaceholder = "bad-placeholder",
    /// `${file:NAME}` with no `[[file]]` of that name.
    UndeclaredFile = "undeclared-file",
    /// `${secret:..}` in `[run] env` without `secrets-in-environment`.
    SecretInEnvironment = "secret-in-environment",
    /// `${secret:..}` on the command line, where every local user can read it.
    SecretInCommand = "secret-in-command",
    /// `[[file]] name = "bus-users"` by a module not holding `mesh-broker`.
    BusUsersWithoutBroker = "bus-users-without-broker",
    /// Two manifests with one module name.
    DuplicateModule = "duplicate-module",
    /// Two declarations of one seat (two modules, or a module and the mesh).
    DuplicateSeat = "duplicate-seat",
    /// A seat held, used or addressed by a placeholder that nobody declares.
    UnknownSeat = "unknown-seat",
    /// A consumed event whose registered emitter publishes no matching subject.
    UnmatchedConsume = "unmatched-consume",
    /// Two `consumes` entries of one module whose filters overlap (one
    /// covers the other, or both derive to one subject): the server refuses
    /// the module's consumer.
    OverlappingConsumes = "overlapping-consumes",
    /// `<name>.<event>` where `<name>` is a seat or role, not a module.
    SeatReadAsModule = "seat-read-as-module",
    /// `seat:<name>.<event>` where `<name>` is a module, not a seat.
    ModuleReadAsSeat = "module-read-as-seat",
    /// A used tool that its registered module or seat does not serve.
    UnservedTool = "unserved-tool",
    /// An alias whose new name nobody declares.
    AliasUnknownTarget = "alias-unknown-target",
    /// An alias whose old name is still declared: the rename is half done.
    AliasShadowsSeat = "alias-shadows-seat",
    /// Aliases that lead back to themselves.
    AliasCycle = "alias-cycle",
    /// Warning: a consumed event's emitter is not registered (yet).
    UnregisteredEmitter = "unregistered-emitter",
    /// Warning: a used tool's module or seat is not registered (yet).
    UnregisteredProvider = "unregistered-provider",
    /// Warning: a seat named by its old name (an alias resolved it).
    RenamedSeat = "renamed-seat",
    /// Warning: a local event name that reads as another emitter's event.
    EventReadsAsForeign = "event-reads-as-foreign",
    /// Warning: `secrets-in-environment` given but no secret in `env`.
    UnusedSecretsReason = "unused-secrets-reason",
    /// Warning: holds `mesh-broker` but declares no `bus-users` file.
    BrokerWithoutUsersFile = "broker-without-users-file",
    /// Warning: `[uses] seats` names a seat that accepts no work.
    SeatTakesNoWork = "seat-takes-no-work",
}

impl Kind {
    /// The severity this kind is reported at.
    pub fn severity(self) -> Severity {
        match self {
            Kind::UnregisteredEmitter
            | Kind::UnregisteredProvider
            | Kind::RenamedSeat
            | Kind::EventReadsAsForeign
            | Kind::UnusedSecretsReason
            | Kind::BrokerWithoutUsersFile
            | Kind::SeatTakesNoWork => Severity::Warning,
            _ => Severity::Error,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

impl Serialize for Kind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.code())
    }
}

/// One finding: what, how bad, where, and (when known) how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub kind: Kind,
    pub severity: Severity,
    #[serde(flatten)]
    pub location: Location,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub help: Option<String>,
}

impl Diagnostic {
    /// A diagnostic at the kind's own severity.
    pub fn new(kind: Kind, location: Location, message: impl Into<String>) -> Self {
        Diagnostic {
            kind,
            severity: kind.severity(),
            location,
            message: message.into(),
            help: None,
        }
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    pub fn file(&self) -> &str {
        &self.location.file
    }

    pub fn line(&self) -> usize {
        self.location.line
    }
}

impl fmt::Display for Diagnostic {
    /// `file:line:col: error[kind]: message`, without source or help; safe
    /// to print (control characters escaped, a long message cut).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        render::header(f, self)
    }
}

impl std::error::Error for Diagnostic {}

/// Sorts diagnostics by file, line, column, then kind, so output is stable.
pub fn sort(diags: &mut [Diagnostic]) {
    diags.sort_by(|a, b| {
        (&a.location.file, a.location.line, a.location.col, a.kind).cmp(&(
            &b.location.file,
            b.location.line,
            b.location.col,
            b.kind,
        ))
    });
}

/// Byte offsets to line/column, for one source text.
#[derive(Debug, Clone)]
pub struct LineIndex<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    pub fn new(text: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { text, starts }
    }

    /// The position of the byte range `start..end`; offsets past the end or
    /// inside a character are clamped, never a panic.
    pub fn pos(&self, start: usize, end: usize) -> Pos {
        let start = self.floor(start);
        let end = self.floor(end.max(start));
        let line_ix = match self.starts.binary_search(&start) {
            Ok(i) => i,
            Err(i) => i.saturating_sub(1),
        };
        let line_start = self.starts.get(line_ix).copied().unwrap_or(0);
        let line_end = self
            .starts
            .get(line_ix + 1)
            .map(|s| s.saturating_sub(1))
            .unwrap_or(self.text.len());
        let col = self
            .text
            .get(line_start..start)
            .map_or(0, |s| s.chars().count())
            + 1;
        let until = end.min(line_end).max(start);
        let len = self.text.get(start..until).map_or(0, |s| s.chars().count());
        Pos {
            line: line_ix + 1,
            col,
            len: len.max(1),
        }
    }

    fn floor(&self, mut i: usize) -> usize {
        if i > self.text.len() {
            return self.text.len();
        }
        while i > 0 && !self.text.is_char_boundary(i) {
            i -= 1;
        }
        i
    }
}

/// Levenshtein distance, for "did you mean".
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let subst = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = subst.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The candidate closest to `word`, if close enough to be a likely typo
/// (at most a third of the word's length, and at least 1, edits away).
pub fn suggest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    closest(word, candidates, 1).pop()
}

/// Up to `max` candidates close enough to `word` to be a likely typo (as for
/// [`suggest`]), closest first; ties keep the candidates' order.
pub fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    max: usize,
) -> Vec<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    let mut close: Vec<(usize, &str)> = candidates
        .into_iter()
        // Lengths differing by more than the limit cannot be within it: skip
        // the quadratic distance for most of a large mesh's names.
        .filter(|c| c.chars().count().abs_diff(word.chars().count()) <= limit)
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, _)| *d <= limit)
        .collect();
    close.sort_by_key(|(d, _)| *d);
    close.into_iter().take(max).map(|(_, c)| c).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_inside_a_character_or_past_the_end_are_clamped() {
        // `é` is bytes 1..3: an offset at 2 falls back to its start.
        let ix = LineIndex::new("aé b\nxy");
        assert_eq!(
            ix.pos(2, 3),
            Pos {
                line: 1,
                col: 2,
                len: 1
            }
        );
        assert_eq!(
            ix.pos(1, 3),
            Pos {
                line: 1,
                col: 2,
                len: 1
            }
        );
        assert_eq!(
            ix.pos(4, 5),
            Pos {
                line: 1,
                col: 4,
                len: 1
            }
        );
        // Past the end: the end of the text, on its last line.
        assert_eq!(
            ix.pos(100, 200),
            Pos {
                line: 2,
                col: 3,
                len: 1
            }
        );
        assert_eq!(
            ix.pos(8, 8),
            Pos {
                line: 2,
                col: 3,
                len: 1
            }
        );
        assert_eq!(
            ix.pos(7, 8),
            Pos {
                line: 2,
                col: 2,
                len: 1
            }
        );
        assert_eq!(
            ix.pos(0, 0),
            Pos {
                line: 1,
                col: 1,
                len: 1
            }
        );
    }

    #[test]
    fn a_location_keeps_its_position_and_severity_follows_the_kind() {
        let pos = Pos {
            line: 3,
            col: 7,
            len: 4,
        };
        let at = Location::new("m.toml", pos);
        assert_eq!(at.pos(), pos);
        let warn = Diagnostic::new(Kind::SeatTakesNoWork, at.clone(), "w");
        let err = Diagnostic::new(Kind::UnknownField, at, "e");
        assert!(!warn.is_error() && err.is_error());
    }

    #[test]
    fn codes_round_trip_and_are_kebab_case() {
        for k in Kind::ALL {
            assert_eq!(Kind::from_code(k.code()), Some(*k));
            assert!(
                k.code()
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '-' || c.is_ascii_digit())
            );
        }
    }

    #[test]
    fn line_index_counts_characters() {
        let text = "ab\nçd = 1\n";
        let ix = LineIndex::new(text);
        assert_eq!(
            ix.pos(0, 2),
            Pos {
                line: 1,
                col: 1,
                len: 2
            }
        );
        let d = text.find('d').unwrap();
        assert_eq!(
            ix.pos(d, d + 1),
            Pos {
                line: 2,
                col: 2,
                len: 1
            }
        );
        // out of range and mid-character offsets are clamped
        assert_eq!(ix.pos(1000, 2000).line, 3);
        let p = ix.pos(4, 5);
        assert_eq!((p.line, p.col), (2, 1));
    }

    #[test]
    fn suggests_close_words_only() {
        assert_eq!(suggest("comand", ["command", "env"]), Some("command"));
        assert_eq!(suggest("xyz", ["command", "env"]), None);
        assert_eq!(
            closest(
                "host_n1",
                ["host_n12", "host_n2", "person_n1", "host_n1x"],
                2
            ),
            ["host_n12", "host_n2"]
        );
    }
}

//! Rendering diagnostics for a terminal, safely: manifest text is the
//! operator's input, so a control character in it must not reach the
//! terminal as one, and neither a huge line nor thousands of findings may
//! flood the screen.

use std::borrow::Cow;
use std::fmt::{self, Write as _};

use super::{Diagnostic, Severity};

/// Characters of a source line shown around the caret: a 10 MB line must not
/// print 10 MB.
pub const SOURCE_WINDOW: usize = 120;
/// Of the window, how many characters are kept before the caret.
const CONTEXT_BEFORE: usize = SOURCE_WINDOW / 3;
/// Longest message or help shown, in characters: a message may quote a value
/// as long as the file.
pub const MESSAGE_LIMIT: usize = 300;
/// Diagnostics printed per file before the rest are only counted: 5,000
/// findings on one line must not print the line 5,000 times.
pub const MAX_PER_FILE: usize = 50;

/// Marks text cut away at either end of a source line or message.
const CUT: char = '…';

/// Whether `c` could act on a terminal or hide or reorder text when printed:
/// C0 and C1 controls and DEL (escape sequences start with ESC or CSI), and
/// the invisible and bidirectional formatting characters (a right-to-left
/// override makes a line read other than it is).
fn is_unsafe(c: char) -> bool {
    (c.is_control() && c != '\t')
        || matches!(c,
            '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{2069}'
            | '\u{FEFF}')
}

/// How `c` is printed: itself, or escaped as `\u{1b}`. Tabs are kept so a
/// caret under a tab-indented line stays aligned.
fn shown(c: char) -> Shown {
    if is_unsafe(c) {
        Shown::Escaped(c)
    } else {
        Shown::Plain(c)
    }
}

enum Shown {
    Plain(char),
    Escaped(char),
}

impl Shown {
    /// Columns it takes (a character counts as one: wide characters are not
    /// measured, as before).
    fn width(&self) -> usize {
        match self {
            Shown::Plain(_) => 1,
            Shown::Escaped(c) => c.escape_unicode().count(),
        }
    }

    fn push_to(&self, out: &mut String) {
        match self {
            Shown::Plain(c) => out.push(*c),
            Shown::Escaped(c) => out.extend(c.escape_unicode()),
        }
    }
}

/// `s` with every control or formatting character escaped (`\u{1b}`), safe
/// to print to a terminal; tabs are kept.
pub fn escape_controls(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        shown(c).push_to(&mut out);
    }
    Cow::Owned(out)
}

/// `s` escaped and cut to at most `max` characters, `…` marking the cut.
pub fn clip(s: &str, max: usize) -> String {
    let mut out = String::new();
    for (taken, c) in s.chars().enumerate() {
        if taken == max {
            out.push(CUT);
            break;
        }
        shown(c).push_to(&mut out);
    }
    out
}

/// The header line: `file:line:col: error[kind]: message`, escaped and cut.
pub(super) fn header(f: &mut fmt::Formatter<'_>, d: &Diagnostic) -> fmt::Result {
    let l = &d.location;
    write!(
        f,
        "{}:{}:{}: {}[{}]: {}",
        escape_controls(&l.file),
        l.line,
        l.col,
        d.severity,
        d.kind,
        clip(&d.message, MESSAGE_LIMIT)
    )
}

/// Renders one diagnostic for a terminal:
///
/// ```text
/// path/mesh.toml:4:1: error[unknown-field]: unknown field `comand` in [run]
///     4 | comand = ["audit-log"]
///       | ^^^^^^
///   = help: did you mean `command`?
/// ```
///
/// `source` is the text of the diagnostic's file; without it (or when the
/// line is out of range) the source and caret lines are left out. Control
/// characters are escaped everywhere, and a source line longer than
/// [`SOURCE_WINDOW`] is cut to a window around the caret, marked with `…`.
pub fn render_text(d: &Diagnostic, source: Option<&str>) -> String {
    let loc = &d.location;
    let mut out = format!("{d}\n");
    if let Some(line) = source.and_then(|s| s.lines().nth(loc.line.saturating_sub(1))) {
        let line = line.trim_end_matches('\r');
        let (text, caret) = excerpt(line, loc.col, loc.len);
        let number = loc.line.to_string();
        let gutter = " ".repeat(number.len());
        let _ = writeln!(out, "  {number} | {text}");
        let _ = writeln!(out, "  {gutter} | {caret}");
    }
    if let Some(help) = &d.help {
        let _ = writeln!(out, "  = help: {}", clip(help, MESSAGE_LIMIT));
    }
    out
}

/// The part of `line` shown, and the caret line under it: `col` is 1-based,
/// `len` characters are underlined. Lines longer than [`SOURCE_WINDOW`] are
/// cut to a window that holds the caret's start.
fn excerpt(line: &str, col: usize, len: usize) -> (String, String) {
    let n = line.chars().count();
    let start = col.saturating_sub(1);
    let (from, to) = if n <= SOURCE_WINDOW {
        (0, n)
    } else {
        let to = (start.saturating_sub(CONTEXT_BEFORE) + SOURCE_WINDOW).min(n);
        (to.saturating_sub(SOURCE_WINDOW), to)
    };
    // The loop stops at the window's end, so the carets never run past it.
    let caret_end = start + len.max(1);
    let mut text = String::new();
    let mut caret = String::new();
    if from > 0 {
        text.push(CUT);
        caret.push(' ');
    }
    let mut carets = 0;
    for (i, c) in line.chars().enumerate().skip(from).take(to - from) {
        let s = shown(c);
        s.push_to(&mut text);
        if i < start {
            // Tabs are kept as they are in both lines so the caret stays aligned.
            if c == '\t' {
                caret.push('\t');
            } else {
                caret.extend(std::iter::repeat_n(' ', s.width()));
            }
        } else if i < caret_end {
            carets += s.width();
        }
    }
    if to < n {
        text.push(CUT);
    }
    caret.extend(std::iter::repeat_n('^', carets.max(1)));
    (text, caret)
}

/// Renders diagnostics as a JSON array of objects with `kind`, `severity`,
/// `file`, `line`, `col`, `message` and (when present) `help`. Every
/// diagnostic is kept, whole: JSON escapes control characters itself.
pub fn render_json(diags: &[Diagnostic]) -> String {
    // Serializing plain strings and integers cannot fail; fall back to an
    // empty array rather than panic should that ever change.
    serde_json::to_string_pretty(diags).unwrap_or_else(|_| "[]".to_string())
}

/// One entry of a printed report: a diagnostic, or the count of those of a
/// file that were left out.
#[derive(Debug, PartialEq, Eq)]
pub enum Entry<'a> {
    Shown(&'a Diagnostic),
    More(More<'a>),
}

/// Diagnostics of one file not printed: `... and 4,950 more errors in FILE`.
#[derive(Debug, PartialEq, Eq)]
pub struct More<'a> {
    pub file: &'a str,
    pub errors: usize,
    pub warnings: usize,
}

impl fmt::Display for More<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = |n: usize, what: &str| {
            format!(
                "{} more {what}{}",
                thousands(n),
                if n == 1 { "" } else { "s" }
            )
        };
        let parts: Vec<String> = [(self.errors, "error"), (self.warnings, "warning")]
            .into_iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, w)| count(n, w))
            .collect();
        write!(
            f,
            "... and {} in {}",
            parts.join(" and "),
            escape_controls(self.file)
        )
    }
}

/// At most `max` diagnostics per file, in the order given, each file's
/// followed by one [`More`] counting the rest; a file's diagnostics are kept
/// together (in the order its first one appears).
pub fn cap_per_file(diags: &[Diagnostic], max: usize) -> Vec<Entry<'_>> {
    let mut files: Vec<(&str, Vec<&Diagnostic>, More<'_>)> = Vec::new();
    for d in diags {
        let ix = match files.iter().position(|(f, ..)| *f == d.file()) {
            Some(ix) => ix,
            None => {
                let more = More {
                    file: d.file(),
                    errors: 0,
                    warnings: 0,
                };
                files.push((d.file(), Vec::new(), more));
                files.len() - 1
            }
        };
        let (_, shown, more) = &mut files[ix];
        if shown.len() < max {
            shown.push(d);
        } else if d.severity == Severity::Error {
            more.errors += 1;
        } else {
            more.warnings += 1;
        }
    }
    let mut out = Vec::new();
    for (_, shown, more) in files {
        out.extend(shown.into_iter().map(Entry::Shown));
        if more.errors + more.warnings > 0 {
            out.push(Entry::More(more));
        }
    }
    out
}

/// `4950` → `4,950`.
pub fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{Kind, Location, Pos};
    use super::*;

    fn at(line: usize, col: usize, len: usize, message: &str) -> Diagnostic {
        Diagnostic::new(
            Kind::UnknownField,
            Location::new("m/mesh.toml", Pos { line, col, len }),
            message,
        )
    }

    #[test]
    fn renders_source_and_caret() {
        let src = "[run]\ncomand = [\"x\"]\n";
        let d = at(2, 1, 6, "unknown field `comand` in [run]").with_help("did you mean `command`?");
        let text = render_text(&d, Some(src));
        assert!(text.starts_with("m/mesh.toml:2:1: error[unknown-field]: unknown field"));
        assert!(text.contains("  2 | comand = [\"x\"]\n"));
        assert!(text.contains("    | ^^^^^^\n"));
        assert!(text.contains("= help: did you mean `command`?"));
        let json = render_json(&[d]);
        assert!(json.contains("\"kind\": \"unknown-field\""));
        assert!(json.contains("\"line\": 2"));
    }

    #[test]
    fn a_caret_mid_line_underlines_exactly_its_span() {
        let src = "[run]\ncommand = [\"x\"]\n";
        // `= [` at col 9, three characters.
        let text = render_text(&at(2, 9, 3, "m"), Some(src));
        assert!(text.contains("\n    |         ^^^\n"), "{text}");
    }

    #[test]
    fn escaping_leaves_plain_text_alone_and_escapes_the_rest() {
        assert!(matches!(
            escape_controls("plain\ttext"),
            Cow::Borrowed("plain\ttext")
        ));
        assert_eq!(escape_controls("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
    }

    #[test]
    fn control_characters_are_escaped_in_every_line_and_the_caret_follows() {
        // An OSC title sequence before the field, an SGR in the message, a
        // bell and a right-to-left override in the help.
        let src = "[run]\n\t\u{1b}]0;pwned\u{7}comand = 1\n";
        let d =
            at(2, 12, 6, "unknown field `co\u{1b}[2Jmand`").with_help("ring \u{7} \u{202e}txet");
        let text = render_text(&d, Some(src));
        assert!(!text.lines().any(|l| l.chars().any(is_unsafe)), "{text:?}");
        assert!(text.contains("unknown field `co\\u{1b}[2Jmand`"), "{text}");
        assert!(text.contains("ring \\u{7} \\u{202e}txet"), "{text}");
        assert!(
            text.contains("  2 | \t\\u{1b}]0;pwned\\u{7}comand = 1\n"),
            "{text}"
        );
        // The tab stays a tab; each escape is as wide as the caret's lead.
        let lead = format!("\t{}", " ".repeat("\\u{1b}]0;pwned\\u{7}".len()));
        assert!(text.contains(&format!("    | {lead}^^^^^^\n")), "{text}");
    }

    #[test]
    fn a_long_line_is_cut_to_a_window_with_the_caret_under_its_character() {
        let line = format!("{}BAD{}", "a".repeat(5_000_000), "b".repeat(5_000_000));
        let col = 5_000_001;
        let text = render_text(&at(1, col, 3, "bad"), Some(&line));
        assert!(text.len() < 2 * SOURCE_WINDOW + 200, "{} bytes", text.len());
        let mut lines = text.lines().skip(1);
        let src = lines.next().unwrap().strip_prefix("  1 | ").unwrap();
        let caret = lines.next().unwrap().strip_prefix("    | ").unwrap();
        assert!(src.starts_with(CUT) && src.ends_with(CUT), "{src}");
        // Same column in both lines: the caret is under the B.
        let under = caret.find('^').unwrap();
        let chars: Vec<char> = src.chars().collect();
        let caret_col = caret[..under].chars().count();
        assert_eq!(
            chars[caret_col..caret_col + 3],
            ['B', 'A', 'D'],
            "{src}\n{caret}"
        );
        assert_eq!(caret[under..], *"^^^");
        // Near either end the window is full and keeps the caret.
        let start = render_text(&at(1, 2, 1, "x"), Some(&line));
        assert!(
            start.contains("  1 | aaaa") && start.contains("    |  ^\n"),
            "{start}"
        );
        let end = render_text(&at(1, 10_000_003, 1, "x"), Some(&line));
        assert!(end.contains(&format!("  1 | {CUT}")), "{end}");
        assert!(
            end.contains(&format!("{}^\n", " ".repeat(SOURCE_WINDOW))),
            "{end}"
        );
        // A caret past the end of a short line stays one column past it.
        let eol = render_text(&at(1, 4, 1, "x"), Some("abc"));
        assert!(eol.contains("    |    ^\n"), "{eol}");
    }

    #[test]
    fn a_long_message_is_cut() {
        let d = at(1, 1, 1, &format!("bad name {:?}", "x".repeat(10_000_000)));
        let text = d.to_string();
        assert!(text.len() < MESSAGE_LIMIT + 100, "{}", text.len());
        assert!(text.ends_with(CUT));
    }

    #[test]
    fn at_most_max_per_file_then_one_count_of_the_rest() {
        let mut diags: Vec<Diagnostic> = (0..5_000).map(|i| at(1, i + 1, 1, "bad")).collect();
        diags.push(Diagnostic::new(
            Kind::RenamedSeat,
            Location::new("m/mesh.toml", Pos::START),
            "renamed",
        ));
        diags.push(at(1, 1, 1, "elsewhere"));
        diags.last_mut().unwrap().location.file = "n/mesh.toml".into();
        let entries = cap_per_file(&diags, MAX_PER_FILE);
        assert_eq!(entries.len(), MAX_PER_FILE + 2);
        let Entry::More(more) = &entries[MAX_PER_FILE] else {
            panic!("{:?}", entries[MAX_PER_FILE]);
        };
        assert_eq!(
            more.to_string(),
            "... and 4,950 more errors and 1 more warning in m/mesh.toml"
        );
        assert_eq!(entries[MAX_PER_FILE + 1], Entry::Shown(&diags[5_001]));
        assert_eq!(cap_per_file(&diags[..3], MAX_PER_FILE).len(), 3);
        // Errors alone past the cap: still counted, and no "0 more warnings".
        let only = cap_per_file(&diags[..MAX_PER_FILE + 10], MAX_PER_FILE);
        assert_eq!(only.len(), MAX_PER_FILE + 1);
        let Entry::More(more) = &only[MAX_PER_FILE] else {
            panic!("{:?}", only[MAX_PER_FILE]);
        };
        assert_eq!(more.to_string(), "... and 10 more errors in m/mesh.toml");
    }

    #[test]
    fn thousands_are_separated() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(4_950), "4,950");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}

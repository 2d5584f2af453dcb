//! The hosts' logs tool (`mesh logs`), as data: the request a caller sends
//! on [`crate::subjects::host_logs`], the answer a host gives, where in a
//! module's rotated log files a read starts, and how bytes become lines.
//! The host only opens files and reads the bytes this module says to.
//!
//! A position in a log is a cursor: the file (an opaque id; the host uses
//! the inode, which a rename keeps) and a byte offset in it. Rotation
//! renames `log` to `log.1`, so a follower whose file was rotated still
//! finds it under its new name and reads it to the end before the newer
//! ones: nothing is missed unless rotation dropped the file altogether.

use serde::{Deserialize, Serialize};

use crate::names::Name;
use crate::tool::MAX_TOOL_BYTES;

/// Lines asked for when a request names none.
pub const DEFAULT_LINES: usize = 50;
/// The most lines one request may ask for.
pub const MAX_LINES: usize = 10_000;
/// Bytes of log one answer carries at most. JSON writes a byte as at most
/// six (`\u0001`), and a newline costs at most three (`"",`), so an answer
/// stays well below [`MAX_TOOL_BYTES`] whatever the log holds.
pub const MAX_READ_BYTES: usize = 128 * 1024;
/// A longer line is sent in pieces of this size (a module that never
/// writes a newline still makes progress).
pub const MAX_LINE_BYTES: usize = 16 * 1024;

const _: () = assert!(6 * MAX_READ_BYTES + 4096 < MAX_TOOL_BYTES);
const _: () = assert!(MAX_LINE_BYTES < MAX_READ_BYTES);

/// `{"module", "lines"?, "from"?, "file"?}`: the last `lines` lines of
/// `module`'s log, or (with `from`) what follows that cursor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsRequest {
    pub module: Name,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<usize>,
    /// Continue from this byte offset (a previous answer's `next`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<u64>,
    /// The file `from` is in (a previous answer's `file`); none: the live log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// The `ok` value of an answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsAnswer {
    pub lines: Vec<String>,
    /// Where the next read starts: the file (empty when the module has
    /// written no log yet) and the offset in it.
    pub file: String,
    pub next: u64,
    /// More is waiting past `next`: ask again at once.
    #[serde(default)]
    pub more: bool,
    /// The cursor's file had been rotated; reading went on in it (nothing
    /// missed) or, with `dropped`, from the oldest file kept.
    #[serde(default)]
    pub rotated: bool,
    /// Rotation dropped what lay between the cursor and what was read, or
    /// the file is shorter than the cursor (it was replaced).
    #[serde(default)]
    pub dropped: bool,
    /// Fewer lines than asked: the rest would not fit one answer.
    #[serde(default)]
    pub cut: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum LogsRequestError {
    #[error(
        "not a logs request ({0}); send {{\"module\": \"<module>\", \"lines\": <n>}}, or {{\"module\", \"file\", \"from\"}} from a previous answer to follow"
    )]
    Shape(#[source] serde_json::Error),
    #[error("{asked} lines asked for; at most {MAX_LINES} may be")]
    TooManyLines { asked: usize },
}

/// Reads a request from a tool call's JSON payload.
pub fn parse_request(value: serde_json::Value) -> Result<LogsRequest, LogsRequestError> {
    let r: LogsRequest = serde_json::from_value(value).map_err(LogsRequestError::Shape)?;
    match r.lines {
        Some(asked) if asked > MAX_LINES => Err(LogsRequestError::TooManyLines { asked }),
        _ => Ok(r),
    }
}

/// The error a host answers for a module it does not run: the modules it
/// does, and the likely one meant.
pub fn not_here(module: &Name, node: &Name, here: &[Name]) -> String {
    let names = || here.iter().map(Name::as_str);
    let running = if here.is_empty() {
        "none is".to_string()
    } else {
        format!(
            "{} {}",
            names().collect::<Vec<_>>().join(", "),
            if here.len() == 1 { "is" } else { "are" }
        )
    };
    let meant = crate::diagnostic::suggest(module.as_str(), names())
        .map(|m| format!("; did you mean {m}?"))
        .unwrap_or_default();
    format!("module {module} is not assigned to node {node} ({running}){meant}")
}

/// One of a module's log files as the host found it: newest first, the
/// live `log` at index 0, then `log.1`, `log.2`, ...
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFileInfo {
    pub id: String,
    pub size: u64,
}

/// Where a follow read starts: a file (index into the list) and an offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadStart {
    pub file: usize,
    pub offset: u64,
    pub rotated: bool,
    pub dropped: bool,
}

/// Where to go on from the cursor (`file`, `from`) in `files` (newest
/// first, non-empty). A rotated file read to its end gives way to the next
/// newer one; a file no longer kept restarts at the oldest kept.
pub fn follow_start(files: &[LogFileInfo], file: Option<&str>, from: u64) -> ReadStart {
    let found = match file {
        None => Some(0),
        Some(id) => files.iter().position(|f| f.id == id),
    };
    let mut start = match found {
        Some(i) if from <= files[i].size => ReadStart {
            file: i,
            offset: from,
            rotated: i > 0,
            dropped: false,
        },
        // Shorter than the cursor: not the file it was (replaced).
        Some(i) => ReadStart {
            file: i,
            offset: 0,
            rotated: i > 0,
            dropped: true,
        },
        None => ReadStart {
            file: files.len() - 1,
            offset: 0,
            rotated: true,
            dropped: true,
        },
    };
    while start.file > 0 && start.offset >= files[start.file].size {
        start.file -= 1;
        start.offset = 0;
    }
    start
}

/// Splits bytes read from a cursor into lines: `(lines, bytes consumed)`.
/// A last line without its newline is kept back (its writer may be in the
/// middle of it) unless `complete` (nothing more will be appended) or it
/// is [`MAX_LINE_BYTES`] long; longer lines come in pieces of that size.
pub fn split_lines(bytes: &[u8], complete: bool) -> (Vec<String>, usize) {
    let mut lines = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let window = &rest[..rest.len().min(MAX_LINE_BYTES)];
        match window.iter().position(|b| *b == b'\n') {
            Some(nl) => {
                lines.push(text(&window[..nl]));
                at += nl + 1;
            }
            None if window.len() == MAX_LINE_BYTES || complete => {
                lines.push(text(window));
                at += window.len();
            }
            None => break,
        }
    }
    (lines, at)
}

/// The last `n` lines of `bytes` (the end of a log, the whole of it when
/// `whole`): `(lines, cut)`. A first line that may have begun before the
/// bytes read is left out; `cut` says fewer than `n` came back although the
/// log holds more.
pub fn tail_lines(bytes: &[u8], n: usize, whole: bool) -> (Vec<String>, bool) {
    let (mut lines, _) = split_lines(bytes, true);
    if !whole && !lines.is_empty() {
        lines.remove(0);
    }
    let cut = !whole && lines.len() < n;
    let keep = lines.len().saturating_sub(n);
    lines.drain(..keep);
    (lines, cut)
}

/// A line as text: a trailing `\r` dropped, bytes that are not UTF-8
/// replaced. Control characters stay: whoever prints the line escapes them.
fn text(line: &[u8]) -> String {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    String::from_utf8_lossy(line).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::ToolReply;
    use serde_json::json;

    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    fn f(id: &str, size: u64) -> LogFileInfo {
        LogFileInfo {
            id: id.into(),
            size,
        }
    }

    #[test]
    fn a_request_is_read_strictly_and_its_module_is_a_name() {
        let r = parse_request(json!({"module": "echo", "lines": 5})).unwrap();
        assert_eq!(
            (r.module.as_str(), r.lines, r.from),
            ("echo", Some(5), None)
        );
        let r = parse_request(json!({"module": "echo", "from": 7, "file": "12"})).unwrap();
        assert_eq!((r.from, r.file.as_deref()), (Some(7), Some("12")));
        // No path from the request is ever a path: the module is a Name.
        for bad in [
            json!({"module": "../../etc/passwd"}),
            json!({"module": "a/b"}),
            json!({"module": "log.1"}),
            json!({"module": "echo", "path": "/etc"}),
            json!({"lines": 3}),
            json!(null),
            json!({"module": "echo", "lines": -1}),
        ] {
            let e = parse_request(bad.clone()).unwrap_err();
            assert!(e.to_string().contains("send {\"module\""), "{bad}: {e}");
        }
        let e = parse_request(json!({"module": "echo", "lines": MAX_LINES + 1})).unwrap_err();
        assert!(e.to_string().contains("at most 10000"), "{e}");
    }

    #[test]
    fn a_module_not_here_is_named_with_those_that_are() {
        let here = [n("echo"), n("ticker")];
        assert_eq!(
            not_here(&n("ecno"), &n("n2"), &here),
            "module ecno is not assigned to node n2 (echo, ticker are); did you mean echo?"
        );
        assert_eq!(
            not_here(&n("git"), &n("n2"), &[]),
            "module git is not assigned to node n2 (none is)"
        );
    }

    #[test]
    fn following_goes_on_in_the_cursors_file_even_once_rotated() {
        let files = [f("30", 5), f("20", 100), f("10", 100)];
        let start = |file: Option<&str>, from| follow_start(&files, file, from);
        // The live log, where the cursor is.
        assert_eq!(
            start(Some("30"), 2),
            ReadStart {
                file: 0,
                offset: 2,
                rotated: false,
                dropped: false
            }
        );
        assert_eq!(start(None, 5).file, 0);
        // Rotated once: the rest of log.1 first, nothing missed.
        assert_eq!(
            start(Some("20"), 60),
            ReadStart {
                file: 1,
                offset: 60,
                rotated: true,
                dropped: false
            }
        );
        // Read to its end: on to the newer file, from its start.
        assert_eq!(
            start(Some("20"), 100),
            ReadStart {
                file: 0,
                offset: 0,
                rotated: true,
                dropped: false
            }
        );
        // Rotated out altogether: the oldest kept, and the loss said.
        assert_eq!(
            start(Some("5"), 60),
            ReadStart {
                file: 2,
                offset: 0,
                rotated: true,
                dropped: true
            }
        );
        // Shorter than the cursor: replaced, read from its start.
        assert_eq!(
            start(Some("30"), 9),
            ReadStart {
                file: 0,
                offset: 0,
                rotated: false,
                dropped: true
            }
        );
    }

    #[test]
    fn lines_are_split_and_a_line_being_written_is_kept_back() {
        assert_eq!(
            split_lines(b"one\ntwo\r\nthr", false),
            (vec!["one".to_string(), "two".to_string()], 9)
        );
        assert_eq!(split_lines(b"one\nthr", true).0, ["one", "thr"]);
        assert_eq!(split_lines(b"", false), (vec![], 0));
        assert_eq!(split_lines(b"\n\n", false).0, ["", ""]);
        // A line without end still makes progress, in pieces.
        let long = vec![b'x'; MAX_LINE_BYTES * 2 + 3];
        let (lines, used) = split_lines(&long, false);
        assert_eq!(lines.len(), 2);
        assert_eq!(used, MAX_LINE_BYTES * 2);
        assert_eq!(split_lines(b"bad \xff\n", false).0, ["bad \u{fffd}"]);
    }

    #[test]
    fn the_tail_is_the_newest_lines_and_a_cut_first_line_is_dropped() {
        let log = b"a\nb\nc\nd\npartial";
        assert_eq!(
            tail_lines(log, 2, true),
            (vec!["d".into(), "partial".into()], false)
        );
        assert_eq!(tail_lines(log, 9, true).0.len(), 5);
        // Read from the middle: "b" may be the end of a longer line.
        assert_eq!(tail_lines(b"b\nc\n", 1, false), (vec!["c".into()], false));
        assert_eq!(tail_lines(b"b\nc\n", 5, false), (vec!["c".into()], true));
        assert_eq!(tail_lines(log, 0, true), (vec![], false));
    }

    #[test]
    fn the_worst_answer_still_fits_one_message() {
        for byte in [0x01u8, b'\n', b'"', 0xff] {
            let bytes = vec![byte; MAX_READ_BYTES];
            let (lines, _) = split_lines(&bytes, true);
            let answer = LogsAnswer {
                lines,
                file: u64::MAX.to_string(),
                next: u64::MAX,
                more: true,
                rotated: true,
                dropped: true,
                cut: true,
            };
            let wire = ToolReply::Ok(serde_json::to_value(&answer).unwrap()).to_json();
            assert!(wire.len() < MAX_TOOL_BYTES, "{byte:#x}: {}", wire.len());
            let back: LogsAnswer = serde_json::from_slice::<serde_json::Value>(&wire)
                .map(|v| serde_json::from_value(v["ok"].clone()).unwrap())
                .unwrap();
            assert_eq!(back, answer);
        }
    }
}

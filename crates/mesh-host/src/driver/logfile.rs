//! A module's log: stdout and stderr appended to `log` (0600), rotated by
//! size to `log.1` … `log.<keep>` (the oldest dropped), and the newest bytes
//! kept in memory so a failure can quote the last lines even when they were
//! just rotated away.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// The live log file in a module's directory.
pub const LOG_FILE: &str = "log";

/// How many of the newest bytes are kept to quote from.
const TAIL_BYTES: usize = 8 * 1024;

/// The name of the `n`-th rotated file (`log.1` is the newest).
pub fn rotated_name(n: usize) -> String {
    format!("{LOG_FILE}.{n}")
}

/// The renames one rotation makes, in order: each `(from, Some(to))` moves a
/// file one step older (a rename replaces the oldest, which drops it);
/// `(from, None)` deletes. With `keep` 0 the live log is simply dropped.
pub fn rotation_plan(keep: usize) -> Vec<(String, Option<String>)> {
    if keep == 0 {
        return vec![(LOG_FILE.to_string(), None)];
    }
    let mut plan: Vec<(String, Option<String>)> = (1..keep)
        .rev()
        .map(|n| (rotated_name(n), Some(rotated_name(n + 1))))
        .collect();
    plan.push((LOG_FILE.to_string(), Some(rotated_name(1))));
    plan
}

pub struct LogFile {
    dir: PathBuf,
    file: File,
    size: u64,
    max: u64,
    keep: usize,
    tail: VecDeque<u8>,
}

impl LogFile {
    /// Opens (appending) `dir/log`. `max` below 1 is read as 1 so a
    /// rotation always makes room for at least one byte.
    pub fn open(dir: &Path, max: u64, keep: usize) -> io::Result<LogFile> {
        let file = open_private(&dir.join(LOG_FILE))?;
        let size = file.metadata()?.len();
        Ok(LogFile {
            dir: dir.to_path_buf(),
            file,
            size,
            max: max.max(1),
            keep,
            tail: VecDeque::with_capacity(TAIL_BYTES),
        })
    }

    /// Appends `buf`, rotating whenever the live file would pass `max`, so
    /// no file grows beyond it. The tail is kept even if the disk refuses
    /// the write, so a failure can still be explained.
    pub fn write(&mut self, mut buf: &[u8]) -> io::Result<()> {
        self.remember(buf);
        while !buf.is_empty() {
            if self.size >= self.max {
                self.rotate()?;
            }
            let room = usize::try_from(self.max - self.size).unwrap_or(usize::MAX);
            let (now, rest) = buf.split_at(room.min(buf.len()));
            self.file.write_all(now)?;
            self.size += now.len() as u64;
            buf = rest;
        }
        Ok(())
    }

    /// The newest bytes written (at most 8 KiB).
    pub fn tail(&self) -> Vec<u8> {
        self.tail.iter().copied().collect()
    }

    /// Forgets the tail: a new run's failure quotes only its own lines.
    pub fn clear_tail(&mut self) {
        self.tail.clear();
    }

    fn remember(&mut self, buf: &[u8]) {
        let buf = &buf[buf.len().saturating_sub(TAIL_BYTES)..];
        let excess = (self.tail.len() + buf.len()).saturating_sub(TAIL_BYTES);
        self.tail.drain(..excess);
        self.tail.extend(buf);
    }

    fn rotate(&mut self) -> io::Result<()> {
        for (from, to) in rotation_plan(self.keep) {
            let from = self.dir.join(from);
            let done = match to {
                Some(to) => std::fs::rename(&from, self.dir.join(to)),
                None => std::fs::remove_file(&from),
            };
            match done {
                // A gap (no `log.2` yet) is normal while the log is young.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                other => other?,
            }
        }
        self.file = open_private(&self.dir.join(LOG_FILE))?;
        self.size = 0;
        Ok(())
    }
}

/// Opens for appending with mode 0600, and narrows an existing file that
/// was left wider: a module's output may hold what other users must not read.
fn open_private(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    if file.metadata()?.permissions().mode() & 0o077 != 0 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(file)
}

/// The last `lines` non-empty lines of `tail`, joined by ` | `, control
/// characters escaped (a status line must not carry terminal escapes or
/// break a report into lines), at most `max_chars` characters: the newest
/// are kept and a leading `…` marks the cut.
pub fn last_lines(tail: &[u8], lines: usize, max_chars: usize) -> String {
    let text = String::from_utf8_lossy(tail);
    let picked: Vec<&str> = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .filter(|l| !l.trim().is_empty())
        .collect();
    let picked = &picked[picked.len().saturating_sub(lines)..];
    let joined = picked
        .iter()
        .map(|l| escape(l))
        .collect::<Vec<_>>()
        .join(" | ");
    let count = joined.chars().count();
    if count <= max_chars {
        return joined;
    }
    let keep = max_chars.saturating_sub(1);
    let cut: String = joined.chars().skip(count - keep).collect();
    format!("…{cut}")
}

fn escape(line: &str) -> String {
    line.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_rotation_moves_each_file_one_step_older() {
        let plan = rotation_plan(3);
        let s = |a: &str, b: &str| (a.to_string(), Some(b.to_string()));
        assert_eq!(
            plan,
            [s("log.2", "log.3"), s("log.1", "log.2"), s("log", "log.1")]
        );
        assert_eq!(rotation_plan(1), [s("log", "log.1")]);
        assert_eq!(rotation_plan(0), [("log".to_string(), None)]);
    }

    #[test]
    fn the_log_rotates_by_size_and_keeps_the_newest_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogFile::open(dir.path(), 10, 2).unwrap();
        // 45 bytes in uneven writes: files of 10, the oldest dropped.
        for chunk in ["aaaaaaa", "aaabbbbbbbbbbcc", "cccccccc", "ddddddddddeeeee"] {
            log.write(chunk.as_bytes()).unwrap();
        }
        assert_eq!(names(dir.path()), ["log", "log.1", "log.2"]);
        let read = |n: &str| std::fs::read_to_string(dir.path().join(n)).unwrap();
        assert_eq!(read("log"), "eeeee");
        assert_eq!(read("log.1"), "dddddddddd");
        assert_eq!(read("log.2"), "cccccccccc");
        for n in names(dir.path()) {
            let meta = std::fs::metadata(dir.path().join(&n)).unwrap();
            assert!(meta.len() <= 10, "{n} is {} bytes", meta.len());
            assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{n}");
        }
    }

    #[test]
    fn a_reopened_log_counts_what_it_already_holds() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LOG_FILE), "12345678").unwrap();
        std::fs::set_permissions(
            dir.path().join(LOG_FILE),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        let mut log = LogFile::open(dir.path(), 10, 3).unwrap();
        log.write(b"abc").unwrap();
        let read = |n: &str| std::fs::read_to_string(dir.path().join(n)).unwrap();
        assert_eq!(read("log.1"), "12345678ab");
        assert_eq!(read("log"), "c");
        let mode = std::fs::metadata(dir.path().join("log.1"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "a wider file is narrowed");
    }

    #[test]
    fn keep_zero_drops_the_full_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogFile::open(dir.path(), 4, 0).unwrap();
        log.write(b"abcdefghij").unwrap();
        assert_eq!(names(dir.path()), ["log"]);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("log")).unwrap(),
            "ij"
        );
    }

    #[test]
    fn the_tail_holds_the_newest_bytes_across_rotations() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogFile::open(dir.path(), 100, 1).unwrap();
        for i in 0..2000 {
            log.write(format!("line {i}\n").as_bytes()).unwrap();
        }
        let tail = log.tail();
        assert_eq!(tail.len(), TAIL_BYTES);
        assert!(tail.ends_with(b"line 1999\n"));
        assert_eq!(last_lines(&tail, 2, 100), "line 1998 | line 1999");
        log.clear_tail();
        assert!(log.tail().is_empty());
    }

    #[test]
    fn last_lines_takes_the_newest_non_empty_lines() {
        let tail = b"one\ntwo\r\n\n  \nthree\nfour\nfive\nsix\n";
        assert_eq!(last_lines(tail, 5, 400), "two | three | four | five | six");
        assert_eq!(last_lines(b"", 5, 400), "");
        assert_eq!(
            last_lines(b"no newline at end", 5, 400),
            "no newline at end"
        );
    }

    #[test]
    fn last_lines_escapes_control_characters() {
        let tail = b"\x1b[31mred\x1b[0m\tand\x07bell\nnul\x00here\n";
        let got = last_lines(tail, 5, 400);
        assert_eq!(
            got,
            "\\u{1b}[31mred\\u{1b}[0m\\tand\\u{7}bell | nul\\u{0}here"
        );
        assert!(!got.chars().any(char::is_control), "{got:?}");
        // Bytes that are not UTF-8 are replaced, not passed through.
        assert_eq!(last_lines(b"bad \xff byte", 1, 400), "bad \u{fffd} byte");
    }

    #[test]
    fn last_lines_is_bounded_and_keeps_the_newest_end() {
        let long = format!("{}END\n", "x".repeat(1000));
        let got = last_lines(long.as_bytes(), 5, 50);
        assert_eq!(got.chars().count(), 50);
        assert!(got.starts_with('…') && got.ends_with("END"), "{got}");
        // Multi-byte characters are cut on character boundaries.
        let got = last_lines("ééééé".as_bytes(), 1, 3);
        assert_eq!(got, "…éé");
        assert_eq!(last_lines(b"abc", 1, 0), "…");
    }
}

//! Every write the CLI makes to standard output and standard error.
//!
//! Rust ignores SIGPIPE, so a reader that went away (`mesh ... | head -1`)
//! shows up as an EPIPE error on the next write, and `print!` panics on it
//! (exit 101). Here a failed write to stdout is a [`StdoutError`] instead:
//! the command stops, and the edge ends it quietly with 0 when the pipe was
//! closed, or with one clean line and 2 otherwise (`> /dev/full`).

use std::fmt;
use std::io::{self, BufWriter, Write};

use anyhow::Context as _;
use clap::ValueEnum;

use mesh_core::diagnostic::escape_controls;

/// Writing to standard output failed.
#[derive(Debug)]
pub struct StdoutError(io::Error);

impl StdoutError {
    /// The reader went away: nothing more is wanted, which is not a failure.
    pub fn is_closed_pipe(&self) -> bool {
        self.0.kind() == io::ErrorKind::BrokenPipe
    }
}

impl fmt::Display for StdoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "writing to standard output: {}", describe(&self.0))
    }
}

impl std::error::Error for StdoutError {}

/// An I/O error as a lowercase phrase without the OS error number:
/// `no space left on device`.
pub fn describe(e: &io::Error) -> String {
    let text = e.to_string();
    let text = match text.rfind(" (os error ") {
        Some(i) if text.ends_with(')') => &text[..i],
        _ => &text,
    };
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_lowercase().chain(chars).collect()
    })
}

/// Writes `text` to standard output, whole, and flushes it.
pub fn print(text: &str) -> Result<(), StdoutError> {
    let mut out = Stdout::lock();
    out.text(text)?;
    out.flush()
}

/// Standard output, buffered, for a command that prints many lines. Call
/// [`Stdout::flush`] at the end: a write error left in the buffer is
/// otherwise lost (dropping ignores it, as it must not panic).
pub struct Stdout(BufWriter<io::StdoutLock<'static>>);

impl Stdout {
    pub fn lock() -> Self {
        Stdout(BufWriter::new(io::stdout().lock()))
    }

    pub fn text(&mut self, text: &str) -> Result<(), StdoutError> {
        self.0.write_all(text.as_bytes()).map_err(StdoutError)
    }

    pub fn line(&mut self, line: impl fmt::Display) -> Result<(), StdoutError> {
        writeln!(self.0, "{line}").map_err(StdoutError)
    }

    pub fn flush(mut self) -> Result<(), StdoutError> {
        self.0.flush().map_err(StdoutError)
    }
}

/// For a daemon's own lines (`mesh up`'s summary, `mesh host`'s
/// enrolment): one it could not print is no reason to stop, nor to stop
/// half-way (`mesh up | head` leaves a mesh that runs until Ctrl-C, as
/// one printing into a terminal does). Logged unless the reader merely
/// went away.
pub fn daemon_line(printed: Result<(), StdoutError>) {
    if let Err(e) = printed
        && !e.is_closed_pipe()
    {
        tracing::warn!(error = %e, "a line for standard output was dropped");
    }
}

/// Writes a message to standard error, its control characters escaped (it
/// may quote operator input: a path, a name, a file's text). A failure to
/// write is ignored: there is nowhere left to report it, and a panic would
/// only turn a failed command into a crash.
pub fn note(message: impl fmt::Display) {
    let message = message.to_string();
    let mut err = io::stderr().lock();
    for line in message.lines() {
        let _ = writeln!(err, "{}", escape_controls(line));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_read_as_lowercase_phrases() {
        let full = io::Error::from_raw_os_error(28);
        assert_eq!(describe(&full), "no space left on device");
        assert_eq!(
            StdoutError(full).to_string(),
            "writing to standard output: no space left on device"
        );
        assert!(StdoutError(io::Error::from(io::ErrorKind::BrokenPipe)).is_closed_pipe());
        assert!(!StdoutError(io::Error::from_raw_os_error(28)).is_closed_pipe());
    }
}

/// How a listing prints: a table for a person, or JSON for a script (the
/// same structures the controller's JSON API serves).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ListFormat {
    Text,
    Json,
}

/// `rows` as pretty JSON, one document, on standard output.
pub fn print_json(rows: &impl serde::Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(rows).context("writing JSON")?;
    print(&format!("{text}\n"))?;
    Ok(())
}

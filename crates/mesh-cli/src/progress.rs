//! Progress on a long wait: a spinner on standard error when it is a
//! terminal, plain lines otherwise (a log or a CI run would otherwise fill
//! with redraws nobody can read).

use std::io::IsTerminal as _;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::output;

/// One wait in progress.
pub struct Progress {
    spinner: Option<ProgressBar>,
    /// The last line printed without a terminal: a poll that learns nothing
    /// new prints nothing.
    last: String,
}

impl Progress {
    /// Starts a wait described by `message`.
    pub fn start(message: impl Into<String>) -> Progress {
        let message = message.into();
        let spinner = std::io::stderr().is_terminal().then(|| {
            let s = ProgressBar::new_spinner();
            if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
                s.set_style(style);
            }
            s.enable_steady_tick(Duration::from_millis(120));
            s
        });
        let mut p = Progress {
            spinner,
            last: String::new(),
        };
        p.set(message);
        p
    }

    /// What is being waited for now.
    pub fn set(&mut self, message: impl Into<String>) {
        let message = message.into();
        match &self.spinner {
            Some(s) => s.set_message(message),
            None if message != self.last => {
                output::note(&message);
                self.last = message;
            }
            None => {}
        }
    }

    /// Ends the wait; `line` (if any) stays on standard error.
    pub fn finish(mut self, line: Option<&str>) {
        if let Some(s) = self.spinner.take() {
            s.finish_and_clear();
        }
        if let Some(l) = line {
            output::note(l);
        }
    }
}

impl Drop for Progress {
    /// A wait ended by an error clears its spinner too: the error is then
    /// the last thing on the screen.
    fn drop(&mut self) {
        if let Some(s) = self.spinner.take() {
            s.finish_and_clear();
        }
    }
}

use std::path::PathBuf;

/// Why a test server could not be provided.
#[derive(Debug, thiserror::Error)]
pub enum TestkitError {
    #[error("{what} not found (looked in: {looked}); {hint}")]
    BinaryMissing {
        what: &'static str,
        looked: String,
        hint: &'static str,
    },
    #[error("could not {action}")]
    Io {
        action: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} did not become ready within {secs} s; its log ({log}):\n{tail}")]
    NotReady {
        what: &'static str,
        secs: u64,
        log: PathBuf,
        tail: String,
    },
    #[error("{command} failed ({status}): {stderr}")]
    CommandFailed {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("could not generate a test certificate")]
    Certificate(#[source] rcgen::Error),
}

pub(crate) fn io(action: impl Into<String>) -> impl FnOnce(std::io::Error) -> TestkitError {
    let action = action.into();
    move |source| TestkitError::Io { action, source }
}

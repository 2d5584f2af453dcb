//! The one type every crate hands plaintext credentials around in.

use std::fmt;

/// A plaintext secret (a bus password, a token). `Debug` never shows it and
/// there is no `Display`, so it cannot end up in a log line or an error by
/// accident; reading it takes a call to [`Secret::expose`].
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(plaintext: impl Into<String>) -> Self {
        Secret(plaintext.into())
    }

    /// The plaintext. Give it to whoever will use it; never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_plaintext() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
        assert_eq!(format!("{:?}", Some(&s)), "Some(Secret(<redacted>))");
        assert_eq!(s.expose(), "hunter2");
    }
}

//! An error and its causes on one line: what every log line and HTTP
//! answer of the controller prints.

/// An error with its causes on one line, for the log.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

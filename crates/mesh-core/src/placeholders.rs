//! Placeholders in a module's run spec: `${seat:NAME:PORT}` (the reachable
//! address of the seat's holder), `${secret:NAME}` (a secret's value),
//! `${file:NAME}` (the path of a file the mesh writes for the module) and
//! `${artifact:NAME}` (the path of an artifact the host fetched and checked).
//!
//! The controller fills all but `${artifact:..}` when it composes a
//! declaration; the host fills that one with its cached file. Here they are
//! parsed once, with byte ranges, so a manifest error can point at the
//! placeholder itself. `$${` writes a literal `${`; any other `$` is literal.

use std::fmt;
use std::ops::Range;

use crate::names::Name;

/// One placeholder.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Placeholder {
    /// `${seat:NAME:PORT}`: `host:port` of the seat's holder, composed at use.
    Seat { seat: Name, port: u16 },
    /// `${secret:NAME}`: a secret's value.
    Secret { name: Name },
    /// `${file:NAME}`: the path of the module's `[[file]]` named NAME.
    File { name: Name },
    /// `${artifact:NAME}`: the path of artifact NAME of the pinned version,
    /// in the host's cache.
    Artifact { name: Name },
}

impl fmt::Display for Placeholder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placeholder::Seat { seat, port } => write!(f, "${{seat:{seat}:{port}}}"),
            Placeholder::Secret { name } => write!(f, "${{secret:{name}}}"),
            Placeholder::File { name } => write!(f, "${{file:{name}}}"),
            Placeholder::Artifact { name } => write!(f, "${{artifact:{name}}}"),
        }
    }
}

/// A piece of a parsed string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Text(String),
    Placeholder {
        placeholder: Placeholder,
        /// Byte range of `${...}` in the string it was parsed from.
        range: Range<usize>,
    },
}

/// A string with its placeholders parsed out.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Template {
    pub segments: Vec<Segment>,
}

impl Template {
    /// Every placeholder with its byte range in the original string.
    pub fn placeholders(&self) -> impl Iterator<Item = (&Placeholder, &Range<usize>)> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Placeholder { placeholder, range } => Some((placeholder, range)),
            Segment::Text(_) => None,
        })
    }

    /// Fills every placeholder with `value`; the first placeholder `value`
    /// has no answer for is returned as the error.
    pub fn fill(
        &self,
        mut value: impl FnMut(&Placeholder) -> Option<String>,
    ) -> Result<String, Placeholder> {
        let mut out = String::new();
        for s in &self.segments {
            match s {
                Segment::Text(t) => out.push_str(t),
                Segment::Placeholder { placeholder, .. } => match value(placeholder) {
                    Some(v) => out.push_str(&v),
                    None => return Err(placeholder.clone()),
                },
            }
        }
        Ok(out)
    }
}

impl Template {
    /// The text with every placeholder but `${artifact:..}` filled by
    /// `value`, and each literal `${` written `$${` again: what a host
    /// parses once more to fill the artifacts (so a literal `${artifact:x}`
    /// in a manifest stays literal).
    pub fn fill_keeping_artifacts(
        &self,
        mut value: impl FnMut(&Placeholder) -> Option<String>,
    ) -> Result<String, Placeholder> {
        let mut out = String::new();
        for s in &self.segments {
            match s {
                Segment::Text(t) => out.push_str(&t.replace("${", "$${")),
                Segment::Placeholder { placeholder, .. } => match placeholder {
                    // `$` then `${` would read back as the escape `$${`.
                    Placeholder::Artifact { .. } if out.ends_with('$') => {
                        return Err(placeholder.clone());
                    }
                    Placeholder::Artifact { .. } => out.push_str(&placeholder.to_string()),
                    other => match value(other) {
                        Some(v) => out.push_str(&v.replace("${", "$${")),
                        None => return Err(other.clone()),
                    },
                },
            }
        }
        Ok(out)
    }
}

/// A placeholder that does not parse, with the byte range to point at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PlaceholderError {
    pub range: Range<usize>,
    pub message: String,
    pub help: Option<String>,
}

const KINDS: [&str; 4] = ["seat", "secret", "file", "artifact"];

/// Parses `s`, collecting every malformed placeholder rather than stopping
/// at the first.
pub fn parse(s: &str) -> Result<Template, Vec<PlaceholderError>> {
    let mut segments = Vec::new();
    let mut errors = Vec::new();
    let mut text = String::new();
    let mut rest = 0;
    while let Some(found) = s.get(rest..).and_then(|r| r.find('$')) {
        let at = rest + found;
        let after = s.get(at..).unwrap_or("");
        if after.starts_with("$${") {
            text.push_str(s.get(rest..at).unwrap_or(""));
            text.push_str("${");
            rest = at + 3;
            continue;
        }
        if !after.starts_with("${") {
            text.push_str(s.get(rest..=at).unwrap_or(""));
            rest = at + 1;
            continue;
        }
        text.push_str(s.get(rest..at).unwrap_or(""));
        let Some(close) = after.find('}') else {
            errors.push(PlaceholderError {
                range: at..s.len(),
                message: "placeholder `${` is never closed with `}`".into(),
                help: Some("write `${seat:NAME:PORT}`, `${secret:NAME}`, `${file:NAME}` or `${artifact:NAME}`; `$${` writes a literal `${`".into()),
            });
            rest = s.len();
            break;
        };
        let end = at + close + 1;
        let body = after.get(2..close).unwrap_or("");
        match parse_body(body) {
            Ok(placeholder) => {
                if !text.is_empty() {
                    segments.push(Segment::Text(std::mem::take(&mut text)));
                }
                segments.push(Segment::Placeholder {
                    placeholder,
                    range: at..end,
                });
            }
            Err((message, help)) => errors.push(PlaceholderError {
                range: at..end,
                message,
                help,
            }),
        }
        rest = end;
    }
    text.push_str(s.get(rest..).unwrap_or(""));
    if !text.is_empty() {
        segments.push(Segment::Text(text));
    }
    if errors.is_empty() {
        Ok(Template { segments })
    } else {
        Err(errors)
    }
}

type BodyError = (String, Option<String>);

fn parse_body(body: &str) -> Result<Placeholder, BodyError> {
    let parts: Vec<&str> = body.split(':').collect();
    let kind = parts.first().copied().unwrap_or("");
    let name = |i: usize| -> Result<Name, BodyError> {
        let raw = parts.get(i).copied().unwrap_or("");
        Name::new(raw).map_err(|e| (format!("in placeholder `${{{body}}}`: {e}"), None))
    };
    let arity = |want: usize, form: &str| -> Result<(), BodyError> {
        if parts.len() == want {
            Ok(())
        } else {
            Err((
                format!("placeholder `${{{body}}}` is malformed"),
                Some(format!("write `{form}`")),
            ))
        }
    };
    match kind {
        "seat" => {
            arity(3, "${seat:NAME:PORT}")?;
            let seat = name(1)?;
            let raw_port = parts.get(2).copied().unwrap_or("");
            let port = raw_port
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0 && raw_port.chars().all(|c| c.is_ascii_digit()))
                .ok_or_else(|| {
                    (
                        format!("port `{raw_port}` in `${{{body}}}` is not a port number"),
                        Some("write the port the seat's protocol listens on, 1 to 65535".into()),
                    )
                })?;
            Ok(Placeholder::Seat { seat, port })
        }
        "secret" => {
            arity(2, "${secret:NAME}")?;
            Ok(Placeholder::Secret { name: name(1)? })
        }
        "file" => {
            arity(2, "${file:NAME}")?;
            Ok(Placeholder::File { name: name(1)? })
        }
        "artifact" => {
            arity(2, "${artifact:NAME}")?;
            Ok(Placeholder::Artifact { name: name(1)? })
        }
        other => {
            let help = match crate::diagnostic::suggest(other, KINDS) {
                Some(k) => format!("did you mean `{k}`?"),
                None => "a placeholder is `${seat:NAME:PORT}`, `${secret:NAME}`, `${file:NAME}` or `${artifact:NAME}`; `$${` writes a literal `${`".into(),
            };
            Err((
                format!("unknown placeholder kind `{other}` in `${{{body}}}`"),
                Some(help),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    #[test]
    fn artifacts_are_kept_for_the_host_and_literal_openings_escaped_again() {
        let t = parse("$${x} ${artifact:bin} ${file:f}").unwrap();
        let kept = t.fill_keeping_artifacts(|_| Some("a${b".into())).unwrap();
        assert_eq!(kept, "$${x} ${artifact:bin} a$${b");
        // What the host parses again reads as the manifest meant it.
        let again = parse(&kept).unwrap();
        let artifacts: Vec<_> = again.placeholders().map(|(p, _)| p.clone()).collect();
        assert_eq!(artifacts, [Placeholder::Artifact { name: n("bin") }]);
    }

    #[test]
    fn a_dollar_just_before_an_artifact_is_refused_not_read_back_as_an_escape() {
        let t = parse("${file:f}${artifact:bin}").unwrap();
        assert_eq!(
            t.fill_keeping_artifacts(|_| Some("x$".into())),
            Err(Placeholder::Artifact { name: n("bin") })
        );
        // Without the `$` the same template is kept.
        assert_eq!(
            t.fill_keeping_artifacts(|_| Some("x".into())).unwrap(),
            "x${artifact:bin}"
        );
    }

    #[test]
    fn parses_each_kind_with_ranges() {
        let t = parse("postgres://${seat:mesh-store:5432}/db?f=${file:data}").unwrap();
        let found: Vec<_> = t.placeholders().collect();
        assert_eq!(
            found[0],
            (
                &Placeholder::Seat {
                    seat: n("mesh-store"),
                    port: 5432
                },
                &(11..34)
            )
        );
        assert_eq!(found[1].0, &Placeholder::File { name: n("data") });
        let filled = t
            .fill(|p| match p {
                Placeholder::Seat { .. } => Some("db.internal:5432".into()),
                _ => Some("/x".into()),
            })
            .unwrap();
        assert_eq!(filled, "postgres://db.internal:5432/db?f=/x");
    }

    #[test]
    fn dollar_escapes_and_plain_dollars() {
        let t = parse("cost $5 $${HOME}").unwrap();
        assert_eq!(t.fill(|_| None).unwrap(), "cost $5 ${HOME}");
    }

    #[test]
    fn refuses_malformed() {
        for bad in [
            "${seat:git}",
            "${seat:git:0}",
            "${seat:git:99999}",
            "${seat:git:+22}",
            "${sekret:x}",
            "${secret:A}",
            "${file:}",
            "x ${file:a",
            "${}",
        ] {
            let errs = parse(bad).unwrap_err();
            assert_eq!(errs.len(), 1, "{bad}");
            assert_eq!(errs[0].range.start, bad.find("${").unwrap(), "{bad}");
        }
        let e = parse("${sekret:x}").unwrap_err();
        assert_eq!(e[0].help.as_deref(), Some("did you mean `secret`?"));
    }
}

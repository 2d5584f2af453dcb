//! `[health]`: one check (`http`, `tcp`, `exec`, or `sdk = true`: the
//! module says ready itself through the SDK) and its timings. Its
//! strings take `${seat:..}` and `${file:..}` as `[run]` does; a secret
//! would show in every report of a failing check, so it is refused.

use std::ops::Range;

use toml::de::{DeTable, DeValue};

use super::parser::Parser;
use super::run_section::Context;
use super::toml_access::{Val, get};
use super::{
    DEFAULT_HEALTHY_AFTER_MS, DEFAULT_INTERVAL_MS, DEFAULT_TIMEOUT_MS, FileDecl, HealthCheck,
    HealthSection,
};
use crate::diagnostic::Kind;
use crate::duration::{SPAN_HELP, parse_span};

pub(super) const HEALTH: &[&str] = &[
    "http",
    "tcp",
    "exec",
    "sdk",
    "interval",
    "timeout",
    "healthy_after",
];
const CHECKS: &[&str] = &["http", "tcp", "exec", "sdk"];
/// Checks closer together than this would be the node's main work.
const MIN_INTERVAL_MS: u64 = 100;

impl Parser<'_> {
    pub(super) fn health(
        &mut self,
        t: &DeTable<'_>,
        header: &Range<usize>,
        files: &[FileDecl],
    ) -> Option<HealthSection> {
        self.check_fields(t, Some("[health]"), HEALTH);
        let given: Vec<(&str, Range<usize>, &Val<'_>)> = CHECKS
            .iter()
            .filter_map(|k| get(t, k).map(|(span, v)| (*k, span, v)))
            .collect();
        let (kind, v) = match given.as_slice() {
            [] => {
                self.toml.push(
                    Kind::MissingField,
                    header.clone(),
                    "[health] names no check".into(),
                    Some("write one of `http = \"http://127.0.0.1:PORT/PATH\"`, `tcp = \"127.0.0.1:PORT\"`, `exec = [\"program\", \"arg\"]` or `sdk = true` (the module says ready through the SDK)".into()),
                );
                return None;
            }
            [(kind, _, v)] => (*kind, *v),
            [_, (second, span, _), ..] => {
                self.toml.push(
                    Kind::BadValue,
                    span.clone(),
                    format!("[health] names a second check, `{second}`"),
                    Some(
                        "keep one of `http`, `tcp`, `exec` and `sdk`: a module has one check"
                            .into(),
                    ),
                );
                return None;
            }
        };
        let check = match kind {
            "sdk" => match v.get_ref() {
                DeValue::Boolean(true) => HealthCheck::Sdk,
                _ => {
                    self.toml.push(
                        Kind::BadValue,
                        v.span(),
                        "`sdk` is a check only as `sdk = true`".into(),
                        Some("write `sdk = true` (the module calls `ready` of mesh-sdk once it serves), or name another check".into()),
                    );
                    return None;
                }
            },
            "exec" => {
                let items = self.toml.argv(v, "exec");
                if items.is_empty() && matches!(v.get_ref(), DeValue::Array(_)) {
                    self.toml.push(
                        Kind::BadValue,
                        v.span(),
                        "`exec` is empty; a host would have nothing to run".into(),
                        Some("write `exec = [\"program\", \"arg\"]`".into()),
                    );
                    return None;
                }
                // A value refused is an error already: the manifest is
                // refused whatever is returned here.
                HealthCheck::Exec(
                    items
                        .iter()
                        .filter_map(|(s, span)| self.run_value(s, span, files, Context::Health))
                        .collect(),
                )
            }
            kind => {
                let s = self.toml.string(v, kind)?.to_string();
                if let Err(help) = shape(kind, &s) {
                    self.toml.push(
                        Kind::BadValue,
                        v.span(),
                        format!("`{kind}` is `{s}`, which the host cannot check"),
                        Some(help),
                    );
                    return None;
                }
                let value = self.run_value(&s, &v.span(), files, Context::Health)?;
                match kind {
                    "http" => HealthCheck::Http(value),
                    _ => HealthCheck::Tcp(value),
                }
            }
        };
        let interval_ms = self.span_field(t, "interval", DEFAULT_INTERVAL_MS, MIN_INTERVAL_MS)?;
        let timeout_ms = self.span_field(t, "timeout", DEFAULT_TIMEOUT_MS, 1)?;
        let healthy_after_ms = self.span_field(t, "healthy_after", DEFAULT_HEALTHY_AFTER_MS, 0)?;
        if timeout_ms > interval_ms {
            let at = get(t, "timeout")
                .or_else(|| get(t, "interval"))
                .map_or(header.clone(), |(_, v)| v.span());
            self.toml.push(
                Kind::BadValue,
                at,
                format!(
                    "the timeout ({}) is longer than the interval ({}): checks would overlap",
                    crate::duration::show_span(timeout_ms),
                    crate::duration::show_span(interval_ms)
                ),
                Some("make `timeout` at most `interval`".into()),
            );
            return None;
        }
        Some(HealthSection {
            check,
            interval_ms,
            timeout_ms,
            healthy_after_ms,
            pos: self.toml.pos(header),
        })
    }

    /// A span field (`"2s"`), `default` when absent, at least `min`.
    fn span_field(&mut self, t: &DeTable<'_>, field: &str, default: u64, min: u64) -> Option<u64> {
        let Some((_, v)) = get(t, field) else {
            return Some(default);
        };
        let s = self.toml.string(v, field)?;
        match parse_span(s) {
            Ok(ms) if ms >= min => Some(ms),
            Ok(_) => {
                self.toml.push(
                    Kind::BadValue,
                    v.span(),
                    format!(
                        "`{field}` is {s}, shorter than {}",
                        crate::duration::show_span(min)
                    ),
                    Some(format!("write {} or more", crate::duration::show_span(min))),
                );
                None
            }
            Err(why) => {
                self.toml.push(
                    Kind::BadValue,
                    v.span(),
                    format!("`{field}` is not a span of time: {why}"),
                    Some(SPAN_HELP.into()),
                );
                None
            }
        }
    }
}

/// Whether `s` has the shape a check of `kind` needs, as written (its
/// placeholders are filled later): `http://…` for http, `HOST:PORT` for tcp.
fn shape(kind: &str, s: &str) -> Result<(), String> {
    match kind {
        "http" if s.starts_with("https://") => Err(
            "the host checks over plain HTTP (the module is on its node): write `http://127.0.0.1:PORT/PATH`".into(),
        ),
        "http" if !s.starts_with("http://") || s.len() == "http://".len() => {
            Err("write `http://HOST:PORT/PATH`".into())
        }
        "tcp" if s.contains("://") || s.contains('/') || !s.contains(':') => {
            Err("write `HOST:PORT`, e.g. `127.0.0.1:8080` or `${seat:web:8080}`".into())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::{Diagnostic, Kind};
    use crate::manifest::{HealthCheck, parse};

    const HEAD: &str = "[module]\nname = \"m\"\n[run]\ncommand = [\"x\"]\n[[file]]\nname = \"conf\"\npath = \"c\"\n[health]\n";

    fn refused(health: &str) -> Diagnostic {
        let text = format!("{HEAD}{health}");
        let mut errs = parse("m.toml", &text).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs:?}");
        errs.remove(0)
    }

    #[test]
    fn each_check_is_read_with_its_timings() {
        let m = parse(
            "m.toml",
            &format!("{HEAD}http = \"http://127.0.0.1:8080/healthz\"\ninterval = \"500ms\"\ntimeout = \"200ms\"\nhealthy_after = \"3s\"\n"),
        )
        .unwrap();
        let h = m.health.unwrap();
        assert!(
            matches!(&h.check, HealthCheck::Http(v) if v.text == "http://127.0.0.1:8080/healthz")
        );
        assert_eq!(
            (h.interval_ms, h.timeout_ms, h.healthy_after_ms),
            (500, 200, 3000)
        );
        assert_eq!(h.pos.line, 8);

        let m = parse("m.toml", &format!("{HEAD}tcp = \"${{seat:web:8080}}\"\n")).unwrap();
        let h = m.health.clone().unwrap();
        assert!(matches!(&h.check, HealthCheck::Tcp(v) if v.placeholders.len() == 1));
        assert_eq!(
            (h.interval_ms, h.timeout_ms, h.healthy_after_ms),
            (2000, 1000, 2000)
        );
        assert!(m.seats_addressed().iter().any(|s| s.as_str() == "web"));

        let m = parse(
            "m.toml",
            &format!("{HEAD}exec = [\"check\", \"${{file:conf}}\"]\nhealthy_after = \"0s\"\n"),
        )
        .unwrap();
        let h = m.health.unwrap();
        assert!(matches!(&h.check, HealthCheck::Exec(argv) if argv.len() == 2));
        assert_eq!(h.healthy_after_ms, 0);

        let m = parse(
            "m.toml",
            &format!(
                "{HEAD}sdk = true
"
            ),
        )
        .unwrap();
        assert_eq!(m.health.unwrap().check, HealthCheck::Sdk);
        for bad in ["sdk = false\n", "sdk = \"yes\"\n"] {
            let d = refused(bad);
            assert!(
                d.message.contains("only as `sdk = true`"),
                "{bad}: {}",
                d.message
            );
            assert_eq!((d.location.line, d.location.col), (9, 7), "{bad}");
        }
        let d = refused("sdk = true\ntcp = \"127.0.0.1:1\"\n");
        assert!(d.message.contains("a second check"), "{}", d.message);
        // No [health]: none.
        assert!(
            parse("m.toml", HEAD.trim_end_matches("[health]\n"))
                .unwrap()
                .health
                .is_none()
        );
    }

    #[test]
    fn refusals_point_at_the_line_and_say_what_to_write() {
        let d = refused("interval = \"1s\"\n");
        assert_eq!((d.kind, d.location.line), (Kind::MissingField, 8));
        assert!(d.message.contains("names no check"), "{}", d.message);
        let d = refused("http = \"http://a:1/\"\ntcp = \"a:1\"\n");
        assert_eq!((d.kind, d.location.line), (Kind::BadValue, 10));
        assert!(d.message.contains("second check, `tcp`"), "{}", d.message);
        let d = refused("http = \"https://a:1/\"\n");
        assert_eq!((d.kind, d.location.line), (Kind::BadValue, 9));
        assert!(d.help.unwrap().contains("plain HTTP"));
        let d = refused("http = \"a:1\"\n");
        assert!(d.help.unwrap().contains("http://HOST:PORT/PATH"));
        let d = refused("http = \"http://\"\n");
        assert_eq!(d.kind, Kind::BadValue);
        for bad in ["a", "http://a:1", "a:1/x"] {
            let d = refused(&format!("tcp = \"{bad}\"\n"));
            assert!(d.help.unwrap().contains("HOST:PORT"), "{bad}");
        }
        let d = refused("exec = []\n");
        assert!(d.message.contains("`exec` is empty"), "{}", d.message);
        let d = refused("tcp = \"a:1\"\ninterval = \"2\"\n");
        assert_eq!((d.kind, d.location.line), (Kind::BadValue, 10));
        assert!(d.help.unwrap().contains("500ms, 2s"));
        let d = refused("tcp = \"a:1\"\ninterval = \"50ms\"\n");
        assert!(d.message.contains("shorter than 100ms"), "{}", d.message);
        let d = refused("tcp = \"a:1\"\ntimeout = \"0s\"\n");
        assert!(d.message.contains("shorter than 1ms"), "{}", d.message);
        let d = refused("tcp = \"a:1\"\ninterval = \"1s\"\ntimeout = \"2s\"\n");
        assert_eq!(d.location.line, 11);
        assert!(
            d.message.contains("longer than the interval"),
            "{}",
            d.message
        );
        // A timeout as long as the interval is the most it may be.
        let m = parse(
            "m.toml",
            &format!("{HEAD}tcp = \"a:1\"\ninterval = \"1s\"\ntimeout = \"1s\"\n"),
        )
        .unwrap();
        assert_eq!(
            m.health.map(|h| (h.interval_ms, h.timeout_ms)),
            Some((1000, 1000))
        );
        let d = refused("tcp = \"a:1\"\ninterval = \"500ms\"\n");
        assert!(
            d.message
                .contains("timeout (1s) is longer than the interval (500ms)"),
            "{}",
            d.message
        );
        let d = refused("tcp = \"a:1\"\nretries = 3\n");
        assert_eq!(d.kind, Kind::UnknownField);
        let d = refused("exec = [\"check\", \"${secret:k}\"]\n");
        assert_eq!(d.location.line, 9);
        assert!(d.message.contains("in [health]"), "{}", d.message);
        let d = refused("tcp = \"${artifact:bin}:1\"\n");
        assert!(
            d.message.contains("[run] `command` and `image` only"),
            "{}",
            d.message
        );
        let d = refused("tcp = \"${file:nope}:1\"\n");
        assert_eq!(d.kind, Kind::UndeclaredFile);
    }
}

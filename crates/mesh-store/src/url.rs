//! Which store a URL names, and how to print it without its password.

use std::path::PathBuf;
use std::str::FromStr;

use sqlx::postgres::PgConnectOptions;

use crate::error::StoreError;

/// The embedded default: a SQLite file beside where mesh runs.
pub const DEFAULT_URL: &str = "sqlite://./.mesh/mesh.db";

const DEFAULT_SQLITE_PATH: &str = "./.mesh/mesh.db";

pub(crate) enum Target {
    Sqlite(PathBuf),
    Postgres(Box<PgConnectOptions>),
}

pub(crate) fn parse(url: &str) -> Result<Target, StoreError> {
    let bad = |reason: String| StoreError::BadUrl {
        url: redact_url(url),
        reason,
    };
    if let Some(rest) = url.strip_prefix("sqlite:") {
        let path = rest.strip_prefix("//").unwrap_or(rest);
        if path.contains('?') {
            return Err(bad(
                "options in a sqlite url are not supported; mesh sets them itself".into(),
            ));
        }
        if path == ":memory:" {
            // Every pooled connection would get its own empty database, and
            // everything would be lost at exit.
            return Err(bad(
                "an in-memory store cannot hold the mesh's records; give a file path".into(),
            ));
        }
        if path.is_empty() {
            // Falling back to the default would open (or create) a store the
            // operator did not name.
            return Err(bad(format!(
                "it names no file; write sqlite://{DEFAULT_SQLITE_PATH} (the default) or sqlite:///ABSOLUTE/PATH"
            )));
        }
        return Ok(Target::Sqlite(PathBuf::from(path)));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return PgConnectOptions::from_str(url)
            .map(|o| Target::Postgres(Box::new(o)))
            // The driver's message may quote the URL; scrub before keeping it.
            .map_err(|e| bad(scrub(&e.to_string(), url)));
    }
    if !url.contains("://") && url.contains('=') {
        // sqlx 0.8 parses only the URL form; libpq's `host=... dbname=...`
        // fails there with a message about relative URLs.
        return Err(bad(
            "the key=value form is not read; write postgres://USER:PASSWORD@HOST:PORT/DATABASE"
                .into(),
        ));
    }
    Err(bad(
        "expected sqlite://PATH (the embedded default) or postgres://USER@HOST/DATABASE".into(),
    ))
}

/// `url` with the password (in the userinfo, a `password=` parameter, or a
/// libpq `password=...` pair, quoted or not) replaced by `***`, safe to print.
pub fn redact_url(url: &str) -> String {
    let out = match password_span(url) {
        Some((s, e)) if s < e => format!("{}***{}", &url[..s], &url[e..]),
        _ => url.to_string(),
    };
    let out = redact_password_param(&out);
    if url.contains("://") {
        return out;
    }
    let mut out = out;
    for (s, e) in keyvalue_password_spans(&out).into_iter().rev() {
        out.replace_range(s..e, "***");
    }
    out
}

/// Byte ranges of the values of `password = value` pairs in libpq's
/// key=value form: a value is `'quoted'` (with `\'` escapes) or runs to the
/// next whitespace.
fn keyvalue_password_spans(s: &str) -> Vec<(usize, usize)> {
    let b = s.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let key_start = i;
        while i < b.len() && !b[i].is_ascii_whitespace() && b[i] != b'=' {
            i += 1;
        }
        let key = &s[key_start..i];
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= b.len() || b[i] != b'=' {
            continue;
        }
        i += 1;
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let start = i;
        if i < b.len() && b[i] == b'\'' {
            i += 1;
            while i < b.len() && b[i] != b'\'' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(b.len());
        } else {
            while i < b.len() && !b[i].is_ascii_whitespace() {
                i += 1;
            }
        }
        if is_password_key(key) && start < i {
            spans.push((start, i));
        }
    }
    spans
}

/// Byte range of the password in `scheme://user:password@host...`. Errs on
/// the side of hiding too much: the userinfo ends at the *last* '@' before any
/// query, so a password holding an unencoded '/' or '@' is still covered.
fn password_span(url: &str) -> Option<(usize, usize)> {
    let start = url.find("://")? + 3;
    let end = url[start..]
        .find(['?', '#'])
        .map_or(url.len(), |i| start + i);
    let at = start + url[start..end].rfind('@')?;
    let colon = start + url[start..at].find(':')?;
    Some((colon + 1, at))
}

fn userinfo_password(url: &str) -> Option<&str> {
    password_span(url).map(|(s, e)| &url[s..e])
}

fn is_password_key(k: &str) -> bool {
    k.eq_ignore_ascii_case("password")
}

/// The values of the URL's `password=` query parameters.
fn param_passwords(url: &str) -> impl Iterator<Item = &str> {
    url.split_once('?')
        .map_or("", |(_, query)| query)
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| is_password_key(k))
        .map(|(_, v)| v)
}

fn redact_password_param(url: &str) -> String {
    let Some(q) = url.find('?') else {
        return url.to_string();
    };
    let (head, query) = url.split_at(q + 1);
    let parts: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if is_password_key(k) => format!("{k}=***"),
            _ => kv.to_string(),
        })
        .collect();
    format!("{head}{}", parts.join("&"))
}

/// Removes the URL's passwords (and the URL itself) from a driver message,
/// which may quote either password on its own.
fn scrub(message: &str, url: &str) -> String {
    let mut m = message.replace(url, &redact_url(url));
    for pw in userinfo_password(url)
        .into_iter()
        .chain(param_passwords(url))
        // Replacing "" would put *** between every character.
        .filter(|p| !p.is_empty())
    {
        m = m.replace(pw, "***");
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_userinfo_password() {
        assert_eq!(
            redact_url("postgres://mesh:s3cr@t@db:5432/mesh"),
            "postgres://mesh:***@db:5432/mesh"
        );
        assert_eq!(
            redact_url("postgres://u:pa/ss@db/mesh"),
            "postgres://u:***@db/mesh"
        );
        assert_eq!(
            redact_url("postgres://mesh@db/mesh"),
            "postgres://mesh@db/mesh"
        );
        assert_eq!(
            redact_url("postgres://db/mesh?user=a&password=hunter2&sslmode=require"),
            "postgres://db/mesh?user=a&password=***&sslmode=require"
        );
    }

    #[test]
    fn bad_url_never_shows_the_password() {
        let url = "postgres://mesh:hunter2@db:notaport/mesh";
        let Err(e) = parse(url) else {
            panic!("a port that is not a number must be refused")
        };
        assert!(matches!(e, StoreError::BadUrl { .. }), "{e:?}");
        assert!(!e.to_string().contains("hunter2"), "{e}");
        assert!(!format!("{e:?}").contains("hunter2"), "{e:?}");
    }

    #[test]
    fn scrub_blanks_both_passwords_quoted_alone() {
        let url = "postgres://u:s3cret@db/mesh?user=a&Password=hunter2&password=";
        assert_eq!(
            scrub("auth failed for s3cret and hunter2 at db", url),
            "auth failed for *** and *** at db"
        );
        assert_eq!(
            scrub(&format!("cannot parse {url}"), url),
            "cannot parse postgres://u:***@db/mesh?user=a&Password=***&password=***"
        );
    }

    #[test]
    fn keyvalue_passwords_are_redacted_quoted_or_not() {
        assert_eq!(
            redact_url("host=db password=kvsecret dbname=mesh"),
            "host=db password=*** dbname=mesh"
        );
        assert_eq!(
            redact_url("host=db password = 'kv secret\\'s' user=u"),
            "host=db password = *** user=u"
        );
        assert_eq!(redact_url("PASSWORD=x"), "PASSWORD=***");
        let Err(e) = parse("host=db password=kvsecret dbname=mesh") else {
            panic!("the key=value form is refused")
        };
        let shown = format!("{e} {e:?}");
        assert!(!shown.contains("kvsecret"), "{shown}");
        assert!(shown.contains("postgres://USER:PASSWORD@HOST"), "{shown}");
    }

    #[test]
    fn sqlite_paths_and_refusals() {
        // An empty path once fell back to the default store.
        for empty in ["sqlite://", "sqlite:"] {
            match parse(empty) {
                Err(StoreError::BadUrl { reason, .. }) => {
                    assert!(reason.contains("sqlite://./.mesh/mesh.db"), "{reason}")
                }
                _ => panic!("{empty} names no file and must be refused"),
            }
        }
        match parse("sqlite:///var/lib/mesh/mesh.db") {
            Ok(Target::Sqlite(p)) => assert_eq!(p, PathBuf::from("/var/lib/mesh/mesh.db")),
            _ => panic!("absolute path"),
        }
        assert!(matches!(
            parse("sqlite::memory:"),
            Err(StoreError::BadUrl { .. })
        ));
        assert!(matches!(
            parse("mysql://x/y"),
            Err(StoreError::BadUrl { .. })
        ));
    }
}

//! Names of nodes, modules, seats, events and tools.
//!
//! Every name ends up as one token of a NATS subject and as part of a principal
//! name, so the alphabet is closed: a `.` would add a token, a `*` or `>` would
//! widen a grant, and a separator character would let two principals collide.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest name accepted; keeps subjects and consumer names well under server limits.
pub const MAX_NAME_LEN: usize = 64;

/// A validated name: `[a-z0-9][a-z0-9-]*`, at most [`MAX_NAME_LEN`] characters.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Name(String);

/// Why a string is not a [`Name`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("a name may not be empty; write lowercase letters, digits and '-'")]
    Empty,
    #[error("name {name:?} is {len} characters long; at most {MAX_NAME_LEN} are allowed")]
    TooLong { name: String, len: usize },
    #[error(
        "name {name:?} may not start with {ch:?}; it must start with a lowercase letter or digit"
    )]
    BadStart { name: String, ch: char },
    #[error(
        "name {name:?} contains {ch:?} at position {position}; only lowercase letters, digits and '-' are allowed{hint}"
    )]
    BadChar {
        name: String,
        ch: char,
        /// 1-based character position within the name.
        position: usize,
        hint: &'static str,
    },
}

impl Name {
    /// Validates `s` as a name.
    pub fn new(s: impl Into<String>) -> Result<Self, NameError> {
        let s = s.into();
        validate(&s)?;
        Ok(Name(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn validate(s: &str) -> Result<(), NameError> {
    let mut chars = s.chars();
    let Some(first) = chars.next() else {
        return Err(NameError::Empty);
    };
    let len = s.chars().count();
    if len > MAX_NAME_LEN {
        return Err(NameError::TooLong {
            name: s.to_string(),
            len,
        });
    }
    if !(first.is_ascii_lowercase() || first.is_ascii_digit()) {
        if first == '-' {
            return Err(NameError::BadStart {
                name: s.to_string(),
                ch: first,
            });
        }
        return Err(bad_char(s, first, 1));
    }
    for (i, ch) in s.chars().enumerate().skip(1) {
        if !(ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '-') {
            return Err(bad_char(s, ch, i + 1));
        }
    }
    Ok(())
}

fn bad_char(name: &str, ch: char, position: usize) -> NameError {
    let hint = match ch {
        '.' => " (a '.' would add a subject token)",
        '*' | '>' => " (a wildcard would widen every subject built from this name)",
        '_' => " (write '-' instead of '_')",
        c if c.is_ascii_uppercase() => " (write it in lowercase)",
        c if c.is_whitespace() => " (whitespace is not allowed)",
        _ => "",
    };
    NameError::BadChar {
        name: name.to_string(),
        ch,
        position,
        hint,
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for Name {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Name::new(s)
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Name::new(s).map_err(serde::de::Error::custom)
    }
}

/// A hostname a certificate can carry: what a typo (a scheme, a port, a
/// stray space) would otherwise turn into a SAN nobody connects with.
pub fn check_dns_name(s: &str) -> Result<(), &'static str> {
    if s.contains("://") {
        return Err("it has a scheme");
    }
    if s.contains(':') {
        return Err("it has a port (or is not an IP address)");
    }
    if s.is_empty() || s.len() > 253 {
        return Err("a DNS name is 1 to 253 characters");
    }
    for label in s.trim_end_matches('.').split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err("each dot-separated label is 1 to 63 characters");
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err("a DNS name holds only letters, digits, '-' and '.'");
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err("a label may not start or end with '-'");
        }
    }
    // The last label of the name itself: a trailing dot (a fully qualified
    // name) leaves an empty one, which is no number.
    if s.trim_end_matches('.')
        .rsplit('.')
        .next()
        .is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err("it looks like an IP address but is not one");
    }
    Ok(())
}

/// Where a node is reached: an IP address or a DNS name, without scheme or
/// port (the port is the seat's).
pub fn check_address(s: &str) -> Result<(), String> {
    if s.parse::<std::net::IpAddr>().is_ok() {
        return Ok(());
    }
    check_dns_name(s).map_err(|why| {
        format!("{s:?} is not an address a node is reached at: {why}; give an IP address or a DNS name, without scheme or port")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_alphabet() {
        for ok in ["a", "0", "audit-log", "node-01", &"a".repeat(64)] {
            assert!(Name::new(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn refuses_naming_the_character() {
        let cases = [
            ("audit.log", '.', 6),
            ("a*", '*', 2),
            ("a>", '>', 2),
            ("Audit", 'A', 1),
            ("audit_log", '_', 6),
            ("a b", ' ', 2),
        ];
        for (input, ch, pos) in cases {
            match Name::new(input) {
                Err(NameError::BadChar {
                    ch: c, position, ..
                }) => {
                    assert_eq!((c, position), (ch, pos), "{input}")
                }
                other => panic!("{input}: {other:?}"),
            }
        }
        assert!(matches!(
            Name::new("-a"),
            Err(NameError::BadStart { ch: '-', .. })
        ));
        assert!(matches!(Name::new(""), Err(NameError::Empty)));
        assert!(matches!(
            Name::new("a".repeat(65)),
            Err(NameError::TooLong { len: 65, .. })
        ));
    }

    #[test]
    fn message_names_the_character() {
        let e = Name::new("audit.log").unwrap_err().to_string();
        assert!(e.contains("'.'") && e.contains("position 6"), "{e}");
    }

    #[test]
    fn a_dns_name_is_refused_naming_what_is_wrong_with_it() {
        for ok in [
            "db1",
            "db1.example.net",
            "db1.example.net.",
            "a-b.c",
            &"a".repeat(63),
            &format!("{}.{}", "a".repeat(63), "b".repeat(63)),
        ] {
            assert_eq!(check_dns_name(ok), Ok(()), "{ok}");
        }
        let long = format!("{}.x", "a.".repeat(126));
        assert_eq!(long.len(), 254);
        for (bad, why) in [
            ("tls://db1", "it has a scheme"),
            ("db1:4222", "it has a port (or is not an IP address)"),
            ("", "a DNS name is 1 to 253 characters"),
            (long.as_str(), "a DNS name is 1 to 253 characters"),
            ("a..b", "each dot-separated label is 1 to 63 characters"),
            (
                &"a".repeat(64),
                "each dot-separated label is 1 to 63 characters",
            ),
            ("db_1", "a DNS name holds only letters, digits, '-' and '.'"),
            ("db 1", "a DNS name holds only letters, digits, '-' and '.'"),
            ("-db", "a label may not start or end with '-'"),
            ("db-", "a label may not start or end with '-'"),
            ("10.0.0.300", "it looks like an IP address but is not one"),
        ] {
            assert_eq!(check_dns_name(bad), Err(why), "{bad:?}");
        }
        // 253 characters exactly is a name.
        let edge = format!("{}x", "a.".repeat(126));
        assert_eq!(edge.len(), 253);
        assert_eq!(check_dns_name(&edge), Ok(()));
    }

    #[test]
    fn an_address_is_an_ip_or_a_dns_name_and_a_refusal_says_what_to_give() {
        for ok in ["10.0.0.7", "::1", "fe80::1", "db1.example.net"] {
            assert_eq!(check_address(ok), Ok(()), "{ok}");
        }
        let e = check_address("tls://10.0.0.7:4222").unwrap_err();
        assert!(e.contains("it has a scheme"), "{e}");
        assert!(
            e.ends_with("give an IP address or a DNS name, without scheme or port"),
            "{e}"
        );
        assert!(check_address("10.0.0.7:5432").is_err());
    }
}

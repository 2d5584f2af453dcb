//! Decoding of a TOML string token as written in the source, keeping where
//! each decoded byte came from: what lets a diagnostic about part of a string
//! value point at that part, escapes and all.

/// Decodes a TOML string token (`"…"`, `'…'`, `"""…"""`, `'''…'''`) and maps
/// each byte of the decoded value to its byte offset in the token; the map
/// has one extra entry, for the end. `None` for anything unexpected (the
/// caller then points at the whole token).
pub(super) fn map_string(raw: &str) -> Option<(String, Vec<usize>)> {
    let (delim, literal) = if raw.starts_with("\"\"\"") {
        (3, false)
    } else if raw.starts_with("'''") {
        (3, true)
    } else if raw.starts_with('"') {
        (1, false)
    } else if raw.starts_with('\'') {
        (1, true)
    } else {
        return None;
    };
    let multiline = delim == 3;
    let body_end = raw.len().checked_sub(delim)?;
    if body_end < delim {
        return None;
    }
    let body = raw.get(delim..body_end)?;
    let mut out = String::new();
    let mut map = Vec::new();
    let push = |out: &mut String, map: &mut Vec<usize>, c: char, at: usize| {
        for _ in 0..c.len_utf8() {
            map.push(delim + at);
        }
        out.push(c);
    };
    let mut chars = body.char_indices().peekable();
    // A newline right after the opening delimiter is not part of the value.
    if multiline {
        if body.starts_with("\r\n") {
            chars.next();
            chars.next();
        } else if body.starts_with('\n') {
            chars.next();
        }
    }
    while let Some((i, c)) = chars.next() {
        if literal || c != '\\' {
            push(&mut out, &mut map, c, i);
            continue;
        }
        let (_, e) = chars.next()?;
        let simple = match e {
            'b' => Some('\u{8}'),
            't' => Some('\t'),
            'n' => Some('\n'),
            'f' => Some('\u{c}'),
            'r' => Some('\r'),
            'e' => Some('\u{1b}'),
            '"' => Some('"'),
            '\\' => Some('\\'),
            _ => None,
        };
        if let Some(c) = simple {
            push(&mut out, &mut map, c, i);
            continue;
        }
        let digits = match e {
            'x' => 2,
            'u' => 4,
            'U' => 8,
            w if multiline && w.is_whitespace() => {
                // Line-ending backslash: the newline and following
                // whitespace are dropped.
                while chars.peek().is_some_and(|(_, c)| c.is_whitespace()) {
                    chars.next();
                }
                continue;
            }
            _ => return None,
        };
        let mut code = 0u32;
        for _ in 0..digits {
            let (_, d) = chars.next()?;
            code = code.checked_mul(16)?.checked_add(d.to_digit(16)?)?;
        }
        push(&mut out, &mut map, char::from_u32(code)?, i);
    }
    map.push(body_end);
    Some((out, map))
}

#[cfg(test)]
mod tests {
    use super::map_string;

    #[test]
    fn maps_decoded_offsets_to_the_token() {
        let (s, m) = map_string(r#""a\tb${x}""#).unwrap();
        assert_eq!(s, "a\tb${x}");
        assert_eq!(m[0], 1);
        assert_eq!(m[1], 2); // the escape starts at the backslash
        assert_eq!(m[2], 4);
        assert_eq!(m[3], 5); // `$`
        assert_eq!(*m.last().unwrap(), 9);
        let (s, m) = map_string("'''\nab'''").unwrap();
        assert_eq!(s, "ab");
        assert_eq!(m[0], 4);
        let (s, _) = map_string("\"\\u00e9\"").unwrap();
        assert_eq!(s, "é");
        assert!(map_string("\"\\q\"").is_none());
        assert!(map_string("\"").is_none());
    }
}

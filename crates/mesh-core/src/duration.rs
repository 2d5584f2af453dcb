//! Short spans of time as an operator writes them: `500ms`, `2s`, `1m`,
//! `1h` — a health check's interval, a deployment's window. Read into
//! milliseconds.

/// What to write instead, said with every refusal.
pub const SPAN_HELP: &str = "write a whole number and a unit: 500ms, 2s, 1m or 1h";

/// The longest span accepted: a day (a window longer than that is a typo).
pub const MAX_SPAN_MS: u64 = 86_400_000;

/// `s` in milliseconds, or why it is not a span (with [`SPAN_HELP`]).
/// Zero is a span: whether it may be is the caller's to say.
pub fn parse_span(s: &str) -> Result<u64, String> {
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = digits.parse().map_err(|_| format!("{s:?}: {SPAN_HELP}"))?;
    let ms = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("{s:?}: {SPAN_HELP}")),
    };
    n.checked_mul(ms)
        .filter(|t| *t <= MAX_SPAN_MS)
        .ok_or_else(|| format!("{s:?}: at most a day (24h)"))
}

/// `ms` in its largest whole unit: `1500ms`, `2s`, `3m`.
pub fn show_span(ms: u64) -> String {
    match ms {
        0 => "0s".into(),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_is_a_number_and_a_unit() {
        assert_eq!(parse_span("500ms"), Ok(500));
        assert_eq!(parse_span("2s"), Ok(2000));
        assert_eq!(parse_span("3m"), Ok(180_000));
        assert_eq!(parse_span("1h"), Ok(3_600_000));
        assert_eq!(parse_span("0s"), Ok(0));
        assert_eq!(parse_span("24h"), Ok(MAX_SPAN_MS));
        for bad in ["", "s", "10", "1.5s", "-1s", "1 s", "1d", "2S"] {
            let e = parse_span(bad).unwrap_err();
            assert!(e.contains(SPAN_HELP), "{bad}: {e}");
        }
        assert!(parse_span("25h").unwrap_err().contains("at most a day"));
        assert!(
            parse_span("99999999999999999999h")
                .unwrap_err()
                .contains(SPAN_HELP)
        );
        assert!(
            parse_span("9999999999999999h")
                .unwrap_err()
                .contains("at most a day")
        );
    }

    #[test]
    fn a_span_is_shown_in_its_largest_whole_unit() {
        for (ms, s) in [
            (0, "0s"),
            (1500, "1500ms"),
            (2000, "2s"),
            (90_000, "90s"),
            (120_000, "2m"),
            (7_200_000, "2h"),
        ] {
            assert_eq!(show_span(ms), s);
            assert_eq!(parse_span(s), Ok(ms));
        }
    }
}

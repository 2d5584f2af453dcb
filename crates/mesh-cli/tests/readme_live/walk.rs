//! The README's `console` blocks as a walk: each `$ ` line a command, the
//! lines under it what the command prints. A shown line matches the printed
//! line it stands for when the pieces between its `…` are found in order (a
//! line without `…` matches exactly, trailing blanks aside); a line that is
//! `…` alone stands for any number of printed lines.

/// One command of a block and what the README shows it printing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The README's line number of the command, for the failure message.
    pub line: usize,
    pub command: String,
    pub shown: Vec<String>,
}

/// Every `$ ` line of every ```` ```console ```` block, in order.
pub fn steps(readme: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut inside = false;
    for (i, line) in readme.lines().enumerate() {
        let trimmed = line.trim_end();
        if !inside {
            inside = trimmed == "```console";
            continue;
        }
        if trimmed == "```" {
            inside = false;
            continue;
        }
        if let Some(command) = trimmed.strip_prefix("$ ") {
            steps.push(Step {
                line: i + 1,
                command: command.to_string(),
                shown: Vec::new(),
            });
        } else if let Some(step) = steps.last_mut() {
            step.shown.push(trimmed.to_string());
        }
    }
    steps
}

/// Whether `printed` (one line) is what `shown` stands for.
pub fn line_matches(shown: &str, printed: &str) -> bool {
    let printed = printed.trim_end();
    let pieces: Vec<&str> = shown.split('…').collect();
    if pieces.len() == 1 {
        return shown == printed;
    }
    let (first, last) = (pieces[0], pieces[pieces.len() - 1]);
    if !printed.starts_with(first) || printed.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &printed[first.len()..];
    for piece in &pieces[1..pieces.len() - 1] {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// Whether the printed lines are what the shown lines stand for, whole.
pub fn matches(shown: &[String], printed: &[String]) -> bool {
    match shown.split_first() {
        None => printed.is_empty(),
        Some((s, rest)) if s == "…" => {
            (0..=printed.len()).any(|skip| matches(rest, &printed[skip..]))
        }
        Some((s, rest)) => printed
            .split_first()
            .is_some_and(|(p, more)| line_matches(s, p) && matches(rest, more)),
    }
}

/// Whether the printed lines so far begin with everything shown (a daemon's
/// output, read while it runs: `…` lines may match what has not come yet).
pub fn prefix_matches(shown: &[String], printed: &[String]) -> bool {
    let mut with_tail = shown.to_vec();
    with_tail.push("…".into());
    matches(&with_tail, printed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(lines: &[&str]) -> Vec<String> {
        lines.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_line_without_an_ellipsis_matches_exactly() {
        assert!(line_matches("mesh up: stopped", "mesh up: stopped  "));
        assert!(!line_matches("mesh up: stopped", "mesh up: stopped!"));
        assert!(!line_matches("mesh up", "mesh up: stopped"));
    }

    #[test]
    fn pieces_between_ellipses_are_found_in_order() {
        assert!(line_matches("mesh up: …/.mesh", "mesh up: /tmp/x/.mesh"));
        assert!(!line_matches(
            "mesh up: …/.mesh",
            "mesh up: /tmp/x/.mesh/host"
        ));
        assert!(line_matches("a … b … c", "a 1 b 2 c"));
        assert!(!line_matches("a … c … b", "a 1 b 2 c"));
        assert!(
            !line_matches("ab…ba", "aba"),
            "first and last may not overlap"
        );
    }

    #[test]
    fn an_ellipsis_line_stands_for_any_number_of_lines() {
        let printed = v(&["one", "two", "three"]);
        assert!(matches(&v(&["one", "…"]), &printed));
        assert!(matches(&v(&["…", "three"]), &printed));
        assert!(matches(&v(&["one", "…", "two", "three"]), &printed));
        assert!(!matches(&v(&["one", "three"]), &printed));
        assert!(
            !matches(&v(&["one", "two"]), &printed),
            "a line printed and not shown"
        );
        assert!(prefix_matches(&v(&["one", "two"]), &printed));
        assert!(!prefix_matches(&v(&["two"]), &printed));
    }

    #[test]
    fn console_blocks_give_commands_and_what_they_print() {
        let readme = "text\n```console\n$ mesh status\ncontroller ready\n$ mesh nodes\n```\n```sh\n$ not this\n```\n";
        let s = steps(readme);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].command, "mesh status");
        assert_eq!(s[0].shown, v(&["controller ready"]));
        assert_eq!(s[0].line, 3);
        assert!(s[1].shown.is_empty());
    }
}

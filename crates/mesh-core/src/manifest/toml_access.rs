//! Typed reads over a spanned TOML tree (`toml::de::DeTable`): each accessor
//! either returns the value of the expected type or records a located
//! diagnostic and returns nothing, so a reader keeps going and reports every
//! problem of a file at once.

use std::collections::HashMap;
use std::ops::Range;

use toml::Spanned;
use toml::de::{DeString, DeTable, DeValue};

use super::Located;
use super::decode::map_string;
use crate::diagnostic::{Diagnostic, Kind, LineIndex, Location, Pos, suggest};
use crate::names::Name;

/// A value of the tree, with its span in the source.
pub(crate) type Val<'i> = Spanned<DeValue<'i>>;
/// A key of a table, with its span in the source.
pub(crate) type Key<'i> = Spanned<DeString<'i>>;

/// The field `key` of `t`: the key's span and the value.
pub(crate) fn get<'t, 'i>(t: &'t DeTable<'i>, key: &str) -> Option<(Range<usize>, &'t Val<'i>)> {
    t.get_key_value(key).map(|(k, v)| (k.span(), v))
}

/// One TOML file being read: its source, for positions, and the diagnostics
/// found so far.
pub(crate) struct Reader<'a> {
    path: &'a str,
    src: &'a str,
    ix: LineIndex<'a>,
    diags: Vec<Diagnostic>,
}

impl<'a> Reader<'a> {
    /// `path` only names the file in diagnostics.
    pub(crate) fn new(path: &'a str, src: &'a str) -> Self {
        Reader {
            path,
            src,
            ix: LineIndex::new(src),
            diags: Vec::new(),
        }
    }

    pub(crate) fn path(&self) -> &'a str {
        self.path
    }

    /// Parses the whole source. On a syntax error every one found is
    /// recorded and there is no tree.
    pub(crate) fn root(&mut self) -> Option<Spanned<DeTable<'a>>> {
        let (root, errors) = DeTable::parse_recoverable(self.src);
        if errors.is_empty() {
            return Some(root);
        }
        for e in errors {
            // A syntax error without a span is still reported, at the start.
            let span = e.span().unwrap_or(0..0);
            let message = e.message().trim().to_string();
            self.push(Kind::TomlSyntax, span, message, None);
        }
        None
    }

    /// Every diagnostic recorded, in the order found.
    pub(crate) fn into_diagnostics(self) -> Vec<Diagnostic> {
        self.diags
    }

    pub(crate) fn pos(&self, span: &Range<usize>) -> Pos {
        self.ix.pos(span.start, span.end)
    }

    pub(crate) fn push(
        &mut self,
        kind: Kind,
        span: Range<usize>,
        message: String,
        help: Option<String>,
    ) {
        self.push_at(kind, self.pos(&span), message, help);
    }

    pub(crate) fn push_at(&mut self, kind: Kind, pos: Pos, message: String, help: Option<String>) {
        let mut d = Diagnostic::new(kind, Location::new(self.path, pos), message);
        d.help = help;
        self.diags.push(d);
    }

    /// Whether `k` is one of `known`. If not, refuses it with `message`,
    /// helped by the close known key or else by `otherwise`.
    pub(crate) fn known_key(
        &mut self,
        k: &Key<'_>,
        known: &[&str],
        message: impl FnOnce(&str) -> String,
        otherwise: impl FnOnce(&str) -> Option<String>,
    ) -> bool {
        let key: &str = k.get_ref();
        if known.contains(&key) {
            return true;
        }
        let help = suggest(key, known.iter().copied())
            .map(|s| format!("did you mean `{s}`?"))
            .or_else(|| otherwise(key));
        self.push(Kind::UnknownField, k.span(), message(key), help);
        false
    }

    /// Refuses every key of `t` not in `known`, as [`Self::known_key`].
    pub(crate) fn check_keys(
        &mut self,
        t: &DeTable<'_>,
        known: &[&str],
        message: impl Fn(&str) -> String,
        otherwise: impl Fn(&str) -> Option<String>,
    ) {
        for (k, _) in t.iter() {
            self.known_key(k, known, &message, &otherwise);
        }
    }

    /// `v`, the value of `field`, as a table.
    pub(crate) fn table<'t, 'i>(
        &mut self,
        v: &'t Val<'i>,
        field: &str,
        help: Option<String>,
    ) -> Option<&'t DeTable<'i>> {
        match v.get_ref() {
            DeValue::Table(t) => Some(t),
            other => {
                self.push(
                    Kind::WrongType,
                    v.span(),
                    format!("`{field}` must be a table, found {}", other.type_str()),
                    help,
                );
                None
            }
        }
    }

    /// A section that must be a table (`[key]`); with its header's span.
    pub(crate) fn section<'t, 'i>(
        &mut self,
        root: &'t DeTable<'i>,
        key: &str,
    ) -> Option<(&'t DeTable<'i>, Range<usize>)> {
        let (_, v) = get(root, key)?;
        let help = Some(format!("write it as a `[{key}]` section"));
        self.table(v, key, help).map(|t| (t, v.span()))
    }

    /// A section that must be an array of tables (`[[key]]`).
    pub(crate) fn tables<'t, 'i>(
        &mut self,
        root: &'t DeTable<'i>,
        key: &str,
    ) -> Vec<(&'t DeTable<'i>, Range<usize>)> {
        let Some((_, v)) = get(root, key) else {
            return Vec::new();
        };
        let help = Some(format!(
            "write each as a `[[{key}]]` section (double brackets: there may be several)"
        ));
        let DeValue::Array(items) = v.get_ref() else {
            self.push(
                Kind::WrongType,
                v.span(),
                format!(
                    "`{key}` must be an array of tables, found {}",
                    v.get_ref().type_str()
                ),
                help,
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for item in items.iter() {
            match item.get_ref() {
                DeValue::Table(t) => out.push((t, item.span())),
                other => self.push(
                    Kind::WrongType,
                    item.span(),
                    format!("each `{key}` must be a table, found {}", other.type_str()),
                    help.clone(),
                ),
            }
        }
        out
    }

    /// `v`, the value of `field`, as a string.
    pub(crate) fn string<'t>(&mut self, v: &'t Val<'_>, field: &str) -> Option<&'t str> {
        self.string_for(v, &format!("`{field}`"))
    }

    /// `v` as a string; `subject` names it in the message (a field name in
    /// backticks, or a phrase such as "the new name of `x`").
    pub(crate) fn string_for<'t>(&mut self, v: &'t Val<'_>, subject: &str) -> Option<&'t str> {
        match v.get_ref() {
            DeValue::String(s) => Some(s),
            other => {
                self.push(
                    Kind::WrongType,
                    v.span(),
                    format!("{subject} must be a string, found {}", other.type_str()),
                    None,
                );
                None
            }
        }
    }

    /// An array of strings, each with its span; wrong elements are reported
    /// and skipped, and so is an entry listed twice.
    pub(crate) fn strings(&mut self, v: &Val<'_>, field: &str) -> Vec<(String, Range<usize>)> {
        let out = self.argv(v, field);
        self.no_duplicates(&out, field);
        out
    }

    /// A command line: as [`Self::strings`], but an argument may repeat
    /// (`--count 1 --every 1`).
    pub(crate) fn argv(&mut self, v: &Val<'_>, field: &str) -> Vec<(String, Range<usize>)> {
        let DeValue::Array(items) = v.get_ref() else {
            self.push(
                Kind::WrongType,
                v.span(),
                format!(
                    "`{field}` must be an array of strings, found {}",
                    v.get_ref().type_str()
                ),
                Some(format!("write `{field} = [\"...\"]`")),
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for item in items.iter() {
            match item.get_ref() {
                DeValue::String(s) => out.push((s.to_string(), item.span())),
                other => self.push(
                    Kind::WrongType,
                    item.span(),
                    format!(
                        "each entry of `{field}` must be a string, found {}",
                        other.type_str()
                    ),
                    None,
                ),
            }
        }
        out
    }

    fn no_duplicates(&mut self, items: &[(String, Range<usize>)], field: &str) {
        let mut first_at: HashMap<&str, &Range<usize>> = HashMap::new();
        for (s, span) in items {
            let Some(first) = first_at.get(s.as_str()) else {
                first_at.insert(s, span);
                continue;
            };
            let line = self.pos(first).line;
            self.push(
                Kind::DuplicateEntry,
                span.clone(),
                format!("`{s}` is listed twice in `{field}`"),
                Some(format!("remove this one; the first is on line {line}")),
            );
        }
    }

    /// The field `field` of `t`, which must be there; `header` is where the
    /// table starts, `section` how a message names it.
    pub(crate) fn required<'t, 'i>(
        &mut self,
        t: &'t DeTable<'i>,
        header: &Range<usize>,
        section: &str,
        field: &str,
        help: Option<String>,
    ) -> Option<&'t Val<'i>> {
        match get(t, field) {
            Some((_, v)) => Some(v),
            // A typo of this field is already reported as unknown, with the
            // fix; saying it is also missing would only add noise.
            None if t
                .iter()
                .any(|(k, _)| suggest(k.get_ref(), [field]).is_some()) =>
            {
                None
            }
            None => {
                self.push(
                    Kind::MissingField,
                    header.clone(),
                    format!("{section} has no `{field}`"),
                    help,
                );
                None
            }
        }
    }

    /// `s` (read at `span`) as a [`Name`]; a bad one is reported at the
    /// offending character, naming `what` it was meant to be.
    pub(crate) fn name(&mut self, s: &str, span: &Range<usize>, what: &str) -> Option<Name> {
        match super::refs::valid_name(s, what, |r| self.inner(span, s, r), span.clone()) {
            Ok(n) => Some(n),
            Err(e) => {
                self.push(e.kind, e.range, e.message, e.help);
                None
            }
        }
    }

    pub(crate) fn located_name(
        &mut self,
        s: &str,
        span: &Range<usize>,
        what: &str,
    ) -> Option<Located<Name>> {
        let n = self.name(s, span, what)?;
        Some(Located::new(n, self.pos(span)))
    }

    /// `field` of `t`, required, as a name.
    pub(crate) fn required_name(
        &mut self,
        t: &DeTable<'_>,
        header: &Range<usize>,
        section: &str,
        field: &str,
        what: &str,
    ) -> Option<Located<Name>> {
        let v = self.required(t, header, section, field, None)?;
        let s = self.string(v, field)?.to_string();
        self.located_name(&s, &v.span(), what)
    }

    /// An array of names; each bad one reported, the good ones kept.
    pub(crate) fn names(&mut self, v: &Val<'_>, field: &str, what: &str) -> Vec<Located<Name>> {
        self.strings(v, field)
            .iter()
            .filter_map(|(s, span)| self.located_name(s, span, what))
            .collect()
    }

    /// Maps a byte range of a string's decoded value to the source, so an
    /// error points at the character or placeholder itself. Falls back to
    /// the whole string token if the mapping is not exact.
    pub(crate) fn inner(
        &self,
        span: &Range<usize>,
        decoded: &str,
        r: Range<usize>,
    ) -> Range<usize> {
        let raw = self.src.get(span.clone()).unwrap_or("");
        match map_string(raw) {
            Some((text, map)) if text == decoded => {
                let at = |i: usize| map.get(i).map(|o| span.start + o);
                match (at(r.start), at(r.end)) {
                    (Some(s), Some(e)) if s <= e => s..e,
                    _ => span.clone(),
                }
            }
            _ => span.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inner_range_maps_through_escapes_and_falls_back_when_it_cannot() {
        // `"a\tb${x}"`: the decoded `${x}` starts at byte 3, in the file at 9.
        let src = r#"v = "a\tb${x}""#;
        let r = Reader::new("f.toml", src);
        let span = 4..src.len();
        assert_eq!(r.inner(&span, "a\tb${x}", 3..7), 9..13);
        // A decoded text that is not this string's: the whole token.
        assert_eq!(r.inner(&span, "something else", 3..7), span);
        // A range that maps backwards: the whole token, never a reversed one.
        let backwards = Range { start: 7, end: 3 };
        assert_eq!(r.inner(&span, "a\tb${x}", backwards), span);
    }
}

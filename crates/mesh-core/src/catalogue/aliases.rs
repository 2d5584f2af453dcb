//! Seat renames. An aliases file (`aliases.toml` at the root of a catalogue
//! directory) maps old seat names to new ones, and every seat a manifest
//! names is resolved through it before anything is checked:
//!
//! ```toml
//! [seats]
//! artifacts = "artifact-store"   # old name = new name
//! ```

use std::collections::BTreeSet;

use toml::de::{DeTable, DeValue};

use crate::diagnostic::{Diagnostic, Kind, LineIndex, Location, suggest};
use crate::manifest::Located;
use crate::names::Name;

/// One seat rename.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alias {
    pub old: Located<Name>,
    pub new: Located<Name>,
    /// The aliases file it was read from.
    pub file: String,
}

/// Seat renames, old name → new name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Aliases {
    entries: Vec<Alias>,
}

impl Aliases {
    pub fn new() -> Self {
        Aliases::default()
    }

    pub fn entries(&self) -> &[Alias] {
        &self.entries
    }

    /// Adds a rename (for callers building aliases from records).
    pub fn push(&mut self, alias: Alias) {
        self.entries.push(alias);
    }

    /// Adds every alias of `other` (several aliases files).
    pub fn extend(&mut self, other: Aliases) {
        self.entries.extend(other.entries);
    }

    /// Parses an aliases file: one `[seats]` table of `old = "new"`.
    pub fn parse(path: &str, text: &str) -> Result<Aliases, Vec<Diagnostic>> {
        let ix = LineIndex::new(text);
        let at = |span: std::ops::Range<usize>| Location::new(path, ix.pos(span.start, span.end));
        let mut diags = Vec::new();
        let (root, errors) = DeTable::parse_recoverable(text);
        for e in &errors {
            diags.push(Diagnostic::new(
                Kind::TomlSyntax,
                at(e.span().unwrap_or(0..0)),
                e.message().trim().to_string(),
            ));
        }
        if !diags.is_empty() {
            return Err(diags);
        }
        let mut out = Aliases::new();
        for (k, v) in root.get_ref().iter() {
            let key: &str = k.get_ref();
            if key != "seats" {
                let mut d = Diagnostic::new(
                    Kind::UnknownField,
                    at(k.span()),
                    format!("unknown section `{key}` in an aliases file"),
                );
                d.help = Some(match suggest(key, ["seats"]) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => {
                        "an aliases file has one section, `[seats]`, of `old-name = \"new-name\"`"
                            .into()
                    }
                });
                diags.push(d);
                continue;
            }
            let DeValue::Table(t) = v.get_ref() else {
                diags.push(Diagnostic::new(
                    Kind::WrongType,
                    at(v.span()),
                    format!("`seats` must be a table, found {}", v.get_ref().type_str()),
                ));
                continue;
            };
            for (old, new) in t.iter() {
                let old_name = Name::new(old.get_ref().as_ref());
                let new_name = match new.get_ref() {
                    DeValue::String(s) => Name::new(s.as_ref()).map_err(|e| e.to_string()),
                    other => Err(format!("must be a string, found {}", other.type_str())),
                };
                match (old_name, new_name) {
                    (Ok(o), Ok(n)) => out.entries.push(Alias {
                        old: Located::new(o, ix.pos(old.span().start, old.span().end)),
                        new: Located::new(n, ix.pos(new.span().start, new.span().end)),
                        file: path.to_string(),
                    }),
                    (Err(e), _) => diags.push(Diagnostic::new(
                        Kind::BadName,
                        at(old.span()),
                        format!("bad seat name: {e}"),
                    )),
                    (_, Err(e)) => diags.push(Diagnostic::new(
                        if matches!(new.get_ref(), DeValue::String(_)) {
                            Kind::BadName
                        } else {
                            Kind::WrongType
                        },
                        at(new.span()),
                        format!("the new name of `{}` {e}", old.get_ref()),
                    )),
                }
            }
        }
        if diags.is_empty() {
            Ok(out)
        } else {
            Err(diags)
        }
    }

    fn get(&self, old: &Name) -> Option<&Alias> {
        self.entries.iter().find(|a| a.old.value == *old)
    }

    /// Follows renames from `name` to its current name. A cycle stops where
    /// it would repeat (and is reported by [`super::check`]).
    pub fn resolve(&self, name: &Name) -> Name {
        self.follow(name).0
    }

    /// Follows renames from `name` as far as they go: the name reached, and
    /// whether the renames ran into a cycle (stopping where it would repeat).
    pub fn follow(&self, name: &Name) -> (Name, bool) {
        let mut seen = BTreeSet::new();
        let mut cur = name.clone();
        while let Some(a) = self.get(&cur) {
            if !seen.insert(cur.clone()) {
                return (cur, true);
            }
            cur = a.new.value.clone();
        }
        (cur, false)
    }
}

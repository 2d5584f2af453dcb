//! Seat renames. An aliases file (`aliases.toml` at the root of a catalogue
//! directory) maps old seat names to new ones, and every seat a manifest
//! names is resolved through it before anything is checked:
//!
//! ```toml
//! [seats]
//! artifacts = "artifact-store"   # old name = new name
//! ```

use std::collections::BTreeSet;

use crate::diagnostic::{Diagnostic, Kind};
use crate::manifest::Located;
use crate::manifest::toml_access::Reader;
use crate::names::Name;

/// An aliases file has this one section.
const SECTIONS: &[&str] = &["seats"];
const SECTIONS_HELP: &str =
    "an aliases file has one section, `[seats]`, of `old-name = \"new-name\"`";

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
        let mut toml = Reader::new(path, text);
        let Some(root) = toml.root() else {
            return Err(toml.into_diagnostics());
        };
        let mut out = Aliases::new();
        // One pass over the keys, so an unknown section is reported among
        // the problems of `[seats]` in the table's order, not all ahead.
        for (k, v) in root.get_ref().iter() {
            let known = toml.known_key(
                k,
                SECTIONS,
                |key| format!("unknown section `{key}` in an aliases file"),
                |_| Some(SECTIONS_HELP.into()),
            );
            if !known {
                continue;
            }
            let Some(seats) = toml.table(v, "seats", None) else {
                continue;
            };
            for (old, new) in seats.iter() {
                let old_name = match Name::new(old.get_ref().as_ref()) {
                    Ok(n) => n,
                    // An entry with a bad old name is refused for that alone.
                    Err(e) => {
                        let message = format!("bad seat name: {e}");
                        toml.push(Kind::BadName, old.span(), message, None);
                        continue;
                    }
                };
                let subject = format!("the new name of `{}`", old.get_ref());
                let Some(s) = toml.string_for(new, &subject) else {
                    continue;
                };
                match Name::new(s) {
                    Ok(n) => out.entries.push(Alias {
                        old: Located::new(old_name, toml.pos(&old.span())),
                        new: Located::new(n, toml.pos(&new.span())),
                        file: path.to_string(),
                    }),
                    Err(e) => {
                        let message = format!("{subject} {e}");
                        toml.push(Kind::BadName, new.span(), message, None);
                    }
                }
            }
        }
        let diags = toml.into_diagnostics();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostic::Pos;

    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    #[test]
    fn renames_pushed_from_records_resolve_like_parsed_ones() {
        let mut a = Aliases::new();
        for (old, new) in [("artifacts", "store"), ("store", "artifact-store")] {
            a.push(Alias {
                old: Located::new(n(old), Pos::START),
                new: Located::new(n(new), Pos::START),
                file: "records".into(),
            });
        }
        assert_eq!(a.entries().len(), 2);
        assert_eq!(a.resolve(&n("artifacts")), n("artifact-store"));
        assert_eq!(a.follow(&n("git")), (n("git"), false));
    }
}

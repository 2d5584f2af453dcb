//! What a change of the records asks of the controller (DESIGN §6 "Keys
//! announced ahead, compositions live before declarations"): the records
//! carry a revision per kind of input, and each kind that moved asks only
//! for what is derived from it. Recording a module's key recomposes the
//! users file and never declares every node again; an address or a secret
//! declares again and never reloads the broker.

use std::collections::{BTreeMap, BTreeSet};

/// A kind of input, as the store's `records_revisions` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Nodes,
    Tokens,
    Credentials,
    Persons,
    Catalogue,
    Assignments,
    Secrets,
    Bus,
    /// Builds and their artifacts (`mesh artifact put`, a build machine).
    Builds,
}

impl Kind {
    pub fn from_name(name: &str) -> Option<Kind> {
        every().into_iter().find(|k| k.name() == name)
    }

    /// Its name in the store's `records_revisions` (and in logs).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Nodes => "nodes",
            Kind::Tokens => "tokens",
            Kind::Credentials => "credentials",
            Kind::Persons => "persons",
            Kind::Catalogue => "catalogue",
            Kind::Assignments => "assignments",
            Kind::Secrets => "secrets",
            Kind::Bus => "bus",
            Kind::Builds => "builds",
        }
    }
}

/// The kinds' names, comma-separated: what a log line says moved.
pub fn names(kinds: &BTreeSet<Kind>) -> String {
    kinds.iter().map(|k| k.name()).collect::<Vec<_>>().join(",")
}

/// What to do after a change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Work {
    /// Recompose the users file (and make it live).
    pub compose: bool,
    /// Assert the JetStream objects again.
    pub assert_objects: bool,
    /// Compose every node's declaration again.
    pub declare: bool,
}

impl std::fmt::Display for Work {
    /// What the controller does, in words.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let steps: Vec<&str> = [
            (self.compose, "compose the users file"),
            (self.assert_objects, "assert the bus objects"),
            (self.declare, "declare to the nodes"),
        ]
        .into_iter()
        .filter_map(|(due, what)| due.then_some(what))
        .collect();
        match steps.is_empty() {
            true => f.write_str("nothing to do"),
            false => f.write_str(&steps.join(", ")),
        }
    }
}

/// The kinds whose revision moved from `before` to `now`. A kind the
/// controller does not know counts as every kind (a newer schema): doing
/// too much is safe, doing too little is not.
pub fn changed(before: &BTreeMap<String, i64>, now: &BTreeMap<String, i64>) -> BTreeSet<Kind> {
    let mut out = BTreeSet::new();
    for (name, revision) in now {
        if before.get(name) == Some(revision) {
            continue;
        }
        match Kind::from_name(name) {
            Some(k) => {
                out.insert(k);
            }
            None => return every(),
        }
    }
    out
}

/// Every kind: what a pass does when it cannot tell what moved.
pub fn every() -> BTreeSet<Kind> {
    [
        Kind::Nodes,
        Kind::Tokens,
        Kind::Credentials,
        Kind::Persons,
        Kind::Catalogue,
        Kind::Assignments,
        Kind::Secrets,
        Kind::Bus,
        Kind::Builds,
    ]
    .into()
}

/// What `changed` asks for. `broker_held`: a module holding `mesh-broker`
/// is assigned, whose declaration carries the users file (so a credential
/// changes its declaration too).
pub fn work(changed: &BTreeSet<Kind>, broker_held: bool) -> Work {
    use Kind::*;
    let any = |kinds: &[Kind]| kinds.iter().any(|k| changed.contains(k));
    // Builds: a pinned version's artifacts are what its hosts may read.
    let compose = any(&[
        Nodes,
        Tokens,
        Credentials,
        Persons,
        Catalogue,
        Assignments,
        Builds,
    ]);
    Work {
        compose,
        assert_objects: any(&[Nodes, Catalogue, Assignments]),
        declare: any(&[Nodes, Catalogue, Assignments, Secrets, Bus, Builds])
            || (broker_held && compose),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(kinds: &[Kind]) -> BTreeSet<Kind> {
        kinds.iter().copied().collect()
    }

    #[test]
    fn each_kind_asks_only_for_what_is_derived_from_it() {
        use Kind::*;
        let w = |k: &[Kind]| work(&set(k), false);
        // Keys recorded: the users file, never every declaration.
        assert_eq!(
            w(&[Credentials]),
            Work {
                compose: true,
                assert_objects: false,
                declare: false
            }
        );
        // ...unless a broker holder's declaration carries the users file.
        assert!(work(&set(&[Credentials]), true).declare);
        assert!(work(&set(&[Persons]), true).declare);
        // An assignment: all three.
        assert_eq!(
            w(&[Assignments]),
            Work {
                compose: true,
                assert_objects: true,
                declare: true
            }
        );
        // A secret or the broker's address: declarations alone.
        for k in [Secrets, Bus] {
            assert_eq!(
                w(&[k]),
                Work {
                    compose: false,
                    assert_objects: false,
                    declare: true
                }
            );
            assert_eq!(work(&set(&[k]), true), w(&[k]));
        }
        assert_eq!(
            w(&[Tokens]),
            Work {
                compose: true,
                ..Work::default()
            }
        );
        // An artifact put: what a pinned module's declaration names and
        // what its host may read, never the bus objects.
        assert_eq!(
            w(&[Builds]),
            Work {
                compose: true,
                assert_objects: false,
                declare: true
            }
        );
        assert_eq!(w(&[]), Work::default());
        assert!(w(&[Nodes]).assert_objects && w(&[Catalogue]).declare);
    }

    #[test]
    fn a_kind_moved_is_changed_and_an_unknown_one_is_every_kind() {
        let r = |pairs: &[(&str, i64)]| -> BTreeMap<String, i64> {
            pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
        };
        let before = r(&[("nodes", 1), ("credentials", 4)]);
        assert!(changed(&before, &before).is_empty());
        assert_eq!(
            changed(&before, &r(&[("nodes", 1), ("credentials", 5)])),
            set(&[Kind::Credentials])
        );
        assert_eq!(
            changed(&before, &r(&[("nodes", 1), ("credentials", 4), ("bus", 0)])),
            set(&[Kind::Bus]),
            "a kind first seen"
        );
        assert_eq!(changed(&before, &r(&[("future", 1)])).len(), 9);
    }

    /// The names are the store's (`records_revisions.kind`): one misread
    /// would leave a kind of change doing the work of every kind.
    #[test]
    fn each_kind_is_read_from_the_stores_name_for_it() {
        use Kind::*;
        let names = [
            ("nodes", Nodes),
            ("tokens", Tokens),
            ("credentials", Credentials),
            ("persons", Persons),
            ("catalogue", Catalogue),
            ("assignments", Assignments),
            ("secrets", Secrets),
            ("bus", Bus),
            ("builds", Builds),
        ];
        for (name, kind) in names {
            assert_eq!(Kind::from_name(name), Some(kind), "{name}");
        }
        let read: BTreeSet<Kind> = names.iter().map(|(_, k)| *k).collect();
        assert_eq!(read, every(), "every kind has its name");
        assert_eq!(Kind::from_name("Nodes"), None);
    }

    #[test]
    fn what_moved_and_what_is_done_are_said_in_words() {
        use Kind::*;
        assert_eq!(names(&set(&[Secrets, Nodes])), "nodes,secrets");
        assert_eq!(
            work(&set(&[Nodes]), false).to_string(),
            "compose the users file, assert the bus objects, declare to the nodes"
        );
        assert_eq!(
            work(&set(&[Credentials]), false).to_string(),
            "compose the users file"
        );
        assert_eq!(
            work(&set(&[Secrets]), false).to_string(),
            "declare to the nodes"
        );
        assert_eq!(Work::default().to_string(), "nothing to do");
    }
}

//! Registration sees the whole catalogue: a manifest registered on its own
//! can still break what is registered already — an emitter that drops an
//! event a registered module consumes (a subscription matching nothing), a
//! module that stops declaring a seat a registered one holds. The check
//! runs on the catalogue as it would be after the registration, and what
//! the registration breaks is refused, where every declaration is in view.

use std::collections::BTreeSet;

use super::{Aliases, Catalogue, check};
use crate::diagnostic::{Diagnostic, Severity};
use crate::manifest::Manifest;
use crate::names::Name;

impl Catalogue {
    /// This catalogue once `incoming` is registered into it: an incoming
    /// manifest replaces the registered one of its name, an incoming rename
    /// the registered one of its old name.
    pub fn registering(&self, incoming: &Catalogue) -> Catalogue {
        let names: BTreeSet<&Name> = incoming.manifests().iter().map(|m| &m.name.value).collect();
        let mut manifests: Vec<Manifest> = self
            .manifests()
            .iter()
            .filter(|m| !names.contains(&m.name.value))
            .cloned()
            .collect();
        manifests.extend(incoming.manifests().iter().cloned());
        let olds: BTreeSet<&Name> = incoming
            .aliases()
            .entries()
            .iter()
            .map(|a| &a.old.value)
            .collect();
        let mut aliases = Aliases::new();
        for a in self.aliases().entries() {
            if !olds.contains(&a.old.value) {
                aliases.push(a.clone());
            }
        }
        aliases.extend(incoming.aliases().clone());
        Catalogue::build(manifests, aliases)
    }
}

/// The errors `after` has that `before` had not: what a registration would
/// break. An error the registered catalogue had already is not the
/// registration's doing (and the controller leaves its module out).
pub fn broken_by(before: &Catalogue, after: &Catalogue) -> Vec<Diagnostic> {
    let key = |d: &Diagnostic| {
        (
            d.kind,
            d.location.file.clone(),
            d.location.line,
            d.location.col,
            d.message.clone(),
        )
    };
    let had: BTreeSet<_> = check(before)
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(key)
        .collect();
    check(after)
        .into_iter()
        .filter(|d| d.severity == Severity::Error && !had.contains(&key(d)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostic::Kind;
    use crate::manifest;

    fn catalogue(manifests: &[(&str, &str)]) -> Catalogue {
        let parsed = manifests
            .iter()
            .map(|(path, t)| manifest::parse(path, t).unwrap())
            .collect();
        Catalogue::build(parsed, Aliases::new())
    }

    const PRODUCER: &str = r#"
[module]
name = "producer"
description = "makes things"
[run]
command = ["producer"]
[events]
emits = ["made"]
"#;

    const WATCHER: &str = r#"
[module]
name = "watcher"
description = "watches"
[run]
command = ["watcher"]
[events]
consumes = ["producer.made"]
"#;

    const SEAT_OWNER: &str = r#"
[module]
name = "owner"
description = "declares the jobs seat"
[run]
command = ["owner"]
[[seat]]
name = "jobs"
scope = "mesh"
protocol = ""
"#;

    const HOLDER: &str = r#"
[module]
name = "holder"
description = "holds the jobs seat"
[run]
command = ["holder"]
[holds]
seats = ["jobs"]
"#;

    #[test]
    fn an_emitter_that_drops_a_consumed_event_breaks_the_consumer() {
        let registered = catalogue(&[
            ("registered:producer", PRODUCER),
            ("registered:watcher", WATCHER),
        ]);
        let incoming = catalogue(&[(
            "new/producer/mesh.toml",
            &PRODUCER.replace("emits = [\"made\"]", "emits = [\"built\"]"),
        )]);
        assert!(
            check(&incoming)
                .iter()
                .all(|d| d.severity != Severity::Error)
        );
        let after = registered.registering(&incoming);
        assert_eq!(after.manifests().len(), 2, "replaced, not added");
        let broken = broken_by(&registered, &after);
        assert_eq!(broken.len(), 1, "{broken:?}");
        assert_eq!(broken[0].kind, Kind::UnmatchedConsume);
        assert_eq!(broken[0].location.file, "registered:watcher");
        // Registering the same producer again breaks nothing.
        let same = catalogue(&[("new/producer/mesh.toml", PRODUCER)]);
        assert!(broken_by(&registered, &registered.registering(&same)).is_empty());
    }

    #[test]
    fn a_module_that_stops_declaring_a_held_seat_orphans_the_holder() {
        let registered = catalogue(&[
            ("registered:owner", SEAT_OWNER),
            ("registered:holder", HOLDER),
        ]);
        let incoming = catalogue(&[(
            "new/owner/mesh.toml",
            &SEAT_OWNER.replace("name = \"jobs\"", "name = \"tasks\""),
        )]);
        let broken = broken_by(&registered, &registered.registering(&incoming));
        assert_eq!(broken.len(), 1, "{broken:?}");
        assert_eq!(broken[0].kind, Kind::UnknownSeat);
        assert_eq!(broken[0].location.file, "registered:holder");
        assert!(broken[0].message.contains("jobs"), "{}", broken[0].message);
    }

    #[test]
    fn an_error_registered_already_is_not_the_registrations_doing() {
        // The holder was registered without its seat's owner.
        let registered = catalogue(&[("registered:holder", HOLDER)]);
        assert!(!check(&registered).is_empty());
        let incoming = catalogue(&[("new/producer/mesh.toml", PRODUCER)]);
        assert!(broken_by(&registered, &registered.registering(&incoming)).is_empty());
        // And registering the owner mends it.
        let owner = catalogue(&[("new/owner/mesh.toml", SEAT_OWNER)]);
        let after = registered.registering(&owner);
        assert!(check(&after).iter().all(|d| d.severity != Severity::Error));
    }

    fn renames(pairs: &[(&str, &str, &str)]) -> Aliases {
        let mut a = Aliases::new();
        for (file, old, new) in pairs {
            a.push(crate::catalogue::Alias {
                old: crate::manifest::Located::new(
                    Name::new(*old).unwrap(),
                    crate::diagnostic::Pos::START,
                ),
                new: crate::manifest::Located::new(
                    Name::new(*new).unwrap(),
                    crate::diagnostic::Pos::START,
                ),
                file: (*file).into(),
            });
        }
        a
    }

    #[test]
    fn an_incoming_rename_replaces_the_registered_one_of_its_old_name_and_keeps_the_rest() {
        let owner = manifest::parse("registered:owner", SEAT_OWNER).unwrap();
        let registered = Catalogue::build(
            vec![owner],
            renames(&[
                ("registered:aliases", "work", "jobs"),
                ("registered:aliases", "chores", "jobs"),
            ]),
        );
        let incoming = Catalogue::build(vec![], renames(&[("new/aliases.toml", "work", "jobs")]));
        let after = registered.registering(&incoming);
        let mut got: Vec<(&str, &str)> = after
            .aliases()
            .entries()
            .iter()
            .map(|a| (a.old.value.as_str(), a.file.as_str()))
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                ("chores", "registered:aliases"),
                ("work", "new/aliases.toml")
            ]
        );
        // Registering the same rename again is no error of its own.
        assert!(broken_by(&registered, &after).is_empty());
    }
}

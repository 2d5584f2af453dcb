//! Which registered modules the mesh leaves out. A registered catalogue is
//! checked at registration, but a store can hold what no registration would
//! pass (edited behind the CLI's back, registered by an older mesh): one
//! module naming a seat nobody declares must not stop every composition and
//! declaration in the mesh. Such a module is left out — given no principal,
//! no consumer, no place in any declaration — and named with the reason.

use std::collections::BTreeMap;

use super::{Catalogue, check};
use crate::diagnostic::Severity;
use crate::names::Name;

/// Module → why it is left out: the first error the catalogue check finds
/// in its manifest, located.
pub fn left_out(catalogue: &Catalogue) -> BTreeMap<Name, String> {
    let by_file: BTreeMap<&str, &Name> = catalogue
        .manifests()
        .iter()
        .map(|m| (m.path.as_str(), &m.name.value))
        .collect();
    let mut out = BTreeMap::new();
    for d in check(catalogue) {
        if d.severity != Severity::Error {
            continue;
        }
        if let Some(module) = by_file.get(d.location.file.as_str()) {
            out.entry((*module).clone())
                .or_insert_with(|| format!("line {}: {}", d.location.line, d.message));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::Aliases;
    use crate::manifest;

    fn catalogue(manifests: &[(&str, &str)]) -> Catalogue {
        let parsed = manifests
            .iter()
            .map(|(path, t)| manifest::parse(path, t).unwrap())
            .collect();
        Catalogue::build(parsed, Aliases::new())
    }

    const HOLDS_GHOST: &str = r#"
[module]
name = "orphan"
description = "holds a seat nobody declares"
[run]
command = ["orphan"]
[holds]
seats = ["ghost"]
"#;

    const FINE: &str = r#"
[module]
name = "fine"
description = "checks clean"
[run]
command = ["fine"]
[events]
emits = ["done"]
"#;

    const WARNS: &str = r#"
[module]
name = "warns"
description = "consumes a module nobody registered"
[run]
command = ["warns"]
[events]
consumes = ["elsewhere.thing"]
"#;

    #[test]
    fn a_module_with_an_error_is_left_out_naming_it_and_nothing_else_is() {
        let c = catalogue(&[
            ("registered:orphan", HOLDS_GHOST),
            ("registered:fine", FINE),
            ("registered:warns", WARNS),
        ]);
        let out = left_out(&c);
        assert_eq!(out.keys().map(Name::as_str).collect::<Vec<_>>(), ["orphan"]);
        let why = &out[&Name::new("orphan").unwrap()];
        assert!(why.starts_with("line 8: "), "{why}");
        assert!(why.contains("ghost"), "{why}");
    }

    #[test]
    fn a_clean_catalogue_leaves_nothing_out() {
        let c = catalogue(&[("registered:fine", FINE)]);
        assert!(left_out(&c).is_empty());
    }
}

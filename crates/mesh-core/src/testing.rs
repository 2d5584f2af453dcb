//! What unit tests share: a catalogue built from manifest texts, a name.

use crate::catalogue::{Aliases, Catalogue};
use crate::manifest;
use crate::names::Name;

/// A valid name (panics on a typo in a test).
pub(crate) fn n(s: &str) -> Name {
    Name::new(s).unwrap()
}

/// The catalogue of `texts`, read as `m0.toml`, `m1.toml`, ...
pub(crate) fn catalogue(texts: &[&str]) -> Catalogue {
    let parsed = texts
        .iter()
        .enumerate()
        .map(|(i, t)| manifest::parse(&format!("m{i}.toml"), t).unwrap())
        .collect();
    Catalogue::build(parsed, Aliases::new())
}

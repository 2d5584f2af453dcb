//! Artifacts (DESIGN §6 "Artifacts", "Run from an artifact"): build outputs
//! kept in the bus's object store `ARTIFACTS` under a content-addressed
//! name, referred to as `artifact-store://<module>/<artifact>@sha256:<hex>`.
//! Here: the reference's form, the object's name, and which artifacts an
//! assignment's declaration names — one function, used by composing (what
//! the host fetches) and by authority (what the host may read), so the two
//! cannot disagree.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::digest::is_sha256_hex;
use crate::manifest::Manifest;
use crate::names::Name;
use crate::placeholders::Placeholder;

const SCHEME: &str = "artifact-store://";

/// `artifact-store://<module>/<artifact>@sha256:<hex>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Reference {
    pub module: Name,
    pub artifact: Name,
    /// 64 lowercase hex digits.
    pub sha256: String,
}

impl Reference {
    /// The object's name in `ARTIFACTS`: `<module>/<artifact>/sha256-<hex>`.
    /// Content-addressed, so a name is written once and never means other
    /// bytes.
    pub fn object_name(&self) -> String {
        crate::subjects::artifact::object_name(&self.module, &self.artifact, &self.sha256)
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{SCHEME}{}/{}@sha256:{}",
            self.module, self.artifact, self.sha256
        )
    }
}

/// A reference that does not read as one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{written:?} is not an artifact reference ({why}); write artifact-store://MODULE/ARTIFACT@sha256:HEX"
)]
pub struct ReferenceError {
    pub written: String,
    pub why: String,
}

impl FromStr for Reference {
    type Err = ReferenceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why: &str| ReferenceError {
            written: s.to_string(),
            why: why.to_string(),
        };
        let rest = s
            .strip_prefix(SCHEME)
            .ok_or_else(|| err("it does not start with artifact-store://"))?;
        let (path, digest) = rest
            .split_once("@sha256:")
            .ok_or_else(|| err("no @sha256: digest"))?;
        let (module, artifact) = path
            .split_once('/')
            .ok_or_else(|| err("no /ARTIFACT after the module"))?;
        let module = Name::new(module).map_err(|e| err(&format!("module: {e}")))?;
        let artifact = Name::new(artifact).map_err(|e| err(&format!("artifact: {e}")))?;
        if !is_sha256_hex(digest) {
            return Err(err("the digest is not 64 lowercase hex digits"));
        }
        Ok(Reference {
            module,
            artifact,
            sha256: digest.to_string(),
        })
    }
}

/// An artifact a declaration names: what the host fetches, checks and runs.
/// `nuid` is the object's chunk token in the store: the host's grant to
/// read the chunks is for that token alone.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactDecl {
    pub name: Name,
    pub reference: String,
    pub size: u64,
    pub sha256: String,
    pub nuid: String,
}

impl ArtifactDecl {
    /// The object's name in `ARTIFACTS`, or why the reference is not one.
    pub fn object_name(&self) -> Result<String, ReferenceError> {
        Ok(self.reference.parse::<Reference>()?.object_name())
    }
}

/// A recorded artifact of a version of a module.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Recorded {
    pub reference: Reference,
    pub size: u64,
    pub nuid: String,
}

/// (module, version) → artifact name → the artifact recorded under it.
pub type Versions = BTreeMap<(Name, String), BTreeMap<Name, Recorded>>;

/// The artifacts an assignment uses: what the module's run names with
/// `${artifact:..}`, each taken from the version the assignment pinned.
/// Sorted by name. `Err` says why the module cannot run (and how to mend it).
pub fn used(
    manifest: &Manifest,
    pinned: Option<&str>,
    versions: &Versions,
) -> Result<Vec<ArtifactDecl>, String> {
    let names = names_used(manifest);
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let module = &manifest.name.value;
    let first = names.first().map(Name::as_str).unwrap_or("NAME");
    let Some(version) = pinned else {
        return Err(format!(
            "it runs ${{artifact:{first}}} but no version of {module} was recorded when it was assigned; put one with `mesh artifact put FILE --module {module} --name {first}`, then assign it again"
        ));
    };
    let recorded = versions.get(&(module.clone(), version.to_string()));
    names
        .iter()
        .map(|name| {
            let r = recorded.and_then(|r| r.get(name)).ok_or_else(|| {
                format!(
                    "version {version} of {module} has no artifact {name}; put one with `mesh artifact put FILE --module {module} --name {name} --version {version}`"
                )
            })?;
            // A host is granted the chunks by this token alone: one that
            // is no token would be a declaration it cannot read.
            crate::subjects::artifact::Nuid::new(&r.nuid).map_err(|e| {
                format!("artifact {name} of version {version} of {module} is recorded with {e}; put it again")
            })?;
            Ok(ArtifactDecl {
                name: name.clone(),
                reference: r.reference.to_string(),
                size: r.size,
                sha256: r.reference.sha256.clone(),
                nuid: r.nuid.clone(),
            })
        })
        .collect()
}

/// The artifact names a module's `[run]` uses, sorted, each once.
pub fn names_used(manifest: &Manifest) -> Vec<Name> {
    let mut names: Vec<Name> = manifest
        .run
        .iter()
        .flat_map(|r| r.command.iter().chain(r.image.iter()))
        .flat_map(|v| v.placeholders.iter())
        .filter_map(|p| match &p.value {
            Placeholder::Artifact { name } => Some(name.clone()),
            _ => None,
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod reference_tests {
    use super::*;

    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_reference_reads_back_and_names_its_object() {
        let written = format!("artifact-store://audit/audit-log@sha256:{HEX}");
        let r: Reference = written.parse().unwrap();
        assert_eq!(r.module, n("audit"));
        assert_eq!(r.artifact, n("audit-log"));
        assert_eq!(r.to_string(), written);
        assert_eq!(r.object_name(), format!("audit/audit-log/sha256-{HEX}"));
    }

    #[test]
    fn a_malformed_reference_says_what_is_wrong() {
        for (bad, why) in [
            (format!("http://audit/a@sha256:{HEX}"), "artifact-store://"),
            ("artifact-store://audit/a".to_string(), "no @sha256:"),
            (format!("artifact-store://audit@sha256:{HEX}"), "/ARTIFACT"),
            (format!("artifact-store://Audit/a@sha256:{HEX}"), "module"),
            (
                format!("artifact-store://audit/a b@sha256:{HEX}"),
                "artifact",
            ),
            (
                format!("artifact-store://audit/a@sha256:{}", &HEX[1..]),
                "64 lowercase hex",
            ),
            (
                format!("artifact-store://audit/a@sha256:{}", HEX.to_uppercase()),
                "64 lowercase hex",
            ),
        ] {
            let e = bad.parse::<Reference>().unwrap_err();
            assert!(e.why.contains(why), "{bad}: {e}");
            assert!(e.to_string().contains("write artifact-store://"), "{e}");
        }
    }
}

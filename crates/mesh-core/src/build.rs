//! Builds (DESIGN §6 "Builds"): the `build` work a build machine takes from
//! the `mesh-build-machine` role's queue, the one `built` event it announces,
//! and what is read out of a build rather than declared beside it — its
//! inputs, every `artifact-store://…@sha256:…` reference in the checked-out
//! files. Public interface: a build machine written in another language
//! reads and writes exactly these fields.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::artifact::Reference;
use crate::catalogue::{BUILD_MACHINE_ROLE, Catalogue};
use crate::digest::is_sha256_hex;
use crate::names::Name;

#[cfg(test)]
#[path = "build/tests.rs"]
mod tests;

/// The work kind builds are submitted as.
pub const WORK_KIND: &str = "build";
/// The event a build machine announces once per build.
pub const BUILT_EVENT: &str = "built";
/// Longest log tail a `built` event carries: enough lines to read a
/// compiler's error, small beside the envelope bound.
pub const LOG_TAIL_BYTES: usize = 8 * 1024;
/// Lines of log a `built` event carries at most.
pub const LOG_TAIL_LINES: usize = 40;

/// `build` work: build `rev` of `module` from `repository`. `id` is the
/// asker's, and the `built` event answers with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildRequest {
    pub id: String,
    pub module: Name,
    pub repository: String,
    pub rev: String,
}

/// One artifact a build put into `ARTIFACTS`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuiltArtifact {
    pub name: Name,
    /// `artifact-store://<module>/<name>@sha256:<sha256>`.
    pub reference: String,
    pub size: u64,
    /// 64 lowercase hex digits.
    pub sha256: String,
}

/// The outcome of one build, announced once. A success names its module
/// and version; a failure names no module (nothing was made) and says why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Built {
    pub id: String,
    pub module: Option<Name>,
    /// The commit the rev resolved to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default)]
    pub artifacts: Vec<BuiltArtifact>,
    /// References read out of the build's files, each confirmed present.
    #[serde(default)]
    pub inputs: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    #[serde(default)]
    pub log_tail: String,
}

/// A `built` event read and checked: what the controller records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Succeeded {
        id: String,
        module: Name,
        version: String,
        artifacts: Vec<(BuiltArtifact, Reference)>,
        inputs: Vec<Reference>,
    },
    Failed {
        id: String,
        reason: String,
    },
}

/// Why a `built` event cannot be recorded as it is: it is terminated and
/// logged, never redelivered forever.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuiltError {
    #[error("a build id must be 1 to 128 printable characters without spaces")]
    BadId,
    #[error("build {id} names module {module} and a failure: a failed build names no module")]
    FailureWithModule { id: String, module: Name },
    #[error("build {id} names neither a module nor a failure")]
    Neither { id: String },
    #[error("build {id} of {module} has no version: {detail}")]
    BadVersion {
        id: String,
        module: Name,
        detail: String,
    },
    #[error("build {id} made no artifact")]
    NoArtifacts { id: String },
    #[error("build {id}: artifact {name} {detail}")]
    BadArtifact {
        id: String,
        name: Name,
        detail: String,
    },
    #[error("build {id}: input {input:?} is not an artifact reference")]
    BadInput { id: String, input: String },
}

/// Whether `id` may be a build id: what an event id may be.
pub fn id_ok(id: &str) -> bool {
    !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_graphic())
}

/// Whether `v` may be a version: letters, digits, `.`, `-`, `_`, at most 64
/// (a commit id is; so is what `mesh artifact put --version` takes).
pub fn version_ok(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 64
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// Whether `rev` may be handed to git as the revision to build: printable,
/// no spaces, and never starting with `-` (git would read it as an option).
pub fn rev_ok(rev: &str) -> bool {
    !rev.is_empty()
        && rev.len() <= 200
        && !rev.starts_with('-')
        && rev.bytes().all(|b| b.is_ascii_graphic())
}

impl Built {
    /// Checks the event as a whole: a success names module, version and
    /// artifacts whose references say their own module, name and digest;
    /// a failure names no module; every input reads as a reference.
    pub fn check(&self) -> Result<Outcome, BuiltError> {
        let id = self.id.clone();
        if !id_ok(&id) {
            return Err(BuiltError::BadId);
        }
        let module = match (&self.module, &self.failure) {
            (Some(module), Some(_)) => {
                return Err(BuiltError::FailureWithModule {
                    id,
                    module: module.clone(),
                });
            }
            (None, Some(reason)) => {
                return Ok(Outcome::Failed {
                    id,
                    reason: reason.clone(),
                });
            }
            (None, None) => return Err(BuiltError::Neither { id }),
            (Some(module), None) => module.clone(),
        };
        let version = match self.version.as_deref() {
            Some(v) if version_ok(v) => v.to_string(),
            other => {
                return Err(BuiltError::BadVersion {
                    id,
                    module,
                    detail: match other {
                        None => "none given".into(),
                        Some(v) => format!("{v:?} is not letters, digits, `.`, `-` and `_`"),
                    },
                });
            }
        };
        if self.artifacts.is_empty() {
            return Err(BuiltError::NoArtifacts { id });
        }
        let mut names = BTreeSet::new();
        let mut artifacts = Vec::with_capacity(self.artifacts.len());
        for a in &self.artifacts {
            let bad = |detail: String| BuiltError::BadArtifact {
                id: id.clone(),
                name: a.name.clone(),
                detail,
            };
            if !names.insert(&a.name) {
                return Err(bad("is named twice".into()));
            }
            if !is_sha256_hex(&a.sha256) {
                return Err(bad("has no sha256 of 64 lowercase hex digits".into()));
            }
            let reference: Reference = a.reference.parse().map_err(|e| bad(format!("{e}")))?;
            let expected = Reference {
                module: module.clone(),
                artifact: a.name.clone(),
                sha256: a.sha256.clone(),
            };
            if reference != expected {
                return Err(bad(format!(
                    "is referred to as {reference}, not as its module, name and digest say ({expected})"
                )));
            }
            artifacts.push((a.clone(), reference));
        }
        let inputs = self
            .inputs
            .iter()
            .map(|i| {
                i.parse::<Reference>().map_err(|_| BuiltError::BadInput {
                    id: id.clone(),
                    input: i.clone(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Outcome::Succeeded {
            id,
            module,
            version,
            artifacts,
            inputs,
        })
    }
}

/// Every artifact reference in `text`, in the order first seen, each once.
/// A reference is read as far as the characters a reference can hold; what
/// starts like one and does not read as one is not an input.
pub fn references_in(text: &str) -> Vec<Reference> {
    const SCHEME: &str = "artifact-store://";
    let mut out: Vec<Reference> = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(SCHEME) {
        let tail = &rest[at..];
        let end = SCHEME.len()
            + tail[SCHEME.len()..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '/' | '@' | ':')))
                .unwrap_or(tail.len() - SCHEME.len());
        if let Ok(r) = tail[..end].parse::<Reference>()
            && !out.contains(&r)
        {
            out.push(r);
        }
        rest = &tail[end.max(1)..];
    }
    out
}

/// The end of a build's log, as a `built` event carries it: at most
/// [`LOG_TAIL_LINES`] lines and [`LOG_TAIL_BYTES`] bytes, cut on a
/// character boundary.
pub fn log_tail(log: &str) -> String {
    let trimmed = log.trim_end_matches('\n');
    let mut start = trimmed.len();
    let mut lines = 0;
    for (i, c) in trimmed.char_indices().rev() {
        if c == '\n' {
            lines += 1;
            if lines == LOG_TAIL_LINES {
                break;
            }
        }
        if trimmed.len() - i > LOG_TAIL_BYTES {
            break;
        }
        start = i;
    }
    trimmed[start..].trim_start_matches('\n').to_string()
}

/// The assignments, as `(node, module)`, whose module holds the
/// `mesh-build-machine` role: who would take build work now. Empty means
/// submitted work waits.
pub fn build_machines<'a>(
    catalogue: &Catalogue,
    assignments: impl IntoIterator<Item = (&'a Name, &'a Name)>,
) -> Vec<(Name, Name)> {
    let mut out: Vec<(Name, Name)> = assignments
        .into_iter()
        .filter(|(_, module)| {
            catalogue.module(module).is_some_and(|m| {
                catalogue
                    .held_seats(m)
                    .iter()
                    .any(|h| h.seat.as_str() == BUILD_MACHINE_ROLE)
            })
        })
        .map(|(n, m)| (n.clone(), m.clone()))
        .collect();
    out.sort();
    out.dedup();
    out
}

//! Artifacts handed over the bus, where the bus keeps none (a mesh on
//! RabbitMQ, DESIGN "the bus seam"): node N's host asks the controller on
//! `mesh.controller.artifact.N` for a piece of an artifact by its SHA-256,
//! and the controller answers only for an artifact N's newest declaration
//! names — the same rule that grants a host on NATS exactly its
//! declaration's objects. The host checks size and digest as it does an
//! object's.

use serde::{Deserialize, Serialize};

use crate::declaration::Declaration;

/// The most one answer carries: well inside a message, a few per MiB.
pub const PIECE_BYTES: u64 = 256 * 1024;

/// A host's request: the artifact's SHA-256, and where the piece starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FetchRequest {
    pub sha256: String,
    pub offset: u64,
}

/// The controller's answer (inside a tool reply's `ok`): the piece's
/// bytes, base64, and the artifact's whole size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Piece {
    pub data: String,
    pub size: u64,
}

/// What the controller does with a request of node N's host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Read `len` bytes from `offset` of the artifact stored under `sha256`.
    Read {
        sha256: String,
        offset: u64,
        len: u64,
        size: u64,
    },
    /// Refused, with the reason the host logs.
    Refused(String),
}

/// Decides a request against N's newest declaration (`None`: none yet).
pub fn decide(newest: Option<&Declaration>, req: &FetchRequest) -> Decision {
    if !crate::digest::is_sha256_hex(&req.sha256) {
        return Decision::Refused("the SHA-256 is not 64 lowercase hex digits".into());
    }
    let declared = newest.and_then(|d| {
        d.modules
            .iter()
            .flat_map(|m| &m.artifacts)
            .find(|a| a.sha256 == req.sha256)
    });
    let Some(a) = declared else {
        return Decision::Refused(format!(
            "no artifact sha256:{} in this node's newest declaration",
            req.sha256
        ));
    };
    if req.offset > a.size {
        return Decision::Refused(format!(
            "offset {} is past the artifact's {} bytes",
            req.offset, a.size
        ));
    }
    Decision::Read {
        sha256: a.sha256.clone(),
        offset: req.offset,
        len: (a.size - req.offset).min(PIECE_BYTES),
        size: a.size,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact::ArtifactDecl;
    use crate::declaration::ModuleDecl;
    use crate::names::Name;

    fn declared(size: u64) -> Declaration {
        let sha = "ab".repeat(32);
        let module: ModuleDecl = serde_json::from_value(serde_json::json!({
            "name": "echo",
            "version": "v1",
            "run": { "command": ["x"], "env": {}, "stop_grace_s": 10 },
            "files": [],
        }))
        .unwrap();
        let module = ModuleDecl {
            artifacts: vec![ArtifactDecl {
                name: Name::new("bin").unwrap(),
                reference: format!("artifact-store://echo/bin@sha256:{sha}"),
                size,
                sha256: sha,
                nuid: "n".into(),
            }],
            ..module
        };
        Declaration {
            node: Name::new("n1").unwrap(),
            sequence: 1,
            composed_at: 0,
            modules: vec![module],
            bus: None,
            sealed_by: None,
        }
    }

    fn req(sha: &str, offset: u64) -> FetchRequest {
        FetchRequest {
            sha256: sha.into(),
            offset,
        }
    }

    #[test]
    fn a_declared_artifact_is_read_piece_by_piece_to_its_end() {
        let d = declared(PIECE_BYTES + 10);
        let sha = "ab".repeat(32);
        assert_eq!(
            decide(Some(&d), &req(&sha, 0)),
            Decision::Read {
                sha256: sha.clone(),
                offset: 0,
                len: PIECE_BYTES,
                size: PIECE_BYTES + 10
            }
        );
        assert_eq!(
            decide(Some(&d), &req(&sha, PIECE_BYTES)),
            Decision::Read {
                sha256: sha.clone(),
                offset: PIECE_BYTES,
                len: 10,
                size: PIECE_BYTES + 10
            }
        );
        // At its end: an empty piece says so.
        assert!(matches!(
            decide(Some(&d), &req(&sha, PIECE_BYTES + 10)),
            Decision::Read { len: 0, .. }
        ));
        assert!(matches!(
            decide(Some(&d), &req(&sha, PIECE_BYTES + 11)),
            Decision::Refused(why) if why.contains("past")
        ));
    }

    #[test]
    fn only_what_the_nodes_newest_declaration_names_is_handed_over() {
        let d = declared(5);
        let other = "cd".repeat(32);
        assert!(matches!(
            decide(Some(&d), &req(&other, 0)),
            Decision::Refused(why) if why.contains("newest declaration")
        ));
        assert!(matches!(
            decide(None, &req(&"ab".repeat(32), 0)),
            Decision::Refused(_)
        ));
        assert!(matches!(
            decide(Some(&d), &req("../../etc/passwd", 0)),
            Decision::Refused(why) if why.contains("64 lowercase hex")
        ));
    }
}

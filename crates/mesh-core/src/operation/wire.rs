//! What travels on an operation subject: the request (an id and the
//! operation's arguments) and the controller's one answer.

use serde::{Deserialize, Serialize};

use crate::names::Name;

/// A person's request. The operation and the person are the subject's
/// (`mesh.controller.op.<person>.<operation>`), never the payload's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// Unique per request, the same on a retry: a request retried after
    /// its answer was lost is recognised, not carried out twice.
    pub id: String,
    /// The operation's arguments (an object; none for most reads).
    #[serde(default)]
    pub args: serde_json::Value,
}

/// The controller's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "lowercase")]
pub enum Reply {
    /// Done (or read): what to print, the records revision a change made,
    /// and the data a read returns.
    Done {
        said: String,
        #[serde(default)]
        revision: Option<i64>,
        #[serde(default)]
        data: serde_json::Value,
    },
    /// Not done: the request does not read, a precondition failed, or the
    /// person's role (in the records) does not allow it. Nothing changed.
    Refused { reason: String },
}

/// `assign` and `unassign`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssignArgs {
    pub module: Name,
    pub node: Name,
    /// `assign` only: the recorded version to pin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// Reads `args` as an operation's arguments, or the refusal saying what
/// does not read.
pub fn args<T: serde::de::DeserializeOwned>(
    op: super::Operation,
    args: &serde_json::Value,
) -> Result<T, Reply> {
    serde_json::from_value(args.clone()).map_err(|e| Reply::Refused {
        reason: format!("the arguments of `{op}` do not read: {e}"),
    })
}

/// Reads a request's payload, or the refusal saying what does not read.
pub fn request(payload: &[u8]) -> Result<Request, Reply> {
    serde_json::from_slice(payload).map_err(|e| Reply::Refused {
        reason: format!("the request does not read: {e} (expected {{\"id\": …, \"args\": {{…}}}})"),
    })
}

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

/// An operation on one named thing: `node-forget`, `person-remove`,
/// `secret-remove`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NameArgs {
    pub name: Name,
}

/// `secret-set` and `secret-rotate`: the value sealed on the asker's
/// machine to the controller's XKey by a key made for it alone; the value
/// itself never travels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretArgs {
    pub name: Name,
    /// [`crate::sealed::seal`]'s output.
    pub sealed: String,
    /// The sealing key's public half (`X…`).
    pub sender: String,
}

/// `node-add`: the node recorded (if new) and a one-time token issued.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeAddArgs {
    pub node: Name,
    /// The token's life in seconds.
    pub ttl_secs: u64,
    #[serde(default)]
    pub reissue: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// `node-set`: where other nodes reach a node, the ports it gives seats.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSetArgs {
    pub node: Name,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<(Name, u16)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub no_ports: Vec<Name>,
}

/// `person-add`: a person with a role, the tools they may call, and the
/// public key they connect with (none: recorded without one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PersonAddArgs {
    pub person: Name,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<super::Role>,
    /// As `--tools` is written (`module.tool`, `module.*`).
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nkey: Option<String>,
}

/// How long a person's one-time login lives: a role given without a key
/// issues one (`mesh login` on their machine spends it).
pub const LOGIN_LIFE: std::time::Duration = std::time::Duration::from_secs(3600);

/// `broker-set-address`: the broker's new client port, and the addresses
/// nodes reach it at (none: kept).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrokerArgs {
    pub port: u16,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
}

/// `register`: a catalogue's files as read on the asker's machine, each by
/// the name its diagnostics give it; the controller parses and checks
/// them itself, with the registered catalogue in view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterArgs {
    /// (name, text) of each manifest.
    pub manifests: Vec<(String, String)>,
    /// (name, text) of each `aliases.toml`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<(String, String)>,
}

/// `build`: a module's revision queued for the build machines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildArgs {
    pub module: Name,
    /// A branch, tag or commit.
    pub rev: String,
}

/// `artifact-put`: an artifact whose bytes the asker published, in order,
/// to their upload's subject (`mesh.upload.<person>.<upload>`); the
/// controller checks them against the size and digest and puts them in
/// the artifact store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactPutArgs {
    pub module: Name,
    pub name: Name,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// 32 lowercase hex digits.
    pub upload: String,
    pub size: u64,
    /// Lowercase hex SHA-256 of the bytes.
    pub sha256: String,
}

/// `audit`: which rows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditArgs {
    /// Unix milliseconds: only rows since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person: Option<Name>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
}

/// `logs`: a module's newest lines, as its node's host keeps them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsArgs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<Name>,
    pub request: crate::logs::LogsRequest,
}

/// `events`: the stored events after a sequence of `EVENTS`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsArgs {
    /// As `mesh events tail` is given it: an event reference
    /// (`ticker.tick`) or a subject; none: every event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    /// Only events stored after this sequence; none: from the newest on
    /// (the answer carries the newest sequence and no events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<u64>,
    /// At most this many.
    pub max: usize,
}

/// One stored event as `events` answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredEvent {
    pub sequence: u64,
    pub subject: String,
    /// The envelope as stored (JSON text).
    pub payload: String,
    /// Who sent it, as the subject and the records bear out.
    #[serde(default)]
    pub who: Option<String>,
    /// Why the envelope's word about its sender cannot be taken.
    #[serde(default)]
    pub doubt: Option<String>,
    /// When the broker stored it (unix seconds).
    #[serde(default)]
    pub stored: Option<u64>,
}

/// `events`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EventsAnswer {
    pub events: Vec<StoredEvent>,
    /// Where the next request starts (`after`).
    pub last: u64,
}

/// `logs`'s answer: the host's, or that the node's host did not answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogsReply {
    Answer(crate::logs::LogsAnswer),
    /// No host answered for the node (down, or not connected).
    Silent {
        node: Name,
    },
}

/// `status`'s answer beside the status view: the controller's XKey, what
/// a secret is sealed to on the asker's machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusData<S> {
    pub status: S,
    pub xkey: String,
}

/// What the audit trail keeps of a request's arguments: a secret's name,
/// never its value, even sealed.
pub fn audited(op: super::Operation, args: &serde_json::Value) -> serde_json::Value {
    use super::Operation::*;
    match op {
        SecretSet | SecretRotate => serde_json::json!({ "name": args.get("name") }),
        // The files by name: their texts are what the records then hold.
        Register => {
            let names = |key: &str| -> Vec<serde_json::Value> {
                args.get(key)
                    .and_then(|v| v.as_array())
                    .map(|files| files.iter().filter_map(|f| f.get(0).cloned()).collect())
                    .unwrap_or_default()
            };
            let mut files = names("manifests");
            files.extend(names("aliases"));
            serde_json::json!({ "files": files })
        }
        _ => args.clone(),
    }
}

/// What `mesh login` sends on `mesh.controller.login.<person>`, as the
/// login's principal: the login it spends, and the key the person made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    /// The login principal's public key (what the spend matches).
    pub login_key: String,
    /// The person's new NKey public key (`U…`); its seed never left.
    pub person_key: String,
}

/// `deploy`: a deployment as `mesh deploy` asks for it; no nodes: every
/// node the module is assigned to, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeployArgs {
    pub spec: crate::deploy::Spec,
}

/// What `deployment-change` does to a deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeploymentChange {
    Pause,
    Resume,
    Revert,
}

/// `deployment-change`: one deployment paused, resumed or reverted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeploymentChangeArgs {
    pub id: i64,
    pub change: DeploymentChange,
}

/// `deployments`: one deployment node by node (`id`), or the newest ones.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeploymentsArgs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<Name>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

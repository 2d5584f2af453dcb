//! The records the store keeps, as the rest of mesh sees them.

use mesh_core::manifest::Scope;
use mesh_core::names::Name;
use mesh_core::records::ToolAccess;

use crate::Millis;
use mesh_core::users_file::UserCredential;

use crate::secret::Secret;

/// A machine in the mesh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: Name,
    /// Set at enrolment; `None` until the node has spent its token.
    pub public_key: Option<String>,
    /// The host's XKey, set with `public_key`.
    pub xkey: Option<String>,
    /// Ports the operator gave this node, ascending.
    pub ports: Vec<u16>,
    /// Where other nodes reach it (`${seat:..}`); none recorded yet.
    pub address: Option<String>,
    pub created_at: Millis,
    pub enrolled_at: Option<Millis>,
    /// Last heartbeat heard; heartbeats themselves are never kept.
    pub last_seen_at: Option<Millis>,
}

/// A freshly issued enrolment token. The enrolment seed is shown here once;
/// the store keeps only its public key.
#[derive(Debug)]
pub struct IssuedToken {
    pub node: Name,
    /// The enrolment principal's NKey seed (`SU…`), carried by the token.
    pub secret: Secret,
    /// Its public key: what the spend matches.
    pub enrolment_key: String,
    pub issued_at: Millis,
    pub expires_at: Millis,
}

/// A token that can still be spent (one enrolment user per live token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveToken {
    pub node: Name,
    /// The enrolment principal's NKey public key: its entry in the users
    /// file for as long as the token is live.
    pub enrolment_key: String,
    pub issued_at: Millis,
    pub expires_at: Millis,
}

/// A successful enrolment: the token is spent and the node's key recorded.
/// The keys a host made for itself and sends in its enrolment request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostKeys {
    /// NKey user public key (`U…`).
    pub host_key: String,
    /// XKey public key (`X…`).
    pub xkey: String,
    /// Module keys the host made ahead (public halves).
    pub spare_keys: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enrolled {
    pub node: Name,
    pub public_key: String,
    pub enrolled_at: Millis,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialKind {
    /// A host, a module or the controller: always an NKey.
    Machine,
    /// An operator: a bcrypt hash of a password (cost ≥ 11).
    Person,
}

impl CredentialKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CredentialKind::Machine => "machine",
            CredentialKind::Person => "person",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "machine" => Some(CredentialKind::Machine),
            "person" => Some(CredentialKind::Person),
            _ => None,
        }
    }
}

/// A recorded credential: the principal and what the users file names it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub principal: String,
    pub kind: CredentialKind,
    /// A machine's NKey public key, or a person's bcrypt hash.
    pub credential: UserCredential,
    /// The node whose host or module this credential belongs to.
    pub node: Option<Name>,
    /// The module, for a module's credential on `node`.
    pub module: Option<Name>,
    /// The person, for a person's credential.
    pub person: Option<Name>,
    pub created_at: Millis,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Person {
    pub name: Name,
    /// The tools they may call; a list reads back sorted by its written form,
    /// without duplicates.
    pub tools: ToolAccess,
    /// Their role as an operator; none: tools only.
    pub role: Option<mesh_core::operation::Role>,
    pub created_at: Millis,
}

/// A registered module and its manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    pub name: Name,
    /// The manifest exactly as registered.
    pub manifest_source: String,
    /// `sha256:<hex>` of `manifest_source`, computed by the store.
    pub manifest_digest: String,
    pub registered_at: Millis,
    pub updated_at: Millis,
}

/// A version of a module: a commit, and the build it was built by if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleVersion {
    pub module: Name,
    pub rev: String,
    pub build_id: Option<String>,
    pub recorded_at: Millis,
}

/// A seat (or, with `declared_by` `None`, a role the mesh itself declares).
/// Its accepts/emits/tools live in the declaring manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seat {
    pub name: Name,
    pub declared_by: Option<Name>,
    pub scope: Scope,
    /// Empty: a marker.
    pub protocol: String,
}

/// Module `module` runs on node `node`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub node: Name,
    pub module: Name,
    pub created_at: Millis,
    /// The version of the module it runs (`mesh assign --version`), if any
    /// version with an artifact was recorded when it was assigned.
    pub version: Option<String>,
}

/// The whole desired state of one node at one version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declaration {
    pub node: Name,
    pub version: i64,
    pub digest: String,
    pub body: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModuleState {
    Starting,
    Running,
    Failed { reason: String },
    Stopped,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleOutcome {
    pub module: Name,
    pub state: ModuleState,
    /// How often the host restarted it.
    pub restarts: u32,
    /// The version its declaration pinned, as the host said.
    pub pinned: Option<String>,
    /// Its health (none from a host before health).
    pub health: Option<mesh_core::report::ModuleHealth>,
}

/// What a host said after applying a declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub node: Name,
    pub declaration_version: i64,
    /// Sorted by module when read back.
    pub outcomes: Vec<ModuleOutcome>,
    pub received_at: Millis,
    /// The host refused what it was sent (and changed nothing): why.
    pub refused: Option<String>,
    /// The id the host gave the report: recorded once per node.
    pub report_id: Option<String>,
}

/// What recording a report did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// Recorded now, with this id.
    New(i64),
    /// Its node already has a report with its id: nothing written.
    Duplicate,
}

/// A report as recorded, with the id the store gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredReport {
    pub id: i64,
    pub report: Report,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildState {
    Succeeded,
    Failed { reason: String },
}

/// A build output, addressed by digest in the artifact store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    pub name: String,
    /// `sha256:<hex>`.
    pub digest: String,
    pub path: String,
    pub size: u64,
    /// Its chunk token in `ARTIFACTS`: what a host is granted to read it by.
    pub nuid: Option<String>,
}

/// One finished build, as announced by the build machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Build {
    /// The request id the asker chose.
    pub id: String,
    /// `None` for a build that failed before it knew its module.
    pub module: Option<Name>,
    pub rev: Option<String>,
    pub state: BuildState,
    /// What the build read, in the order it reported them.
    pub inputs: Vec<String>,
    /// Sorted by name when read back.
    pub artifacts: Vec<Artifact>,
    pub finished_at: Millis,
}

/// What forgetting a node removed, for the operator's log.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Forgotten {
    /// Principals whose credentials were deleted, sorted.
    pub credentials: Vec<String>,
    pub assignments: u64,
}

/// The newest composition of the users file the broker is known to serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveComposition {
    /// The records revision it was composed from: every change that moved
    /// the revision up to this one is in force.
    pub records_revision: i64,
    pub live_at: Millis,
}

/// The controller lease as recorded: who took it last, and when; or that
/// its last holder gave it up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRecord {
    /// Moved by each take: a write fenced at an older one is refused.
    pub epoch: i64,
    /// Who holds it (`mesh controller on HOST (pid N, DIR)`); none once
    /// its holder released it (a clean stop).
    pub holder: Option<String>,
    /// Where the holder serves HTTP, as it said when it took the lease.
    pub http: Option<String>,
    /// When it was taken, or released.
    pub since: Millis,
}

/// An assigned module the controller leaves out of its node's declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    pub node: Name,
    pub module: Name,
    pub reason: String,
    /// When it was first left out (for this reason or another, without a
    /// break).
    pub since: Millis,
}

/// A secret as the store keeps it: its value sealed to the controller's
/// XKey by `sender`, never the plaintext.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedSecret {
    pub name: Name,
    /// Base64 of the XKey box.
    pub sealed: String,
    /// The XKey public key (`X…`) that sealed it.
    pub sender: String,
    pub set_at: Millis,
}

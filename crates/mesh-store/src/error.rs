//! What can go wrong with the store, typed so a caller can act on it.
//!
//! The controller's store window rests on one distinction: [`StoreError::Unavailable`]
//! (the store could not take the call now; try the same call later) versus
//! everything else (the store took the call and said no). Anything that is not
//! demonstrably an outage is *not* classified as one, so a refusal is never
//! retried forever.

use std::fmt;

use mesh_core::names::{Name, NameError};
use mesh_core::records::ToolListError;

use crate::Millis;

/// Which database sits behind a [`crate::Store`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    Sqlite,
    Postgres,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Sqlite => "sqlite",
            BackendKind::Postgres => "postgresql",
        })
    }
}

/// Every error the store returns. Messages never carry a secret: not a token,
/// not a credential, not the password a store URL may hold.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached or could not take the call right now
    /// (connection refused or closed, pool timeout, I/O, database busy or
    /// shutting down). The same call may succeed later.
    #[error("the {backend} store is unavailable")]
    Unavailable {
        backend: BackendKind,
        #[source]
        source: DriverError,
    },
    /// The store's schema was written by a newer mesh; touching it could
    /// destroy what that version recorded.
    #[error(
        "store schema version {found} is newer than this mesh binary supports ({supported}); upgrade mesh"
    )]
    SchemaTooNew { found: i64, supported: i64 },
    /// A reader found no store at the URL (redacted); nothing was created.
    #[error(
        "no mesh store at {url}; create one with `mesh fleet load FILE --catalogue DIR`, or give the right --store"
    )]
    Missing { url: String },
    /// A reader found a store at an older schema; it does not migrate.
    #[error(
        "store schema version {found} is older than this mesh binary reads ({current}); bring it forward with `mesh fleet load FILE --catalogue DIR`"
    )]
    SchemaTooOld { found: i64, current: i64 },
    /// The database holds another application's tables and no `mesh_schema`.
    /// Nothing was created in it.
    #[error(
        "the database holds {count} table(s) that are not mesh's ({}) and no mesh_schema; give --store an empty database or a mesh store",
        .some.join(", ")
    )]
    Foreign { count: usize, some: Vec<String> },
    /// An enrolment token was refused; every reason displays the same.
    #[error(transparent)]
    TokenRefused(#[from] TokenRefused),
    /// A second holder of a seat: refused at assign time.
    #[error(transparent)]
    SeatHeld(#[from] mesh_core::catalogue::holders::HolderConflict),
    /// A registration that would make an assigned module a second holder
    /// of a seat: refused, nothing of it recorded.
    #[error(transparent)]
    SecondHolder(#[from] Box<mesh_core::catalogue::holders::SecondHolder>),
    #[error("{what} {key} is not in the store")]
    NotFound { what: &'static str, key: String },
    #[error("{what} {key} is already in the store")]
    AlreadyExists { what: &'static str, key: String },
    #[error(
        "declaration {version} for node {node} is not newer than the newest recorded ({newest})"
    )]
    StaleDeclaration {
        node: Name,
        version: i64,
        newest: i64,
    },
    /// The store refused the write: a constraint (foreign key, check, not
    /// null, uniqueness not anticipated by a more specific variant) or a
    /// statement error.
    #[error("the {backend} store refused this: {kind}")]
    Refused {
        backend: BackendKind,
        kind: RefusalKind,
        #[source]
        source: DriverError,
    },
    /// The URL does not name a store mesh can open. `url` is redacted.
    #[error("store url {url} cannot be used: {reason}")]
    BadUrl { url: String, reason: String },
    /// A value read back from the store is not one mesh could have written.
    #[error("a {what} record in the store is malformed")]
    Malformed {
        what: &'static str,
        #[source]
        source: MalformedValue,
    },
    /// A value handed to the store is out of range for it.
    #[error("{what} cannot be stored: {detail}")]
    Invalid { what: &'static str, detail: String },
    /// A controller's write after its lease passed to another controller:
    /// refused, so a deposed controller writes nothing more.
    #[error(
        "this controller's lease (epoch {epoch}) has passed to another controller; it writes nothing more"
    )]
    Deposed { epoch: i64 },
    /// A second controller on a SQLite store, which holds one.
    #[error(
        "the store {store} has a controller running already: {holder}; a SQLite store holds one controller: stop that one first, or run a standby controller against a PostgreSQL store (--store postgres://…)"
    )]
    ControllerRunning { store: String, holder: String },
    #[error("hashing a credential failed")]
    Hash {
        #[source]
        source: HashError,
    },
}

/// The driver's error, as the cause of a [`StoreError`]. Its message is the
/// driver's, which already includes the driver's own cause (an I/O error, the
/// database's message): it reports no further source, so a printed chain
/// says that cause once, not twice.
#[derive(Debug)]
pub struct DriverError(pub sqlx::Error);

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for DriverError {}

/// Why a value read back from the store is not one mesh could have written.
#[derive(Debug, thiserror::Error)]
pub enum MalformedValue {
    #[error("a name does not read")]
    Name(#[from] NameError),
    /// A person's tool rows. The person is named: a fleet's persons are read
    /// all at once, and the operator has to find the one to fix.
    #[error("the tools of {person} do not read as a grant")]
    Tools {
        person: String,
        #[source]
        source: ToolListError,
    },
    #[error("port {0} is out of range")]
    Port(i64),
    /// A person's every-tool flag.
    #[error("all_tools is {0}, not 0 or 1")]
    AllTools(i64),
    #[error("artifact {artifact} has negative size {size}")]
    NegativeSize { artifact: String, size: i64 },
    /// Text naming one of two values (a credential kind, a seat scope, a
    /// module's or a build's state) names neither.
    #[error("{field} {found:?} is neither {} nor {}", .either[0], .either[1])]
    UnknownText {
        field: &'static str,
        found: String,
        either: [&'static str; 2],
    },
    /// A credential's hash.
    #[error("its hash is not one bcrypt can read")]
    Hash(#[source] bcrypt::BcryptError),
    /// A JSON record (a deployment) that does not read as one.
    #[error("its {field} is not the JSON mesh writes")]
    Json {
        field: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// A person's role.
    #[error("the role of {person} does not read")]
    Role {
        person: String,
        #[source]
        source: mesh_core::operation::UnknownRole,
    },
}

/// Why hashing (or verifying) a secret failed.
#[derive(Debug, thiserror::Error)]
pub enum HashError {
    #[error("bcrypt could not hash it")]
    Bcrypt(#[source] bcrypt::BcryptError),
    /// The blocking task the hash ran on panicked or was cancelled.
    #[error("the hashing task did not finish")]
    Task(#[source] tokio::task::JoinError),
}

impl StoreError {
    /// True when the store could not take the call now (retry later), false
    /// when it answered (a refusal, a missing record, ...).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. })
    }

    /// True when a controller's write was refused because its lease passed
    /// to another controller: nothing is decided on it (a message stays for
    /// the active controller), and the controller steps down.
    pub fn is_deposed(&self) -> bool {
        matches!(self, StoreError::Deposed { .. })
    }

    /// A `what` record read back holding `value`, which mesh could not have
    /// written.
    pub(crate) fn malformed(what: &'static str, value: impl Into<MalformedValue>) -> StoreError {
        StoreError::Malformed {
            what,
            source: value.into(),
        }
    }

    pub(crate) fn classify(backend: BackendKind, e: sqlx::Error) -> StoreError {
        if is_outage(backend, &e) {
            return StoreError::Unavailable {
                backend,
                source: DriverError(e),
            };
        }
        let kind = match &e {
            sqlx::Error::Database(db) => match db.kind() {
                sqlx::error::ErrorKind::UniqueViolation => RefusalKind::Unique,
                sqlx::error::ErrorKind::ForeignKeyViolation => RefusalKind::ForeignKey,
                sqlx::error::ErrorKind::NotNullViolation => RefusalKind::NotNull,
                sqlx::error::ErrorKind::CheckViolation => RefusalKind::Check,
                _ => RefusalKind::Statement,
            },
            sqlx::Error::RowNotFound => RefusalKind::NoRow,
            sqlx::Error::ColumnDecode { .. }
            | sqlx::Error::Decode(_)
            | sqlx::Error::ColumnNotFound(_)
            | sqlx::Error::ColumnIndexOutOfBounds { .. }
            | sqlx::Error::TypeNotFound { .. } => RefusalKind::Decode,
            _ => RefusalKind::Statement,
        };
        StoreError::Refused {
            backend,
            kind,
            source: DriverError(e),
        }
    }
}

/// Is this error the store being away (as opposed to the store answering no)?
fn is_outage(backend: BackendKind, e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        // A server that dies mid-message leaves the protocol half-read.
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => match backend {
            BackendKind::Postgres => db.code().is_some_and(|c| pg_outage(&c)),
            BackendKind::Sqlite => db
                .code()
                .and_then(|c| c.parse::<i32>().ok())
                .is_some_and(sqlite_outage),
        },
        _ => false,
    }
}

/// SQLSTATEs that mean "not now" rather than "no".
fn pg_outage(sqlstate: &str) -> bool {
    // 08: connection exception; 53: insufficient resources (too many
    // connections, disk full); 58: system error (I/O); 57P01-57P03: the
    // server is shutting down or starting; 40001/40P01: serialization
    // failure or deadlock, where retrying the same call is the remedy.
    sqlstate.starts_with("08")
        || sqlstate.starts_with("53")
        || sqlstate.starts_with("58")
        || matches!(sqlstate, "57P01" | "57P02" | "57P03" | "40001" | "40P01")
}

/// SQLite primary result codes that mean the file cannot be used right now.
fn sqlite_outage(extended: i32) -> bool {
    // The primary code is the low byte of the extended one.
    matches!(
        extended & 0xff,
        5 /* BUSY */ | 6 /* LOCKED */ | 7 /* NOMEM */ | 8 /* READONLY */
        | 10 /* IOERR */ | 11 /* CORRUPT */ | 13 /* FULL */ | 14 /* CANTOPEN */
        | 15 /* PROTOCOL */ | 26 /* NOTADB */
    )
}

/// What kind of "no" the store said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    Unique,
    ForeignKey,
    NotNull,
    Check,
    /// The query ran but returned no row where one was required.
    NoRow,
    /// A column could not be read as the type mesh expects.
    Decode,
    /// Any other statement error (syntax, missing table, ...).
    Statement,
}

impl fmt::Display for RefusalKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RefusalKind::Unique => "a record with that key already exists",
            RefusalKind::ForeignKey => "a record it refers to is missing or still referred to",
            RefusalKind::NotNull => "a required value is missing",
            RefusalKind::Check => "a value is out of range",
            RefusalKind::NoRow => "no matching record",
            RefusalKind::Decode => "a stored value has an unexpected type",
            RefusalKind::Statement => "the statement failed",
        })
    }
}

/// An enrolment token was not accepted.
///
/// The message is the same for every reason: a node that presents a bad token
/// learns nothing about which tokens exist. The reason is for the log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("this enrolment token cannot be used; ask the operator for a new one")]
pub struct TokenRefused {
    pub node: String,
    pub reason: RefusalReason,
}

/// Why a token was refused. Determined after the refusal, for the log only:
/// the decision itself is the single spend statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefusalReason {
    /// No token with this secret was ever issued for this node.
    Unknown,
    /// The token was spent already.
    Spent { at: Millis },
    /// The token expired before it was presented.
    Expired { at: Millis },
}

impl fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefusalReason::Unknown => f.write_str("no such token was issued for this node"),
            RefusalReason::Spent { at } => write!(f, "the token was spent at {at} (unix ms)"),
            RefusalReason::Expired { at } => write!(f, "the token expired at {at} (unix ms)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::*;

    /// The message with every source after it, as mesh's commands print it.
    fn chain(e: &dyn Error) -> String {
        let mut shown = e.to_string();
        let mut cause = e.source();
        while let Some(c) = cause {
            shown = format!("{shown}: {c}");
            cause = c.source();
        }
        shown
    }

    #[test]
    fn a_driver_error_says_its_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = StoreError::classify(BackendKind::Sqlite, sqlx::Error::Io(io));
        assert!(e.is_unavailable());
        let shown = chain(&e);
        assert_eq!(shown.matches("no such file").count(), 1, "{shown}");
    }

    #[test]
    fn a_malformed_record_says_which_and_why_once() {
        let e = StoreError::malformed(
            "seat",
            MalformedValue::UnknownText {
                field: "scope",
                found: "global".into(),
                either: ["node", "mesh"],
            },
        );
        assert_eq!(
            chain(&e),
            "a seat record in the store is malformed: scope \"global\" is neither node nor mesh"
        );
        let bad = Name::new("Ada").unwrap_err();
        let e = StoreError::malformed("person", bad.clone());
        assert!(matches!(
            &e,
            StoreError::Malformed {
                source: MalformedValue::Name(n),
                ..
            } if *n == bad
        ));
        assert_eq!(
            chain(&e),
            format!("a person record in the store is malformed: a name does not read: {bad}")
        );
    }
}

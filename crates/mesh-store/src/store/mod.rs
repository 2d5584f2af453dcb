//! The record operations, one file per record kind, each its own `impl
//! Store`. Every body is written once and runs on both backends through
//! `with_pool!`; what several kinds share (reading names back, the
//! `must_exist!` check) is here.

use mesh_core::names::Name;

use crate::error::StoreError;

/// A name read back from the store; anything else was not written by mesh.
fn name(what: &'static str, s: String) -> Result<Name, StoreError> {
    Name::new(s).map_err(|e| StoreError::malformed(what, e))
}

fn opt_name(what: &'static str, s: Option<String>) -> Result<Option<Name>, StoreError> {
    s.map(|s| name(what, s)).transpose()
}

fn not_found(what: &'static str, key: impl ToString) -> StoreError {
    StoreError::NotFound {
        what,
        key: key.to_string(),
    }
}

/// Fails with `NotFound { what, key }` unless `$sql` finds a row. Used in the
/// transaction that writes, never before it: a check outside would leave a
/// removal the whole call to slip in.
macro_rules! must_exist {
    // The row named `$name` in `$table`.
    ($tx:ident, $what:literal in $table:literal, $name:expr) => {{
        let name: &::mesh_core::names::Name = $name;
        must_exist!(
            $tx,
            $what,
            name,
            concat!("SELECT name FROM ", $table, " WHERE name = $1"),
            name.as_str()
        )
    }};
    ($tx:ident, $what:literal, $key:expr, $sql:expr $(, $bind:expr)+) => {{
        let found: Option<(String,)> = sqlx::query_as($sql)
            $(.bind($bind))+
            .fetch_optional(&mut *$tx)
            .await?;
        if found.is_none() {
            return Err($crate::store::not_found($what, $key).into());
        }
    }};
}

/// The registered catalogue as `$tx` reads it (manifests and renames), as
/// the holder checks see it.
macro_rules! registered_in {
    ($tx:ident) => {{
        let modules: Vec<(String, String)> =
            sqlx::query_as("SELECT name, manifest_source FROM modules")
                .fetch_all(&mut *$tx)
                .await?;
        let aliases: Vec<(String, String)> = sqlx::query_as("SELECT alias, seat FROM seat_aliases")
            .fetch_all(&mut *$tx)
            .await?;
        ::mesh_core::catalogue::holders::registered(&modules, &aliases)
    }};
}

/// Every assignment `(node, module)` as `$tx` reads it, in the order they
/// were made (the first holder of a seat comes first).
macro_rules! assignments_in {
    ($tx:ident) => {{
        let made: Vec<(String, String)> =
            sqlx::query_as("SELECT node, module FROM assignments ORDER BY seq, node, module")
                .fetch_all(&mut *$tx)
                .await?;
        made.into_iter()
            .filter_map(|(n, m)| {
                Some((
                    ::mesh_core::names::Name::new(n).ok()?,
                    ::mesh_core::names::Name::new(m).ok()?,
                ))
            })
            .collect::<Vec<(::mesh_core::names::Name, ::mesh_core::names::Name)>>()
    }};
}

/// The first second holder of a seat that the assignments `$pairs` (node,
/// module), already written in `$tx`, make: read in the same transaction as
/// the write, so two writers at once cannot both pass.
macro_rules! holder_conflict {
    ($tx:ident, $pairs:expr) => {{
        let cat = registered_in!($tx);
        let made = assignments_in!($tx);
        $pairs.into_iter().find_map(|(node, module)| {
            ::mesh_core::catalogue::holders::holder_conflict(&cat, &made, node, module)
        })
    }};
}

/// Unassigns `$module` from `$node` in `$tx`, deleting that module's
/// credential on the node; evaluates to whether it was assigned. One
/// statement set for `unassign`, a move and a fleet's prune.
macro_rules! unassign_in {
    ($tx:ident, $node:expr, $module:expr) => {{
        let (node, module): (&str, &str) = ($node, $module);
        sqlx::query("DELETE FROM credentials WHERE node = $1 AND module = $2")
            .bind(node)
            .bind(module)
            .execute(&mut *$tx)
            .await?;
        sqlx::query("DELETE FROM assignments WHERE node = $1 AND module = $2")
            .bind(node)
            .bind(module)
            .execute(&mut *$tx)
            .await?
            .rows_affected()
            == 1
    }};
}

/// Pins `$module` to each `($node, $version)` of `$pins` in `$tx` where it
/// is assigned (a node unassigned meanwhile is not assigned again), each
/// version checked recorded first; evaluates to how many pins moved. One
/// statement set for a batch's pins and a deployment's step.
macro_rules! pin_in {
    ($tx:ident, $module:expr, $pins:expr) => {{
        let (module, pins): (
            &::mesh_core::names::Name,
            &[(::mesh_core::names::Name, String)],
        ) = ($module, $pins);
        let versions: std::collections::BTreeSet<&str> =
            pins.iter().map(|(_, v)| v.as_str()).collect();
        for v in &versions {
            must_exist!(
                $tx,
                "version",
                format!("{v} of module {module}"),
                "SELECT rev FROM module_versions WHERE module = $1 AND rev = $2",
                module.as_str(),
                *v
            );
        }
        let mut moved: u64 = 0;
        for (node, version) in pins {
            moved += sqlx::query(
                "UPDATE assignments SET version = $3 WHERE node = $1 AND module = $2 \
                 AND (version IS NULL OR version <> $3)",
            )
            .bind(node.as_str())
            .bind(module.as_str())
            .bind(version)
            .execute(&mut *$tx)
            .await?
            .rows_affected();
        }
        usize::try_from(moved).unwrap_or(usize::MAX)
    }};
}

/// The `all_tools` flag and the tool rows a person's access is stored as.
/// The flag, not a "*" row: a "*" among tool rows would read as every tool
/// to one reader and as a tool named "*" to another.
pub(crate) fn tool_rows(tools: &::mesh_core::records::ToolAccess) -> (i64, Vec<String>) {
    match tools {
        ::mesh_core::records::ToolAccess::All => (1, Vec::new()),
        ::mesh_core::records::ToolAccess::Only(_) => {
            let mut t = tools.written();
            t.sort();
            t.dedup();
            (0, t)
        }
    }
}

/// Records person `$person` with `$tools` in `$tx`, replacing an earlier
/// grant; evaluates to whether the person is new. One statement set for
/// `put_person` and a fleet change, so the two cannot store a grant apart.
macro_rules! put_person_in {
    ($tx:ident, $person:expr, $tools:expr, $now:expr) => {{
        let person: &::mesh_core::names::Name = $person;
        let (all, list) = $crate::store::tool_rows($tools);
        let added = sqlx::query(
            "INSERT INTO persons (name, all_tools, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(person.as_str())
        .bind(all)
        .bind($now)
        .execute(&mut *$tx)
        .await?
        .rows_affected()
            == 1;
        if !added {
            sqlx::query("UPDATE persons SET all_tools = $1 WHERE name = $2")
                .bind(all)
                .bind(person.as_str())
                .execute(&mut *$tx)
                .await?;
        }
        sqlx::query("DELETE FROM person_tools WHERE person = $1")
            .bind(person.as_str())
            .execute(&mut *$tx)
            .await?;
        for tool in &list {
            sqlx::query("INSERT INTO person_tools (person, tool) VALUES ($1, $2)")
                .bind(person.as_str())
                .bind(tool)
                .execute(&mut *$tx)
                .await?;
        }
        added
    }};
}

/// Records `$key` as how `$person` signs in, in `$tx`, replacing an earlier
/// one: `set_person_key` and a login's spend. A key already another
/// person's is refused: two persons on one key would be one person with
/// two names.
macro_rules! set_person_key_in {
    ($tx:ident, $person:expr, $key:expr, $now:expr) => {{
        let person: &::mesh_core::names::Name = $person;
        let key: &str = $key;
        let owner: Option<(String,)> =
            sqlx::query_as("SELECT person FROM person_keys WHERE nkey = $1")
                .bind(key)
                .fetch_optional(&mut *$tx)
                .await?;
        if let Some((owner,)) = owner.filter(|(o,)| o != person.as_str()) {
            return Err($crate::error::StoreError::Invalid {
                what: "a person's key",
                detail: format!("it is already the key of person {owner}"),
            }
            .into());
        }
        let exists: Option<(String,)> = sqlx::query_as("SELECT name FROM persons WHERE name = $1")
            .bind(person.as_str())
            .fetch_optional(&mut *$tx)
            .await?;
        if exists.is_none() {
            return Err($crate::error::StoreError::Invalid {
                what: "a person's key",
                detail: format!("there is no person {person}; add them first"),
            }
            .into());
        }
        sqlx::query(
            "INSERT INTO person_keys (person, nkey, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (person) DO UPDATE SET nkey = excluded.nkey, created_at = excluded.created_at",
        )
        .bind(person.as_str())
        .bind(key)
        .bind($now)
        .execute(&mut *$tx)
        .await?;
    }};
}

/// Records (or replaces) in `$tx` the RabbitMQ password hash `$hash` of
/// key `$key`, at `$now`.
macro_rules! put_amqp_hash_in {
    ($tx:expr, $key:expr, $hash:expr, $now:expr) => {{
        sqlx::query(super::amqp_hashes::UPSERT_AMQP_HASH)
            .bind($key)
            .bind($hash)
            .bind($now)
            .execute(&mut *$tx)
            .await?;
    }};
}

// After the macro: a `macro_rules!` is in scope only below its definition.
mod artifacts;
pub use artifacts::{ArtifactRow, Upload, version_ok};
mod assignments;
mod audit;
pub use audit::{Actor, Appended, AuditEntry, AuditFilter, AuditRow, Outcome};
mod amqp_hashes;
mod batch;
mod builds;
mod compositions;
pub use compositions::{BusMove, SharedUsersFile};
mod credentials;
mod declarations;
mod deployments;
pub use deployments::DeploymentRow;
mod left_out;
mod modules;
mod nodes;
// After nodes: it forgets nodes with nodes' macro.
mod fleet;
mod logins;
pub use logins::{IssuedLogin, LiveLogin};
mod persons;
mod registration;
pub use registration::Registration;
mod reports;
pub use reports::ReportSeen;
pub(crate) mod seats;
mod secrets;
mod spares;
mod tokens;

pub use fleet::{
    FleetApplied, FleetChange, PreparedCredential, PreparedToken, prepare_machine_key,
    prepare_password, prepare_token,
};

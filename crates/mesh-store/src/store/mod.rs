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

// After the macro: a `macro_rules!` is in scope only below its definition.
mod assignments;
mod builds;
mod credentials;
mod declarations;
mod modules;
mod nodes;
// After nodes: it forgets nodes with nodes' macro.
mod fleet;
mod persons;
mod reports;
mod seats;
mod tokens;

pub use fleet::{
    FleetApplied, FleetChange, PreparedCredential, PreparedToken, prepare_machine_key,
    prepare_password, prepare_token,
};

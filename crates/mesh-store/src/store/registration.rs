//! Registering a catalogue: its manifests, the seats they declare and the
//! seat renames of its `aliases.toml`, in one transaction — a registration
//! the records take half of would leave a catalogue nobody checked.

use mesh_core::names::Name;

use crate::error::StoreError;
use crate::records::Seat;
use crate::{Store, now_ms, with_pool};

/// What one registration records.
#[derive(Debug, Clone, Default)]
pub struct Registration {
    /// Module → its manifest text.
    pub modules: Vec<(Name, String)>,
    /// Every seat the registered modules declare (`declared_by` one of
    /// them) and the mesh's roles (`declared_by` none). A registered
    /// module's seats not among them are forgotten, with their aliases.
    pub seats: Vec<Seat>,
    /// Old seat name → the seat it names now ("a rename is a row").
    pub aliases: Vec<(Name, Name)>,
}

impl Registration {
    /// Records nothing.
    pub fn is_empty(&self) -> bool {
        self.modules.is_empty() && self.seats.is_empty() && self.aliases.is_empty()
    }
}

/// Records registration `$r` in `$tx` at `$now`: its manifests, seats and
/// renames. Refused (`$tx` to be dropped) when a rename or seat clashes,
/// or when it would make an assigned module a second holder of a seat
/// (decided in the transaction, so an assign at the same time cannot slip
/// in). One statement set for `register_catalogue` and a fleet change.
macro_rules! register_in {
    ($tx:ident, $r:expr, $now:expr) => {{
        let r: &$crate::store::Registration = $r;
        let before = registered_in!($tx);
        for (module, source) in &r.modules {
            sqlx::query(
                "INSERT INTO modules (name, manifest_source, manifest_digest, registered_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $4) \
                 ON CONFLICT (name) DO UPDATE SET manifest_source = excluded.manifest_source, \
                 manifest_digest = excluded.manifest_digest, updated_at = excluded.updated_at \
                 WHERE modules.manifest_digest <> excluded.manifest_digest",
            )
            .bind(module.as_str())
            .bind(source)
            .bind($crate::secret::sha256_digest(source))
            .bind($now)
            .execute(&mut *$tx)
            .await?;
            let kept: Vec<&str> = r
                .seats
                .iter()
                .filter(|s| s.declared_by.as_ref() == Some(module))
                .map(|s| s.name.as_str())
                .collect();
            let declared: Vec<(String,)> =
                sqlx::query_as("SELECT name FROM seats WHERE declared_by = $1")
                    .bind(module.as_str())
                    .fetch_all(&mut *$tx)
                    .await?;
            for (gone,) in declared.iter().filter(|(s,)| !kept.contains(&s.as_str())) {
                sqlx::query("DELETE FROM seats WHERE name = $1")
                    .bind(gone)
                    .execute(&mut *$tx)
                    .await?;
            }
        }
        for seat in &r.seats {
            // One name, one meaning: a seat may not shadow an alias.
            let alias: Option<(String,)> =
                sqlx::query_as("SELECT seat FROM seat_aliases WHERE alias = $1")
                    .bind(seat.name.as_str())
                    .fetch_optional(&mut *$tx)
                    .await?;
            if let Some((target,)) = alias {
                return Err($crate::error::StoreError::AlreadyExists {
                    what: "seat alias",
                    key: format!("{} (for seat {target})", seat.name),
                }
                .into());
            }
            sqlx::query(
                "INSERT INTO seats (name, declared_by, scope, protocol, created_at) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (name) DO UPDATE SET declared_by = excluded.declared_by, \
                 scope = excluded.scope, protocol = excluded.protocol \
                 WHERE seats.declared_by IS DISTINCT FROM excluded.declared_by \
                 OR seats.scope <> excluded.scope OR seats.protocol <> excluded.protocol",
            )
            .bind(seat.name.as_str())
            .bind(seat.declared_by.as_ref().map(::mesh_core::names::Name::as_str))
            .bind($crate::store::seats::scope_text(seat.scope))
            .bind(&seat.protocol)
            .bind($now)
            .execute(&mut *$tx)
            .await?;
        }
        for (alias, seat) in &r.aliases {
            must_exist!($tx, "seat" in "seats", seat);
            let clash: Option<(String,)> =
                sqlx::query_as("SELECT name FROM seats WHERE name = $1")
                    .bind(alias.as_str())
                    .fetch_optional(&mut *$tx)
                    .await?;
            if clash.is_some() {
                return Err($crate::error::StoreError::AlreadyExists {
                    what: "seat",
                    key: alias.to_string(),
                }
                .into());
            }
            sqlx::query(
                "INSERT INTO seat_aliases (alias, seat) VALUES ($1, $2) \
                 ON CONFLICT (alias) DO UPDATE SET seat = excluded.seat \
                 WHERE seat_aliases.seat <> excluded.seat",
            )
            .bind(alias.as_str())
            .bind(seat.as_str())
            .execute(&mut *$tx)
            .await?;
        }
        let after = registered_in!($tx);
        let made = assignments_in!($tx);
        if let Some(second) = ::mesh_core::catalogue::holders::made_by(&before, &after, &made) {
            return Err($crate::error::StoreError::SecondHolder(Box::new(second)).into());
        }
    }};
}
pub(crate) use register_in;

impl Store {
    /// Records `r` whole or not at all.
    /// As [`Store::register_catalogue`], only if the registered catalogue
    /// is still at `revision` (what the registration was checked against):
    /// a registration made meanwhile refuses this one, which is checked
    /// again by registering again.
    pub async fn register_catalogue_at(
        &self,
        r: &Registration,
        revision: i64,
    ) -> Result<(), StoreError> {
        let now = now_ms();
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            // An update, not a read: it waits out a registration in flight
            // and then sees its revision (PostgreSQL re-reads the row).
            let held = sqlx::query(
                "UPDATE records_revisions SET revision = revision \
                 WHERE kind = 'catalogue' AND revision = $1",
            )
            .bind(revision)
            .execute(&mut *tx)
            .await?
            .rows_affected()
                == 1;
            if !held {
                return Err(StoreError::Invalid {
                    what: "a registration",
                    detail: "the registered catalogue changed while this one was checked against it (another registration): register again".into(),
                }
                .into());
            }
            register_in!(tx, r, now);
            tx.commit().await?;
            Ok(())
        })
    }

    pub async fn register_catalogue(&self, r: &Registration) -> Result<(), StoreError> {
        let now = now_ms();
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            register_in!(tx, r, now);
            tx.commit().await?;
            Ok(())
        })
    }
}

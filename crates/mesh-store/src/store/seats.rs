//! Seats and roles, and the aliases that keep a renamed seat's old name
//! meaning the new one.

use mesh_core::manifest::Scope;
use mesh_core::names::Name;

use super::{name, opt_name};
use crate::error::{MalformedValue, StoreError};
use crate::records::Seat;
use crate::{Store, now_ms, with_pool};

// Spelled out rather than taken from `Scope`'s Display: that is the
// manifest's wording, and changing it must not change what the store has
// recorded.
pub(crate) fn scope_text(scope: Scope) -> &'static str {
    match scope {
        Scope::Node => "node",
        Scope::Mesh => "mesh",
    }
}

fn scope_from(text: &str) -> Option<Scope> {
    match text {
        "node" => Some(Scope::Node),
        "mesh" => Some(Scope::Mesh),
        _ => None,
    }
}

type SeatRow = (String, Option<String>, String, String);

fn seat_from(row: SeatRow) -> Result<Seat, StoreError> {
    Ok(Seat {
        name: name("seat", row.0)?,
        declared_by: opt_name("seat", row.1)?,
        scope: scope_from(&row.2).ok_or_else(|| {
            StoreError::malformed(
                "seat",
                MalformedValue::UnknownText {
                    field: "scope",
                    found: row.2.clone(),
                    either: ["node", "mesh"],
                },
            )
        })?,
        protocol: row.3,
    })
}

const SEAT_COLUMNS: &str = "name, declared_by, scope, protocol";

impl Store {
    /// Records a seat (or a role, with `declared_by` `None`), replacing an
    /// earlier record of the same name.
    pub async fn put_seat(&self, seat: &Seat) -> Result<(), StoreError> {
        let now = now_ms();
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            // One name, one meaning: a seat may not shadow an alias.
            let alias: Option<(String,)> =
                sqlx::query_as("SELECT seat FROM seat_aliases WHERE alias = $1")
                    .bind(seat.name.as_str())
                    .fetch_optional(&mut *tx)
                    .await?;
            if let Some((target,)) = alias {
                return Err(StoreError::AlreadyExists {
                    what: "seat alias",
                    key: format!("{} (for seat {target})", seat.name),
                }
                .into());
            }
            if let Some(m) = &seat.declared_by {
                must_exist!(tx, "module" in "modules", m);
            }
            sqlx::query(
                "INSERT INTO seats (name, declared_by, scope, protocol, created_at) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (name) DO UPDATE SET declared_by = excluded.declared_by, \
                 scope = excluded.scope, protocol = excluded.protocol",
            )
            .bind(seat.name.as_str())
            .bind(seat.declared_by.as_ref().map(Name::as_str))
            .bind(scope_text(seat.scope))
            .bind(&seat.protocol)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    pub async fn seat(&self, seat: &Name) -> Result<Option<Seat>, StoreError> {
        let row = with_pool!(self, |pool| {
            let row: Option<SeatRow> =
                sqlx::query_as(&format!("SELECT {SEAT_COLUMNS} FROM seats WHERE name = $1"))
                    .bind(seat.as_str())
                    .fetch_optional(pool)
                    .await?;
            Ok(row)
        })?;
        row.map(seat_from).transpose()
    }

    /// Every seat and role, by name.
    pub async fn seats(&self) -> Result<Vec<Seat>, StoreError> {
        let rows = with_pool!(self, |pool| {
            let rows: Vec<SeatRow> =
                sqlx::query_as(&format!("SELECT {SEAT_COLUMNS} FROM seats ORDER BY name"))
                    .fetch_all(pool)
                    .await?;
            Ok(rows)
        })?;
        rows.into_iter().map(seat_from).collect()
    }

    /// Makes `alias` another name for `seat`.
    pub async fn add_seat_alias(&self, alias: &Name, seat: &Name) -> Result<(), StoreError> {
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            must_exist!(tx, "seat" in "seats", seat);
            let clash: Option<(String,)> = sqlx::query_as("SELECT name FROM seats WHERE name = $1")
                .bind(alias.as_str())
                .fetch_optional(&mut *tx)
                .await?;
            if clash.is_some() {
                return Err(StoreError::AlreadyExists {
                    what: "seat",
                    key: alias.to_string(),
                }
                .into());
            }
            let inserted = sqlx::query(
                "INSERT INTO seat_aliases (alias, seat) VALUES ($1, $2) ON CONFLICT (alias) DO NOTHING",
            )
            .bind(alias.as_str())
            .bind(seat.as_str())
            .execute(&mut *tx)
            .await?;
            if inserted.rows_affected() == 0 {
                return Err(StoreError::AlreadyExists {
                    what: "seat alias",
                    key: alias.to_string(),
                }
                .into());
            }
            tx.commit().await?;
            Ok(())
        })
    }

    /// Every alias and the seat it names, by alias. Resolving a name is left
    /// to `mesh_core::catalogue::Aliases`, built from these rows: one
    /// resolution (chains, cycles) for the catalogue and the store alike.
    pub async fn seat_aliases(&self) -> Result<Vec<(Name, Name)>, StoreError> {
        let rows = with_pool!(self, |pool| {
            let rows: Vec<(String, String)> =
                sqlx::query_as("SELECT alias, seat FROM seat_aliases ORDER BY alias")
                    .fetch_all(pool)
                    .await?;
            Ok(rows)
        })?;
        rows.into_iter()
            .map(|(a, s)| Ok((name("seat alias", a)?, name("seat alias", s)?)))
            .collect()
    }
}

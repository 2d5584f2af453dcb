//! Registering a catalogue: its manifests, the seats they declare and the
//! seat renames of its `aliases.toml`, in one transaction — a registration
//! the records take half of would leave a catalogue nobody checked.

use mesh_core::names::Name;

use super::seats::scope_text;
use crate::error::StoreError;
use crate::records::Seat;
use crate::secret::sha256_digest;
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

impl Store {
    /// Records `r` whole or not at all.
    pub async fn register_catalogue(&self, r: &Registration) -> Result<(), StoreError> {
        let now = now_ms();
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
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
                .bind(sha256_digest(source))
                .bind(now)
                .execute(&mut *tx)
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
                        .fetch_all(&mut *tx)
                        .await?;
                for (gone,) in declared.iter().filter(|(s,)| !kept.contains(&s.as_str())) {
                    sqlx::query("DELETE FROM seats WHERE name = $1")
                        .bind(gone)
                        .execute(&mut *tx)
                        .await?;
                }
            }
            for seat in &r.seats {
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
                sqlx::query(
                    "INSERT INTO seats (name, declared_by, scope, protocol, created_at) \
                     VALUES ($1, $2, $3, $4, $5) \
                     ON CONFLICT (name) DO UPDATE SET declared_by = excluded.declared_by, \
                     scope = excluded.scope, protocol = excluded.protocol \
                     WHERE seats.declared_by IS DISTINCT FROM excluded.declared_by \
                     OR seats.scope <> excluded.scope OR seats.protocol <> excluded.protocol",
                )
                .bind(seat.name.as_str())
                .bind(seat.declared_by.as_ref().map(Name::as_str))
                .bind(scope_text(seat.scope))
                .bind(&seat.protocol)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            }
            for (alias, seat) in &r.aliases {
                must_exist!(tx, "seat" in "seats", seat);
                let clash: Option<(String,)> =
                    sqlx::query_as("SELECT name FROM seats WHERE name = $1")
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
                sqlx::query(
                    "INSERT INTO seat_aliases (alias, seat) VALUES ($1, $2) \
                     ON CONFLICT (alias) DO UPDATE SET seat = excluded.seat \
                     WHERE seat_aliases.seat <> excluded.seat",
                )
                .bind(alias.as_str())
                .bind(seat.as_str())
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(())
        })
    }
}

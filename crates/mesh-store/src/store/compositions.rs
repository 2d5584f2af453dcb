//! The live composition: which records the broker serves, as the
//! controller last confirmed. A command that changed a record reads it to
//! tell when its change is in force.

use crate::records::LiveComposition;
use crate::{Millis, Store, StoreError, with_pool};

impl Store {
    /// Records that a composition of the records at `revision` is live.
    /// Never moves backwards: a restarted controller confirming an older
    /// revision leaves the newer one recorded.
    pub async fn record_composition_live(
        &self,
        revision: i64,
        at: Millis,
    ) -> Result<(), StoreError> {
        self.record_forward(
            "INSERT INTO composition_live (id, records_revision, live_at) VALUES (1, $1, $2) \
             ON CONFLICT (id) DO UPDATE \
             SET records_revision = excluded.records_revision, live_at = excluded.live_at \
             WHERE composition_live.records_revision < excluded.records_revision",
            revision,
            at,
        )
        .await
    }

    /// Runs `upsert` (a one-row table's revision, bound `$1`, and when, `$2`,
    /// moved only forward by its own `WHERE`) in a fenced transaction.
    async fn record_forward(
        &self,
        upsert: &'static str,
        revision: i64,
        at: Millis,
    ) -> Result<(), StoreError> {
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            sqlx::query(upsert)
                .bind(revision)
                .bind(at)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// The newest live composition; none before a controller confirmed one.
    pub async fn composition_live(&self) -> Result<Option<LiveComposition>, StoreError> {
        with_pool!(self, |pool| {
            let row: Option<(i64, i64)> = sqlx::query_as(
                "SELECT records_revision, live_at FROM composition_live WHERE id = 1",
            )
            .fetch_optional(pool)
            .await?;
            Ok(row.map(|(records_revision, live_at)| LiveComposition {
                records_revision,
                live_at,
            }))
        })
    }
}

impl Store {
    /// Records that every node's declaration has been composed from the
    /// records at `revision` or later (those that changed recorded, the
    /// rest found as they were). Never moves backwards, and fenced: a
    /// deposed controller's pass declared nothing a host will read.
    pub async fn record_declared_through(
        &self,
        revision: i64,
        at: Millis,
    ) -> Result<(), StoreError> {
        self.record_forward(
            "INSERT INTO declared_through (id, records_revision, declared_at) VALUES (1, $1, $2) \
             ON CONFLICT (id) DO UPDATE \
             SET records_revision = excluded.records_revision, declared_at = excluded.declared_at \
             WHERE declared_through.records_revision < excluded.records_revision",
            revision,
            at,
        )
        .await
    }

    /// The newest records revision every node's declaration was composed
    /// from; none before a controller's first pass.
    pub async fn declared_through(&self) -> Result<Option<i64>, StoreError> {
        with_pool!(self, |pool| {
            let row: Option<(i64,)> =
                sqlx::query_as("SELECT records_revision FROM declared_through WHERE id = 1")
                    .fetch_optional(pool)
                    .await?;
            Ok(row.map(|(r,)| r))
        })
    }
}

/// The users file of a clustered bus, as shared by the active controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedUsersFile {
    pub revision: i64,
    pub text: String,
}

impl Store {
    /// Shares `text`, the users file every server of a clustered bus must
    /// serve, with the controllers of the other machines: its revision.
    /// Fenced: a deposed controller's composition reaches no server.
    pub async fn share_users_file(&self, text: &str) -> Result<i64, StoreError> {
        let at = crate::now_ms();
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            let (revision,): (i64,) = sqlx::query_as(
                "INSERT INTO users_file_shared (id, revision, text, shared_at) VALUES (1, 1, $1, $2) \
                 ON CONFLICT (id) DO UPDATE SET revision = users_file_shared.revision + 1, \
                 text = excluded.text, shared_at = excluded.shared_at \
                 RETURNING revision",
            )
            .bind(text)
            .bind(at)
            .fetch_one(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(revision)
        })
    }

    /// The revision of the shared users file, without its text (polled):
    /// none before one was shared.
    pub async fn shared_users_file_revision(&self) -> Result<Option<i64>, StoreError> {
        with_pool!(self, |pool| {
            let row: Option<(i64,)> =
                sqlx::query_as("SELECT revision FROM users_file_shared WHERE id = 1")
                    .fetch_optional(pool)
                    .await?;
            Ok(row.map(|(r,)| r))
        })
    }

    /// The shared users file; none before one was shared.
    pub async fn shared_users_file(&self) -> Result<Option<SharedUsersFile>, StoreError> {
        with_pool!(self, |pool| {
            let row: Option<(i64, String)> =
                sqlx::query_as("SELECT revision, text FROM users_file_shared WHERE id = 1")
                    .fetch_optional(pool)
                    .await?;
            Ok(row.map(|(revision, text)| SharedUsersFile { revision, text }))
        })
    }
}

impl Store {
    /// Records the addresses nodes reach the broker at (`mesh broker
    /// set-address`): the next declaration of every node carries them.
    pub async fn set_bus_urls(&self, urls: &[String]) -> Result<(), StoreError> {
        if urls.is_empty() || urls.iter().any(|u| u.is_empty() || u.contains('\n')) {
            return Err(StoreError::Invalid {
                what: "bus addresses",
                detail: "give one address or more, each on a line of its own".into(),
            });
        }
        let joined = urls.join("\n");
        let at = crate::now_ms();
        with_pool!(self, |pool| {
            sqlx::query(
                "INSERT INTO bus_addresses (id, urls, set_at) VALUES (1, $1, $2) \
                 ON CONFLICT (id) DO UPDATE SET urls = excluded.urls, set_at = excluded.set_at \
                 WHERE bus_addresses.urls <> excluded.urls",
            )
            .bind(&joined)
            .bind(at)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    /// The addresses `set_bus_urls` recorded; none: the genesis's own.
    pub async fn bus_urls(&self) -> Result<Option<Vec<String>>, StoreError> {
        with_pool!(self, |pool| {
            let row: Option<(String,)> =
                sqlx::query_as("SELECT urls FROM bus_addresses WHERE id = 1")
                    .fetch_optional(pool)
                    .await?;
            Ok(row.map(|(u,)| u.lines().map(str::to_string).collect()))
        })
    }

    /// Confirms a move onto the bus at `urls`: the bus addresses every
    /// node is declared become them, and the move is recorded, in one
    /// change. Refused while another move is recorded.
    pub async fn confirm_bus_move(&self, urls: &[String]) -> Result<(), StoreError> {
        if urls.is_empty() || urls.iter().any(|u| u.is_empty() || u.contains('\n')) {
            return Err(StoreError::Invalid {
                what: "bus addresses",
                detail: "give one address or more, each on a line of its own".into(),
            });
        }
        if let Some(m) = self.bus_move().await? {
            return Err(StoreError::AlreadyExists {
                what: "bus move",
                key: format!("onto {}", m.to_urls.join(",")),
            });
        }
        let joined = urls.join("\n");
        let at = crate::now_ms();
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            sqlx::query("INSERT INTO bus_moves (id, to_urls, confirmed_at) VALUES (1, $1, $2)")
                .bind(&joined)
                .bind(at)
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "INSERT INTO bus_addresses (id, urls, set_at) VALUES (1, $1, $2) \
                 ON CONFLICT (id) DO UPDATE SET urls = excluded.urls, set_at = excluded.set_at",
            )
            .bind(&joined)
            .bind(at)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// The move recorded, if any.
    pub async fn bus_move(&self) -> Result<Option<BusMove>, StoreError> {
        let row: Option<(String, i64, Option<i64>, Option<i64>)> = with_pool!(self, |pool| {
            Ok(sqlx::query_as(
                "SELECT to_urls, confirmed_at, moved_at, retired_at FROM bus_moves WHERE id = 1",
            )
            .fetch_optional(pool)
            .await?)
        })?;
        Ok(
            row.map(|(urls, confirmed_at, moved_at, retired_at)| BusMove {
                to_urls: urls.lines().map(str::to_string).collect(),
                confirmed_at,
                moved_at,
                retired_at,
            }),
        )
    }

    /// The addresses of the bus the mesh moved onto, once the move is done:
    /// what a new node's token and a person's context name from then on.
    pub async fn moved_bus_urls(&self) -> Result<Option<Vec<String>>, StoreError> {
        Ok(self
            .bus_move()
            .await?
            .filter(|m| m.moved_at.is_some())
            .map(|m| m.to_urls))
    }

    /// The controller drained the old bus and moves itself: from now on a
    /// term connects to the move's addresses. Once.
    pub async fn bus_moved(&self) -> Result<(), StoreError> {
        let at = crate::now_ms();
        with_pool!(self, |pool| {
            sqlx::query("UPDATE bus_moves SET moved_at = $1 WHERE id = 1 AND moved_at IS NULL")
                .bind(at)
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    /// Records the old bus retired (its users removed); only once the
    /// controller moved, and only the first time.
    pub async fn bus_retired(&self) -> Result<(), StoreError> {
        let at = crate::now_ms();
        with_pool!(self, |pool| {
            sqlx::query(
                "UPDATE bus_moves SET retired_at = $1 \
                 WHERE id = 1 AND moved_at IS NOT NULL AND retired_at IS NULL",
            )
            .bind(at)
            .execute(pool)
            .await?;
            Ok(())
        })
    }
}

/// A move of the mesh onto another bus, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusMove {
    pub to_urls: Vec<String>,
    pub confirmed_at: crate::Millis,
    /// When the controller moved itself; none while it drains the old bus.
    pub moved_at: Option<crate::Millis>,
    /// When the mesh's users on the old bus were removed; none while a
    /// node has not reported on the new one.
    pub retired_at: Option<crate::Millis>,
}

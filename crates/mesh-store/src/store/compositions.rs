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
        with_pool!(self, |pool| {
            sqlx::query(
                "INSERT INTO composition_live (id, records_revision, live_at) VALUES (1, $1, $2) \
                 ON CONFLICT (id) DO UPDATE \
                 SET records_revision = excluded.records_revision, live_at = excluded.live_at \
                 WHERE composition_live.records_revision < excluded.records_revision",
            )
            .bind(revision)
            .bind(at)
            .execute(pool)
            .await?;
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

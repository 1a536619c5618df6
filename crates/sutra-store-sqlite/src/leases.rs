//! Lease rows (SPEC §6). The engine elects no leaders on the embedded store — every process on
//! it leads every role — so `sutra serve` never takes these leases; they are here so that the
//! conformance suite holds both stores to one contract, and `sutra leases` reads the same table
//! on either.
//!
//! The acquire is one upsert, atomic under SQLite's single writer: it inserts the role's first
//! row, or updates the row only when the lease is the holder's own or has expired — otherwise it
//! matches nothing and returns no row.

use jiff::SignedDuration;
use sutra_store::{Lease, Leases, Result};
use sutra_store_sql::rows::LeaseRow;

use crate::SqliteStore;
use crate::codec::{db, duration_micros, micros, now};

#[async_trait::async_trait]
impl Leases for SqliteStore {
    /// A SQLite file belongs to one `sutra serve`; a second process on the same file leads every
    /// role too (SPEC §6), kept correct by the claims alone.
    fn shared_by_replicas(&self) -> bool {
        false
    }

    async fn acquire_lease(
        &self,
        role: &str,
        holder: &str,
        ttl: SignedDuration,
    ) -> Result<Option<Lease>> {
        let now = micros(now());
        let expires_at = now.saturating_add(duration_micros(ttl).max(0));
        let row: Option<LeaseRow> = sqlx::query_as(
            "INSERT INTO leases (role, holder, expires_at, epoch) VALUES (?1, ?2, ?3, 1)
             ON CONFLICT (role) DO UPDATE SET
                 epoch = leases.epoch
                     + (CASE WHEN leases.holder = excluded.holder THEN 0 ELSE 1 END),
                 holder = excluded.holder,
                 expires_at = excluded.expires_at
             WHERE leases.holder = excluded.holder OR leases.expires_at <= ?4
             RETURNING role, holder, expires_at, epoch",
        )
        .bind(role)
        .bind(holder)
        .bind(expires_at)
        .bind(now)
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?;
        row.map(LeaseRow::decode).transpose()
    }

    async fn release_lease(&self, role: &str, holder: &str) -> Result<()> {
        sqlx::query(
            "UPDATE leases SET expires_at = MIN(expires_at, ?3) WHERE role = ?1 AND holder = ?2",
        )
        .bind(role)
        .bind(holder)
        .bind(micros(now()))
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    async fn leases(&self) -> Result<Vec<Lease>> {
        let rows: Vec<LeaseRow> =
            sqlx::query_as("SELECT role, holder, expires_at, epoch FROM leases ORDER BY role")
                .fetch_all(&self.pool)
                .await
                .map_err(db)?;
        rows.into_iter().map(LeaseRow::decode).collect()
    }
}

//! Lease rows (SPEC §6). The engine elects no leaders on the embedded store — every process on
//! it leads every role (see [`sutra_store_sql::Backend::shared_by_replicas`] for [`crate::Sqlite`])
//! — so `sutra serve` never takes these leases; they are here so that the conformance suite holds
//! both stores to one contract, and `sutra leases` reads the same table on either.
//!
//! The acquire is one upsert, atomic under SQLite's single writer: it inserts the role's first
//! row, or updates the row only when the lease is the holder's own or has expired — otherwise it
//! matches nothing and returns no row.

use sutra_store::Result;
use sutra_store_sql::rows::LeaseRow;
use sutra_store_sql::{LeaseStatements, NewLease};

use crate::codec::{db, duration_micros, micros};
use crate::statements::Session;

impl LeaseStatements for Session {
    async fn acquire_lease(&mut self, lease: &NewLease<'_>) -> Result<Option<LeaseRow>> {
        let now = micros(self.now());
        let expires_at = now.saturating_add(duration_micros(lease.ttl).max(0));
        sqlx::query_as(
            "INSERT INTO leases (role, holder, expires_at, epoch) VALUES (?1, ?2, ?3, 1)
             ON CONFLICT (role) DO UPDATE SET
                 epoch = leases.epoch
                     + (CASE WHEN leases.holder = excluded.holder THEN 0 ELSE 1 END),
                 holder = excluded.holder,
                 expires_at = excluded.expires_at
             WHERE leases.holder = excluded.holder OR leases.expires_at <= ?4
             RETURNING role, holder, expires_at, epoch",
        )
        .bind(lease.role)
        .bind(lease.holder)
        .bind(expires_at)
        .bind(now)
        .fetch_optional(self.connection().await?)
        .await
        .map_err(db)
    }

    async fn release_lease(&mut self, role: &str, holder: &str) -> Result<()> {
        let query = sqlx::query(
            "UPDATE leases SET expires_at = MIN(expires_at, ?3) WHERE role = ?1 AND holder = ?2",
        )
        .bind(role)
        .bind(holder)
        .bind(micros(self.now()));
        self.execute(query).await.map(drop)
    }

    async fn leases(&mut self) -> Result<Vec<LeaseRow>> {
        sqlx::query_as("SELECT role, holder, expires_at, epoch FROM leases ORDER BY role")
            .fetch_all(self.connection().await?)
            .await
            .map_err(db)
    }
}

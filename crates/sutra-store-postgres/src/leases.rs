//! Lease rows (SPEC §6): leader election for the singleton roles of a replica fleet, in the
//! fleet's own database, by the database's clock — a replica's clock never decides whether a
//! lease expired.
//!
//! The acquire is one upsert: it inserts the role's first row, or — holding the row's lock, and
//! judging the row's latest version under READ COMMITTED — updates it only when the lease is the
//! holder's own or has expired; otherwise it matches nothing and returns no row. Two contenders
//! for a free lease are ordered by that row lock, and the second finds the first's live lease.
//! Every statement runs in the system scope: leases are the fleet's, not a tenant's (migration
//! 0003).

use jiff::SignedDuration;
use sutra_store::{Lease, Leases, Result};
use sutra_store_sql::rows::LeaseRow;
use sutra_store_sql::{Backend, Scope, Statements};

use crate::PostgresStore;
use crate::codec::{age, db};

#[async_trait::async_trait]
impl Leases for PostgresStore {
    /// The one database of a fleet of replicas: its singleton roles are led by one replica at a
    /// time.
    fn shared_by_replicas(&self) -> bool {
        true
    }

    async fn acquire_lease(
        &self,
        role: &str,
        holder: &str,
        ttl: SignedDuration,
    ) -> Result<Option<Lease>> {
        let mut tx = self.begin(Scope::System).await?;
        let row: Option<LeaseRow> = sqlx::query_as(
            "INSERT INTO leases (role, holder, expires_at, epoch)
             VALUES ($1, $2, sutra_after($3), 1)
             ON CONFLICT (role) DO UPDATE SET
                 epoch = leases.epoch + CASE WHEN leases.holder = EXCLUDED.holder THEN 0 ELSE 1 END,
                 holder = EXCLUDED.holder,
                 expires_at = EXCLUDED.expires_at
             WHERE leases.holder = EXCLUDED.holder OR leases.expires_at <= sutra_now()
             RETURNING role, holder, expires_at, epoch",
        )
        .bind(role)
        .bind(holder)
        .bind(age(ttl))
        .fetch_optional(tx.connection())
        .await
        .map_err(db)?;
        tx.commit().await?;
        row.map(LeaseRow::decode).transpose()
    }

    async fn release_lease(&self, role: &str, holder: &str) -> Result<()> {
        let mut tx = self.begin(Scope::System).await?;
        sqlx::query(
            "UPDATE leases SET expires_at = LEAST(expires_at, sutra_now())
             WHERE role = $1 AND holder = $2",
        )
        .bind(role)
        .bind(holder)
        .execute(tx.connection())
        .await
        .map_err(db)?;
        tx.commit().await
    }

    async fn leases(&self) -> Result<Vec<Lease>> {
        let mut tx = self.begin(Scope::System).await?;
        let rows: Vec<LeaseRow> =
            sqlx::query_as("SELECT role, holder, expires_at, epoch FROM leases ORDER BY role")
                .fetch_all(tx.connection())
                .await
                .map_err(db)?;
        tx.commit().await?;
        rows.into_iter().map(LeaseRow::decode).collect()
    }
}

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

use sutra_store::Result;
use sutra_store_sql::rows::LeaseRow;
use sutra_store_sql::{LeaseStatements, NewLease};

use crate::codec::{age, db};
use crate::statements::Scoped;

impl LeaseStatements for Scoped {
    async fn acquire_lease(&mut self, lease: &NewLease<'_>) -> Result<Option<LeaseRow>> {
        sqlx::query_as(
            "INSERT INTO leases (role, holder, expires_at, epoch)
             VALUES ($1, $2, sutra_after($3), 1)
             ON CONFLICT (role) DO UPDATE SET
                 epoch = leases.epoch + CASE WHEN leases.holder = EXCLUDED.holder THEN 0 ELSE 1 END,
                 holder = EXCLUDED.holder,
                 expires_at = EXCLUDED.expires_at
             WHERE leases.holder = EXCLUDED.holder OR leases.expires_at <= sutra_now()
             RETURNING role, holder, expires_at, epoch",
        )
        .bind(lease.role)
        .bind(lease.holder)
        .bind(age(lease.ttl))
        .fetch_optional(self.connection())
        .await
        .map_err(db)
    }

    async fn release_lease(&mut self, role: &str, holder: &str) -> Result<()> {
        let query = sqlx::query(
            "UPDATE leases SET expires_at = LEAST(expires_at, sutra_now())
             WHERE role = $1 AND holder = $2",
        )
        .bind(role)
        .bind(holder);
        self.execute(query).await.map(drop)
    }

    async fn leases(&mut self) -> Result<Vec<LeaseRow>> {
        sqlx::query_as("SELECT role, holder, expires_at, epoch FROM leases ORDER BY role")
            .fetch_all(self.connection())
            .await
            .map_err(db)
    }
}

//! The claim (SPEC §5.2) on SQLite: claim, release and sweep are each one conditional statement,
//! atomic on its own under SQLite's single writer — no transaction around them, and nothing to
//! wait for but the write lock. Claims are compared against the process's clock; every process
//! on one file runs on one machine's.

use jiff::SignedDuration;
use sutra_store::{ClaimToken, Result};
use sutra_store_sql::rows::{ClaimedRow, SnapshotTextRow, SweptRow};
use sutra_store_sql::{ClaimStatements, Mark, NewClaim};

use crate::codec::{db, micros, micros_before};
use crate::statements::Session;

impl ClaimStatements for Session {
    async fn claim(&mut self, claim: &NewClaim<'_>) -> Result<Option<ClaimedRow>> {
        let now = self.now();
        sqlx::query_as(
            "UPDATE instances SET owner = ?1, claimed_at = ?2, fence = fence + 1
             WHERE tenant = ?3 AND id = ?4
               AND (owner IS NULL OR owner = ?1 OR claimed_at < ?5)
             RETURNING fence, snapshot, held_by, unreadable",
        )
        .bind(&claim.owner.0)
        .bind(micros(now))
        .bind(claim.tenant)
        .bind(claim.instance)
        .bind(micros_before(now, claim.timeout))
        .fetch_optional(self.connection().await?)
        .await
        .map_err(db)
    }

    /// Inside the write transaction, whose lock is the row lock: the read is the claim. Getting
    /// that lock waited for every other writer; an instance another session of this process held
    /// as this one began was waited for as a claim, and refuses as held, as PostgreSQL's claim
    /// would have at once ([`crate::holdings`]).
    async fn lock_claimable(&mut self, claim: &NewClaim<'_>) -> Result<Option<ClaimedRow>> {
        let now = self.write().await?.now();
        let key = (claim.tenant.to_owned(), claim.instance.to_owned());
        if self.held.held_by_another(&key) {
            return Ok(None);
        }
        let query = sqlx::query_as(
            "SELECT fence, snapshot, held_by, unreadable FROM instances
             WHERE tenant = ?2 AND id = ?3
               AND (owner IS NULL OR owner = ?1 OR claimed_at < ?4)",
        )
        .bind(&claim.owner.0)
        .bind(claim.tenant)
        .bind(claim.instance)
        .bind(micros_before(now, claim.timeout));
        let claimed: Option<ClaimedRow> = self.fetch_optional(query).await?;
        if claimed.is_some() {
            self.held.hold(key);
        }
        Ok(claimed)
    }

    async fn instance_exists(&mut self, tenant: &str, instance: &str) -> Result<bool> {
        let found: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM instances WHERE tenant = ?1 AND id = ?2")
                .bind(tenant)
                .bind(instance)
                .fetch_optional(self.connection().await?)
                .await
                .map_err(db)?;
        Ok(found.is_some())
    }

    async fn release(&mut self, tenant: &str, instance: &str, token: &ClaimToken) -> Result<()> {
        let query = sqlx::query(
            "UPDATE instances SET owner = NULL, claimed_at = NULL
             WHERE tenant = ?1 AND id = ?2 AND owner = ?3 AND fence = ?4",
        );
        let query = query
            .bind(tenant)
            .bind(instance)
            .bind(&token.owner.0)
            .bind(token.fence);
        self.execute(query).await.map(drop)
    }

    async fn sweep(&mut self, claim_timeout: SignedDuration) -> Result<Vec<SweptRow>> {
        let stale = micros_before(self.now(), claim_timeout);
        sqlx::query_as(
            "UPDATE instances SET owner = NULL, claimed_at = NULL, recoveries = recoveries + 1
             WHERE claimed_at < ?1
             RETURNING tenant, id, recoveries",
        )
        .bind(stale)
        .fetch_all(self.connection().await?)
        .await
        .map_err(db)
    }

    /// In the write transaction, whose lock is the row lock.
    async fn lock_snapshot(
        &mut self,
        tenant: &str,
        instance: &str,
    ) -> Result<Option<SnapshotTextRow>> {
        self.write().await?;
        let query = sqlx::query_as(
            "SELECT snapshot, unreadable FROM instances WHERE tenant = ?1 AND id = ?2",
        );
        self.fetch_optional(query.bind(tenant).bind(instance)).await
    }

    async fn set_mark(&mut self, tenant: &str, instance: &str, mark: &Mark<'_>) -> Result<()> {
        let query = sqlx::query(
            "UPDATE instances SET status = ?1, unreadable = ?2, updated_at = ?3
             WHERE tenant = ?4 AND id = ?5",
        );
        let query = query
            .bind(mark.status.as_str())
            .bind(mark.unreadable)
            .bind(micros(mark.now))
            .bind(tenant)
            .bind(instance);
        self.write().await?.execute(query).await.map(drop)
    }
}

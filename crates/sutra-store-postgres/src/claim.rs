//! The claim (SPEC §5.2) on PostgreSQL: claim, release and sweep are each one conditional
//! statement in a transaction of their own, compared against the database's clock, so that
//! replicas never compare claims across clocks.

use jiff::SignedDuration;
use sutra_store::{ClaimToken, Error, Result};
use sutra_store_sql::rows::{ClaimedRow, SweptRow};
use sutra_store_sql::{ClaimStatements, NewClaim, params};

use crate::codec::{age, db, is_lock_timeout};
use crate::statements::Scoped;

impl ClaimStatements for Scoped {
    async fn claim(&mut self, claim: &NewClaim<'_>) -> Result<Option<ClaimedRow>> {
        sqlx::query_as(
            "UPDATE instances SET owner = $1, claimed_at = sutra_now(), fence = fence + 1
             WHERE tenant = $2 AND id = $3
               AND (owner IS NULL OR owner = $1 OR claimed_at < sutra_now() - $4)
             RETURNING fence, snapshot",
        )
        .bind(&claim.owner.0)
        .bind(claim.tenant)
        .bind(claim.instance)
        .bind(age(claim.timeout))
        .fetch_optional(self.connection())
        .await
        .map_err(|e| {
            // The row stayed locked by a transaction that is neither committing nor dying:
            // held, as far as any claimant can tell, and retry-safe like any refusal.
            if is_lock_timeout(&e) {
                Error::ClaimHeld
            } else {
                db(e)
            }
        })
    }

    async fn instance_exists(&mut self, tenant: &str, instance: &str) -> Result<bool> {
        let exists: Option<i32> =
            sqlx::query_scalar("SELECT 1 FROM instances WHERE tenant = $1 AND id = $2")
                .bind(tenant)
                .bind(instance)
                .fetch_optional(self.connection())
                .await
                .map_err(db)?;
        Ok(exists.is_some())
    }

    async fn release(&mut self, tenant: &str, instance: &str, token: &ClaimToken) -> Result<()> {
        let query = sqlx::query(
            "UPDATE instances SET owner = NULL, claimed_at = NULL
             WHERE tenant = $1 AND id = $2 AND owner = $3 AND fence = $4",
        );
        let query = params::release(query, tenant, instance, token);
        self.execute(query).await.map(drop)
    }

    async fn sweep(&mut self, claim_timeout: SignedDuration) -> Result<Vec<SweptRow>> {
        sqlx::query_as(
            "UPDATE instances SET owner = NULL, claimed_at = NULL, recoveries = recoveries + 1
             WHERE claimed_at < sutra_now() - $1
             RETURNING tenant, id, recoveries",
        )
        .bind(age(claim_timeout))
        .fetch_all(self.connection())
        .await
        .map_err(db)
    }
}

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
        // The row lock is taken `NOWAIT` first: a step in flight elsewhere holds the row until
        // its commit, and a plain `UPDATE` would queue behind it, on that step's timescale (up
        // to `lock_timeout`). The claim refuses instead (seed 000): `NOWAIT` fails at once with
        // `lock_not_available`, the same SQLSTATE as a lock timeout, answered as held below.
        // `NO KEY UPDATE`, so that a transaction merely inserting a row that references the
        // instance (a key-share lock) is not mistaken for a holder.
        sqlx::query_as(
            "WITH locked AS (
                 SELECT id FROM instances WHERE tenant = $2 AND id = $3
                 FOR NO KEY UPDATE NOWAIT)
             UPDATE instances SET owner = $1, claimed_at = sutra_now(), fence = fence + 1
             FROM locked
             WHERE instances.tenant = $2 AND instances.id = locked.id
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
            // Another transaction holds the row (a step committing, or one frozen mid-commit):
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

//! The claim (SPEC §5.2) on PostgreSQL: claim, release and sweep are each one conditional
//! statement in a transaction of their own, compared against the database's clock, so that
//! replicas never compare claims across clocks.

use jiff::SignedDuration;
use sutra_store::{ClaimToken, Claimed, Claims, Error, Owner, Result, SweepOutcome};
use sutra_store_sql::rows::{ClaimedRow, SweptRow};
use sutra_store_sql::{Backend, Scope, Statements, params};

use crate::PostgresStore;
use crate::codec::{age, db, is_lock_timeout};

#[async_trait::async_trait]
impl Claims for PostgresStore {
    async fn claim(
        &self,
        tenant: &str,
        instance: &str,
        owner: &Owner,
        claim_timeout: SignedDuration,
    ) -> Result<Claimed> {
        let mut tx = self.begin(Scope::Tenant(tenant)).await?;
        let claimed: Option<ClaimedRow> = sqlx::query_as(
            "UPDATE instances SET owner = $1, claimed_at = sutra_now(), fence = fence + 1
             WHERE tenant = $2 AND id = $3
               AND (owner IS NULL OR owner = $1 OR claimed_at < sutra_now() - $4)
             RETURNING fence, snapshot",
        )
        .bind(&owner.0)
        .bind(tenant)
        .bind(instance)
        .bind(age(claim_timeout))
        .fetch_optional(tx.connection())
        .await
        .map_err(|e| {
            // The row stayed locked by a transaction that is neither committing nor dying:
            // held, as far as any claimant can tell, and retry-safe like any refusal.
            if is_lock_timeout(&e) {
                Error::ClaimHeld
            } else {
                db(e)
            }
        })?;
        if let Some(row) = claimed {
            tx.commit().await?;
            return row.decode(owner);
        }
        // Nothing was written: dropping the transaction rolls it back.
        let exists: Option<i32> =
            sqlx::query_scalar("SELECT 1 FROM instances WHERE tenant = $1 AND id = $2")
                .bind(tenant)
                .bind(instance)
                .fetch_optional(tx.connection())
                .await
                .map_err(db)?;
        match exists {
            Some(_) => Err(Error::ClaimHeld),
            None => Err(Error::InstanceNotFound(instance.to_owned())),
        }
    }

    async fn release(&self, tenant: &str, instance: &str, token: &ClaimToken) -> Result<()> {
        let mut tx = self.begin(Scope::Tenant(tenant)).await?;
        let query = sqlx::query(
            "UPDATE instances SET owner = NULL, claimed_at = NULL
             WHERE tenant = $1 AND id = $2 AND owner = $3 AND fence = $4",
        );
        let query = params::release(query, tenant, instance, token);
        tx.execute(query).await?;
        tx.commit().await
    }

    async fn sweep(
        &self,
        claim_timeout: SignedDuration,
        max_recoveries: u32,
    ) -> Result<SweepOutcome> {
        let mut tx = self.begin(Scope::System).await?;
        let swept: Vec<SweptRow> = sqlx::query_as(
            "UPDATE instances SET owner = NULL, claimed_at = NULL, recoveries = recoveries + 1
             WHERE claimed_at < sutra_now() - $1
             RETURNING tenant, id, recoveries",
        )
        .bind(age(claim_timeout))
        .fetch_all(tx.connection())
        .await
        .map_err(db)?;
        tx.commit().await?;
        Ok(SweptRow::outcome(swept, max_recoveries))
    }
}

//! The claim (SPEC §5.2) on SQLite: claim, release and sweep are each one conditional statement,
//! atomic on its own under SQLite's single writer — no transaction around them, and nothing to
//! wait for but the write lock. Claims are compared against the process's clock; every process
//! on one file runs on one machine's.

use jiff::SignedDuration;
use sutra_store::{ClaimToken, Claimed, Claims, Error, Owner, Result, SweepOutcome};
use sutra_store_sql::params;
use sutra_store_sql::rows::{ClaimedRow, SweptRow};

use crate::SqliteStore;
use crate::codec::{db, micros, micros_before, now};

#[async_trait::async_trait]
impl Claims for SqliteStore {
    async fn claim(
        &self,
        tenant: &str,
        instance: &str,
        owner: &Owner,
        claim_timeout: SignedDuration,
    ) -> Result<Claimed> {
        let now = now();
        let claimed: Option<ClaimedRow> = sqlx::query_as(
            "UPDATE instances SET owner = ?1, claimed_at = ?2, fence = fence + 1
             WHERE tenant = ?3 AND id = ?4
               AND (owner IS NULL OR owner = ?1 OR claimed_at < ?5)
             RETURNING fence, snapshot",
        )
        .bind(&owner.0)
        .bind(micros(now))
        .bind(tenant)
        .bind(instance)
        .bind(micros_before(now, claim_timeout))
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?;
        match claimed {
            Some(row) => row.decode(owner),
            None if self.instance_exists(tenant, instance).await? => Err(Error::ClaimHeld),
            None => Err(Error::InstanceNotFound(instance.to_owned())),
        }
    }

    async fn release(&self, tenant: &str, instance: &str, token: &ClaimToken) -> Result<()> {
        let query = sqlx::query(
            "UPDATE instances SET owner = NULL, claimed_at = NULL
             WHERE tenant = ?1 AND id = ?2 AND owner = ?3 AND fence = ?4",
        );
        params::release(query, tenant, instance, token)
            .execute(&self.pool)
            .await
            .map_err(db)?;
        Ok(())
    }

    async fn sweep(
        &self,
        claim_timeout: SignedDuration,
        max_recoveries: u32,
    ) -> Result<SweepOutcome> {
        let swept: Vec<SweptRow> = sqlx::query_as(
            "UPDATE instances SET owner = NULL, claimed_at = NULL, recoveries = recoveries + 1
             WHERE claimed_at < ?1
             RETURNING tenant, id, recoveries",
        )
        .bind(micros_before(now(), claim_timeout))
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        Ok(SweptRow::outcome(swept, max_recoveries))
    }
}

impl SqliteStore {
    async fn instance_exists(&self, tenant: &str, id: &str) -> Result<bool> {
        let found: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM instances WHERE tenant = ?1 AND id = ?2")
                .bind(tenant)
                .bind(id)
                .fetch_optional(&self.pool)
                .await
                .map_err(db)?;
        Ok(found.is_some())
    }
}

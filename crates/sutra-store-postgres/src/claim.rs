//! The claim (SPEC §5.2) on PostgreSQL: claim, release and sweep are each one conditional
//! statement in a transaction of their own, and a group member's claim (`lock_claimable`) one in
//! its group's; all compared against the database's clock, so that replicas never compare claims
//! across clocks.

use std::sync::LazyLock;

use jiff::SignedDuration;
use serde::Serialize;
use sqlx::types::Json;
use sutra_store::{ClaimAhead, ClaimToken, Owner, Result};
use sutra_store_sql::rows::{AheadRow, ClaimedRow, CompletedRow, SnapshotTextRow, SweptRow};
use sutra_store_sql::{ClaimStatements, Mark, NewClaim};

use crate::codec::{age, db, micros};
use crate::statements::Scoped;
use crate::test_switches;

impl Scoped {
    /// Runs a claim statement, whose parameters are the claim's owner, tenant, instance and
    /// timeout, in that order.
    async fn claimed_row(
        &mut self,
        sql: &'static str,
        claim: &NewClaim<'_>,
    ) -> Result<Option<ClaimedRow>> {
        sqlx::query_as(sql)
            .bind(&claim.owner.0)
            .bind(claim.tenant)
            .bind(claim.instance)
            .bind(age(claim.timeout))
            .fetch_optional(self.connection())
            .await
            .map_err(db)
    }
}

impl ClaimStatements for Scoped {
    async fn claim(&mut self, claim: &NewClaim<'_>) -> Result<Option<ClaimedRow>> {
        // The row lock is taken first, skipping a row another transaction holds: a step in
        // flight elsewhere holds the row until its commit, and a plain `UPDATE` would queue
        // behind it, on that step's timescale (up to `lock_timeout`). The claim refuses instead
        // (seed 000): a skipped row updates nothing, and the script answers held once it sees
        // the row exists. `SKIP LOCKED` rather than `NOWAIT`, so that a refusal is not an error
        // that would abort a group's transaction (decision 0024). `NO KEY UPDATE`, so that a
        // transaction merely inserting a row that references the instance (a key-share lock)
        // is not mistaken for a holder.
        let sql = "WITH locked AS (
                 SELECT id FROM instances WHERE tenant = $2 AND id = $3
                 FOR NO KEY UPDATE SKIP LOCKED)
             UPDATE instances SET owner = $1, claimed_at = sutra_now(), fence = fence + 1
             FROM locked
             WHERE instances.tenant = $2 AND instances.id = locked.id
               AND (owner IS NULL OR owner = $1 OR claimed_at < sutra_now() - $4)
             RETURNING fence, snapshot, held_by, unreadable";
        self.claimed_row(sql, claim).await
    }

    /// The row is taken as the durable claim's is, without writing it: the step's own commit
    /// grows the fence, in this same transaction.
    async fn lock_claimable(&mut self, claim: &NewClaim<'_>) -> Result<Option<ClaimedRow>> {
        static SQL: LazyLock<String> = LazyLock::new(|| {
            test_switches::lock_claimable(
                "SELECT fence, snapshot, held_by, unreadable FROM instances
                 WHERE tenant = $2 AND id = $3
                   AND (owner IS NULL OR owner = $1 OR claimed_at < sutra_now() - $4)
                 FOR NO KEY UPDATE SKIP LOCKED",
            )
        });
        self.claimed_row(SQL.as_str(), claim).await
    }

    /// One statement: the claim's row lock, then the task's completion only if the row was
    /// claimed — a refused claim leaves the task as it was. The task's update may wait for a
    /// poll retaking its expired lock, as `complete_locked` does; the claim never waits.
    async fn lock_claimable_completing(
        &mut self,
        claim: &NewClaim<'_>,
        task: &str,
        lock_token: &str,
    ) -> Result<(Option<ClaimedRow>, Option<CompletedRow>)> {
        #[derive(sqlx::FromRow)]
        struct Row {
            #[sqlx(flatten)]
            claimed: ClaimedRow,
            instance: Option<String>,
            park: Option<i64>,
        }
        let row: Option<Row> = sqlx::query_as(
            "WITH claimed AS (
                 SELECT fence, snapshot, held_by, unreadable FROM instances
                 WHERE tenant = $2 AND id = $3
                   AND (owner IS NULL OR owner = $1 OR claimed_at < sutra_now() - $4)
                 FOR NO KEY UPDATE SKIP LOCKED),
             completed AS (
                 UPDATE tasks SET state = 'completed', lock_token = NULL, locked_until = NULL,
                                  updated_at = sutra_now()
                 WHERE tenant = $2 AND id = $5 AND EXISTS (SELECT 1 FROM claimed)
                   AND state = 'locked' AND lock_token = $6 AND locked_until > sutra_now()
                 RETURNING instance, park)
             SELECT claimed.fence, claimed.snapshot, claimed.held_by, claimed.unreadable,
                    completed.instance, completed.park
             FROM claimed LEFT JOIN completed ON true",
        )
        .bind(&claim.owner.0)
        .bind(claim.tenant)
        .bind(claim.instance)
        .bind(age(claim.timeout))
        .bind(task)
        .bind(lock_token)
        .fetch_optional(self.connection())
        .await
        .map_err(db)?;
        Ok(match row {
            None => (None, None),
            Some(Row {
                claimed,
                instance: Some(instance),
                park: Some(park),
            }) => (Some(claimed), Some(CompletedRow { instance, park })),
            Some(Row { claimed, .. }) => (Some(claimed), None),
        })
    }

    /// One statement for a group's claims: the rows locked in id order, skipping those another
    /// transaction holds, the completions' tasks completed only under a claim taken, and a row
    /// per instance asked for, saying whether it exists (a skipped row's refusal: held).
    ///
    /// The claims asked for travel as one JSON array rather than as arrays of each column:
    /// PostgreSQL estimates `jsonb_to_recordset` at the same rows whatever it holds, so the
    /// statement keeps its generic plan. Bound as arrays, a custom plan for a group's two or three
    /// members always looked cheaper than the generic one for the ten an unknown array is assumed
    /// to hold, and the statement was planned anew at every call, at twice its execution's cost
    /// (docs/performance.md, "The claims' plan kept").
    async fn lock_claimables(
        &mut self,
        tenant: &str,
        owner: &Owner,
        timeout: SignedDuration,
        ahead: &[ClaimAhead<'_>],
    ) -> Result<Vec<AheadRow>> {
        static SQL: LazyLock<String> = LazyLock::new(|| {
            test_switches::lock_claimable(
                "WITH wanted AS (
                     SELECT * FROM jsonb_to_recordset($3) AS w(id text, task text, token text)),
                 claimed AS (
                     SELECT id, fence, snapshot, held_by, unreadable FROM instances
                     WHERE tenant = $2 AND id IN (SELECT id FROM wanted)
                       AND (owner IS NULL OR owner = $1 OR claimed_at < sutra_now() - $4)
                     ORDER BY id
                     FOR NO KEY UPDATE SKIP LOCKED),
                 completed AS (
                     UPDATE tasks SET state = 'completed', lock_token = NULL,
                                      locked_until = NULL, updated_at = sutra_now()
                     FROM wanted JOIN claimed ON claimed.id = wanted.id
                     WHERE tasks.tenant = $2 AND tasks.id = wanted.task
                       AND tasks.state = 'locked' AND tasks.lock_token = wanted.token
                       AND tasks.locked_until > sutra_now()
                     RETURNING tasks.instance, tasks.park)
                 SELECT wanted.id AS instance, claimed.fence, claimed.snapshot, claimed.held_by,
                        claimed.unreadable, completed.park,
                        claimed.id IS NOT NULL OR EXISTS (
                            SELECT 1 FROM instances
                            WHERE instances.tenant = $2 AND instances.id = wanted.id) AS present
                 FROM wanted
                 LEFT JOIN claimed ON claimed.id = wanted.id
                 LEFT JOIN completed ON completed.instance = wanted.id",
            )
        });
        let wanted: Vec<Wanted<'_>> = ahead.iter().map(Wanted::from).collect();
        sqlx::query_as(SQL.as_str())
            .bind(&owner.0)
            .bind(tenant)
            .bind(Json(wanted))
            .bind(age(timeout))
            .fetch_all(self.connection())
            .await
            .map_err(db)
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
        let query = query
            .bind(tenant)
            .bind(instance)
            .bind(&token.owner.0)
            .bind(token.fence);
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

    /// `snapshot::text`, so that the script decodes it as SQLite's is decoded.
    async fn lock_snapshot(
        &mut self,
        tenant: &str,
        instance: &str,
    ) -> Result<Option<SnapshotTextRow>> {
        sqlx::query_as(
            "SELECT snapshot::text AS snapshot, unreadable FROM instances
             WHERE tenant = $1 AND id = $2
             FOR NO KEY UPDATE",
        )
        .bind(tenant)
        .bind(instance)
        .fetch_optional(self.connection())
        .await
        .map_err(db)
    }

    async fn set_mark(&mut self, tenant: &str, instance: &str, mark: &Mark<'_>) -> Result<()> {
        let query = sqlx::query(
            "UPDATE instances SET status = $1, unreadable = $2, updated_at = $3
             WHERE tenant = $4 AND id = $5",
        );
        let query = query
            .bind(mark.status.as_str())
            .bind(mark.unreadable)
            .bind(micros(mark.now))
            .bind(tenant)
            .bind(instance);
        self.execute(query).await.map(drop)
    }
}

/// One claim asked for, as `lock_claimables` binds it: an element of its JSON array.
#[derive(Serialize)]
struct Wanted<'a> {
    id: &'a str,
    task: Option<&'a str>,
    token: Option<&'a str>,
}

impl<'a> From<&ClaimAhead<'a>> for Wanted<'a> {
    fn from(claim: &ClaimAhead<'a>) -> Self {
        let (task, token) = claim.completing.unzip();
        Wanted {
            id: claim.instance,
            task,
            token,
        }
    }
}

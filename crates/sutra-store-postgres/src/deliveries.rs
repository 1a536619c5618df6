//! Deliveries (SPEC §5.6) on PostgreSQL: each operation one statement in a transaction of its
//! own, due times against the database's clock. Inserting one is
//! [`sutra_store_sql::Statements::insert_delivery`], which steps and the task scripts run too
//! (see [`crate::statements`]).
//!
//! A batch is picked `FOR UPDATE SKIP LOCKED` and marked in the same statement: a row another
//! dispatcher is marking right now is skipped, not waited for, and one it marked and committed
//! is no longer due, so two dispatchers (two replicas, or a replica and the one that leads
//! `timers`) never hand out one row at once.

use jiff::{SignedDuration, Timestamp};
use sutra_store::{DeliveryId, InstanceKey, Result};
use sutra_store_sql::rows::DeliveryRow;
use sutra_store_sql::{ANCESTORS_MAX, DeliveryStatements};

use crate::codec::{db, duration_micros, micros};
use crate::statements::Scoped;

impl DeliveryStatements for Scoped {
    async fn due_deliveries(
        &mut self,
        limit: u32,
        redeliver_after: SignedDuration,
    ) -> Result<Vec<DeliveryRow>> {
        // The CTE runs once (a locking CTE is never inlined) and keeps the time each row came
        // due, which `RETURNING` alone would report as the new one; the ORDER BY on the outside
        // gives the batch its order.
        sqlx::query_as(
            "WITH picked AS (
                 SELECT id, due_at FROM deliveries
                 WHERE due_at <= sutra_now()
                 ORDER BY due_at, id
                 LIMIT $1
                 FOR UPDATE SKIP LOCKED),
             marked AS (
                 UPDATE deliveries
                 SET dispatches = dispatches + 1, due_at = sutra_after($2)
                 FROM picked WHERE deliveries.id = picked.id
                 RETURNING deliveries.id, tenant, instance, park, kind, payload, picked.due_at,
                           attempts, dispatches, failures, last_error)
             SELECT * FROM marked ORDER BY due_at, id",
        )
        .bind(i64::from(limit))
        .bind(duration_micros(redeliver_after))
        .fetch_all(self.connection())
        .await
        .map_err(db)
    }

    async fn delivery(&mut self, id: DeliveryId) -> Result<Option<DeliveryRow>> {
        sqlx::query_as(
            "SELECT id, tenant, instance, park, kind, payload, due_at, attempts, dispatches,
                    failures, last_error
             FROM deliveries WHERE id = $1",
        )
        .bind(id.0)
        .fetch_optional(self.connection())
        .await
        .map_err(db)
    }

    async fn defer(&mut self, id: DeliveryId, until: Timestamp) -> Result<()> {
        let query = sqlx::query(
            "UPDATE deliveries SET due_at = $2, attempts = attempts + 1, dispatches = 0
             WHERE id = $1",
        )
        .bind(id.0)
        .bind(micros(until));
        self.execute(query).await.map(drop)
    }

    async fn fail_attempt(&mut self, id: DeliveryId, until: Timestamp, error: &str) -> Result<()> {
        let query = sqlx::query(
            "UPDATE deliveries
             SET due_at = $2, failures = failures + 1, last_error = $3, dispatches = 0
             WHERE id = $1",
        )
        .bind(id.0)
        .bind(micros(until))
        .bind(error);
        self.execute(query).await.map(drop)
    }

    async fn discard(&mut self, id: DeliveryId) -> Result<()> {
        let query = sqlx::query("DELETE FROM deliveries WHERE id = $1").bind(id.0);
        self.execute(query).await.map(drop)
    }

    async fn next_due(&mut self) -> Result<Option<i64>> {
        sqlx::query_scalar("SELECT MIN(due_at) FROM deliveries")
            .fetch_one(self.connection())
            .await
            .map_err(db)
    }

    async fn cancelled_ancestors(
        &mut self,
        instances: &[InstanceKey],
    ) -> Result<Vec<(String, String, String)>> {
        let (tenants, ids): (Vec<&str>, Vec<&str>) = instances
            .iter()
            .map(|key| (key.tenant.as_str(), key.id.as_str()))
            .unzip();
        let query = sqlx::query_as(
            "WITH RECURSIVE up (tenant, seed, id, parent, status, depth) AS (
                 SELECT i.tenant, i.id, i.id, i.parent, i.status, 0
                 FROM unnest($1::text[], $2::text[]) AS s (tenant, id)
                 JOIN instances i ON i.tenant = s.tenant AND i.id = s.id
                 UNION ALL
                 SELECT up.tenant, up.seed, i.id, i.parent, i.status, up.depth + 1
                 FROM instances i JOIN up ON i.tenant = up.tenant AND i.id = up.parent
                 WHERE up.depth < $3 AND (up.depth = 0 OR up.status <> 'cancelled')
             )
             SELECT tenant, seed, id FROM up WHERE depth > 0 AND status = 'cancelled'",
        )
        .bind(tenants)
        .bind(ids)
        .bind(ANCESTORS_MAX);
        query.fetch_all(self.connection()).await.map_err(db)
    }
}

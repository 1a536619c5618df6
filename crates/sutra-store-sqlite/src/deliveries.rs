//! Deliveries (SPEC §5.6) on SQLite: each operation one statement alone but the hand-out, due
//! times against the process's clock. Inserting one is [`sutra_store_sql::Statements::insert_delivery`], which
//! steps and the task scripts run too (see [`crate::statements`]).
//!
//! PostgreSQL picks a batch to hand out `FOR UPDATE SKIP LOCKED`; here SQLite's single writer
//! plays that role: the batch is read and marked in one `BEGIN IMMEDIATE` transaction, so two
//! dispatchers (two processes on one file) are serialized and the second finds the first's rows
//! no longer due.

use jiff::{SignedDuration, Timestamp};
use sqlx::types::Json;
use sutra_store::{DeliveryId, InstanceKey, Result};
use sutra_store_sql::rows::DeliveryRow;
use sutra_store_sql::{ANCESTORS_MAX, DeliveryStatements};

use crate::codec::{db, later, micros};
use crate::statements::Session;

impl DeliveryStatements for Session {
    /// Two statements under the one write lock, because SQLite's `RETURNING` reports only the
    /// new due time and in no particular order: the batch as it came due (its dispatches as
    /// the mark leaves them), then the mark on exactly those rows.
    async fn due_deliveries(
        &mut self,
        limit: u32,
        redeliver_after: SignedDuration,
    ) -> Result<Vec<DeliveryRow>> {
        let tx = self.write().await?;
        let now = tx.now();
        let due: Vec<DeliveryRow> = sqlx::query_as(
            "SELECT id, tenant, instance, park, kind, payload, due_at, attempts,
                    dispatches + 1 AS dispatches, failures, last_error
             FROM deliveries WHERE due_at <= ?1 ORDER BY due_at, id LIMIT ?2",
        )
        .bind(micros(now))
        .bind(limit)
        .fetch_all(tx.connection())
        .await
        .map_err(db)?;
        let ids: Vec<i64> = due.iter().map(DeliveryRow::id).collect();
        let mark = sqlx::query(
            "UPDATE deliveries SET dispatches = dispatches + 1, due_at = ?2
             WHERE id IN (SELECT value FROM json_each(?1))",
        )
        .bind(Json(ids))
        .bind(micros(later(now, redeliver_after)?));
        tx.execute(mark).await?;
        Ok(due)
    }

    async fn delivery(&mut self, id: DeliveryId) -> Result<Option<DeliveryRow>> {
        sqlx::query_as(
            "SELECT id, tenant, instance, park, kind, payload, due_at, attempts, dispatches,
                    failures, last_error
             FROM deliveries WHERE id = ?1",
        )
        .bind(id.0)
        .fetch_optional(self.connection().await?)
        .await
        .map_err(db)
    }

    async fn defer(&mut self, id: DeliveryId, until: Timestamp) -> Result<()> {
        let query = sqlx::query(
            "UPDATE deliveries SET due_at = ?2, attempts = attempts + 1, dispatches = 0
             WHERE id = ?1",
        )
        .bind(id.0)
        .bind(micros(until));
        self.execute(query).await.map(drop)
    }

    async fn fail_attempt(&mut self, id: DeliveryId, until: Timestamp, error: &str) -> Result<()> {
        let query = sqlx::query(
            "UPDATE deliveries
             SET due_at = ?2, failures = failures + 1, last_error = ?3, dispatches = 0
             WHERE id = ?1",
        )
        .bind(id.0)
        .bind(micros(until))
        .bind(error);
        self.execute(query).await.map(drop)
    }

    async fn discard(&mut self, id: DeliveryId) -> Result<()> {
        let query = sqlx::query("DELETE FROM deliveries WHERE id = ?1").bind(id.0);
        self.execute(query).await.map(drop)
    }

    async fn next_due(&mut self) -> Result<Option<i64>> {
        sqlx::query_scalar("SELECT MIN(due_at) FROM deliveries")
            .fetch_one(self.connection().await?)
            .await
            .map_err(db)
    }

    async fn cancelled_ancestors(
        &mut self,
        instances: &[InstanceKey],
    ) -> Result<Vec<(String, String, String)>> {
        let seeds: Vec<[&str; 2]> = instances
            .iter()
            .map(|key| [key.tenant.as_str(), key.id.as_str()])
            .collect();
        let query = sqlx::query_as(
            "WITH RECURSIVE up (tenant, seed, id, parent, status, depth) AS (
                 SELECT i.tenant, i.id, i.id, i.parent, i.status, 0
                 FROM json_each(?1) AS s
                 JOIN instances i
                   ON i.tenant = json_extract(s.value, '$[0]') AND i.id = json_extract(s.value, '$[1]')
                 UNION ALL
                 SELECT up.tenant, up.seed, i.id, i.parent, i.status, up.depth + 1
                 FROM instances i JOIN up ON i.tenant = up.tenant AND i.id = up.parent
                 WHERE up.depth < ?2 AND (up.depth = 0 OR up.status <> 'cancelled')
             )
             SELECT tenant, seed, id FROM up WHERE depth > 0 AND status = 'cancelled'",
        )
        .bind(Json(seeds))
        .bind(ANCESTORS_MAX);
        query.fetch_all(self.connection().await?).await.map_err(db)
    }
}

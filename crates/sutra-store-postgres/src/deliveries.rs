//! Deliveries (SPEC §5.6) on PostgreSQL: each operation one statement in a transaction of its
//! own, due times against the database's clock. Inserting one is
//! [`sutra_store_sql::Statements::insert_delivery`], which steps and the task scripts run too
//! (see [`crate::statements`]).

use jiff::Timestamp;
use sutra_store::{DeliveryId, Result};
use sutra_store_sql::DeliveryStatements;
use sutra_store_sql::rows::DeliveryRow;

use crate::codec::{db, micros};
use crate::statements::Scoped;

impl DeliveryStatements for Scoped {
    async fn due_deliveries(&mut self, limit: u32) -> Result<Vec<DeliveryRow>> {
        sqlx::query_as(
            "SELECT id, tenant, instance, park, kind, payload, due_at, attempts FROM deliveries
             WHERE due_at <= sutra_now() ORDER BY due_at, id LIMIT $1",
        )
        .bind(i64::from(limit))
        .fetch_all(self.connection())
        .await
        .map_err(db)
    }

    async fn delivery(&mut self, id: DeliveryId) -> Result<Option<DeliveryRow>> {
        sqlx::query_as(
            "SELECT id, tenant, instance, park, kind, payload, due_at, attempts FROM deliveries
             WHERE id = $1",
        )
        .bind(id.0)
        .fetch_optional(self.connection())
        .await
        .map_err(db)
    }

    async fn defer(&mut self, id: DeliveryId, until: Timestamp) -> Result<()> {
        let query =
            sqlx::query("UPDATE deliveries SET due_at = $2, attempts = attempts + 1 WHERE id = $1")
                .bind(id.0)
                .bind(micros(until));
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
}

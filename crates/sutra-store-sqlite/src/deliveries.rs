//! Deliveries (SPEC §5.6) on SQLite: each operation one statement on the pool, due times against
//! the process's clock.

use jiff::Timestamp;
use sutra_store::{Deliveries, Delivery, DeliveryId, NewDelivery, Result};
use sutra_store_sql::rows::DeliveryRow;

use crate::SqliteStore;
use crate::codec::{db, micros, now, timestamp};
use crate::statements::insert_delivery;

#[async_trait::async_trait]
impl Deliveries for SqliteStore {
    async fn ask(&self, delivery: &NewDelivery) -> Result<DeliveryId> {
        let mut conn = self.pool.acquire().await.map_err(db)?;
        insert_delivery(&mut conn, delivery.into(), now()).await
    }

    async fn due_deliveries(&self, limit: u32) -> Result<Vec<Delivery>> {
        let rows: Vec<DeliveryRow> = sqlx::query_as(
            "SELECT id, tenant, instance, park, kind, payload, due_at, attempts FROM deliveries
             WHERE due_at <= ?1 ORDER BY due_at, id LIMIT ?2",
        )
        .bind(micros(now()))
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.into_iter().map(DeliveryRow::decode).collect()
    }

    async fn delivery(&self, id: DeliveryId) -> Result<Option<Delivery>> {
        let row: Option<DeliveryRow> = sqlx::query_as(
            "SELECT id, tenant, instance, park, kind, payload, due_at, attempts FROM deliveries
             WHERE id = ?1",
        )
        .bind(id.0)
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?;
        row.map(DeliveryRow::decode).transpose()
    }

    async fn defer(&self, id: DeliveryId, until: Timestamp) -> Result<()> {
        sqlx::query("UPDATE deliveries SET due_at = ?2, attempts = attempts + 1 WHERE id = ?1")
            .bind(id.0)
            .bind(micros(until))
            .execute(&self.pool)
            .await
            .map_err(db)?;
        Ok(())
    }

    async fn discard(&self, id: DeliveryId) -> Result<()> {
        sqlx::query("DELETE FROM deliveries WHERE id = ?1")
            .bind(id.0)
            .execute(&self.pool)
            .await
            .map_err(db)?;
        Ok(())
    }

    async fn next_due(&self) -> Result<Option<Timestamp>> {
        let earliest: Option<i64> = sqlx::query_scalar("SELECT MIN(due_at) FROM deliveries")
            .fetch_one(&self.pool)
            .await
            .map_err(db)?;
        earliest.map(timestamp).transpose()
    }
}

//! Deliveries (SPEC §5.6) on PostgreSQL: each operation one statement in a transaction of its
//! own — the tenant's to ask, the system's to find, defer and discard (the dispatcher serves
//! every tenant) — due times against the database's clock.

use jiff::Timestamp;
use sutra_store::{Deliveries, Delivery, DeliveryId, NewDelivery, Result};
use sutra_store_sql::rows::DeliveryRow;
use sutra_store_sql::{Backend, Scope, Statements};

use crate::PostgresStore;
use crate::codec::{db, micros, timestamp};

#[async_trait::async_trait]
impl Deliveries for PostgresStore {
    async fn ask(&self, delivery: &NewDelivery) -> Result<DeliveryId> {
        let mut tx = self.begin(Scope::Tenant(&delivery.tenant)).await?;
        let id = tx.insert_delivery(delivery.into()).await?;
        tx.commit().await?;
        Ok(id)
    }

    async fn due_deliveries(&self, limit: u32) -> Result<Vec<Delivery>> {
        let mut tx = self.begin(Scope::System).await?;
        let rows: Vec<DeliveryRow> = sqlx::query_as(
            "SELECT id, tenant, instance, park, kind, payload, due_at, attempts FROM deliveries
             WHERE due_at <= sutra_now() ORDER BY due_at, id LIMIT $1",
        )
        .bind(i64::from(limit))
        .fetch_all(tx.connection())
        .await
        .map_err(db)?;
        tx.commit().await?;
        rows.into_iter().map(DeliveryRow::decode).collect()
    }

    async fn delivery(&self, id: DeliveryId) -> Result<Option<Delivery>> {
        let mut tx = self.begin(Scope::System).await?;
        let row: Option<DeliveryRow> = sqlx::query_as(
            "SELECT id, tenant, instance, park, kind, payload, due_at, attempts FROM deliveries
             WHERE id = $1",
        )
        .bind(id.0)
        .fetch_optional(tx.connection())
        .await
        .map_err(db)?;
        tx.commit().await?;
        row.map(DeliveryRow::decode).transpose()
    }

    async fn defer(&self, id: DeliveryId, until: Timestamp) -> Result<()> {
        let mut tx = self.begin(Scope::System).await?;
        let query =
            sqlx::query("UPDATE deliveries SET due_at = $2, attempts = attempts + 1 WHERE id = $1")
                .bind(id.0)
                .bind(micros(until));
        tx.execute(query).await?;
        tx.commit().await
    }

    async fn discard(&self, id: DeliveryId) -> Result<()> {
        let mut tx = self.begin(Scope::System).await?;
        tx.execute(sqlx::query("DELETE FROM deliveries WHERE id = $1").bind(id.0))
            .await?;
        tx.commit().await
    }

    async fn next_due(&self) -> Result<Option<Timestamp>> {
        let mut tx = self.begin(Scope::System).await?;
        let earliest: Option<i64> = sqlx::query_scalar("SELECT MIN(due_at) FROM deliveries")
            .fetch_one(tx.connection())
            .await
            .map_err(db)?;
        tx.commit().await?;
        earliest.map(timestamp).transpose()
    }
}

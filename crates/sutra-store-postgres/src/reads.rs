//! The API's reads on PostgreSQL, each one statement in a transaction scoped to the tenant, so
//! that row-level security shows it only the tenant's rows. Listings are built once, for both
//! backends (see `sutra_store_sql::listings`).

use sutra_core::step::HistoryEvent;
use sutra_store::{
    Error, InstanceFilter, InstanceRecord, OutboxRecord, Reads, Result, TaskFilter, TaskRecord,
};
use sutra_store_sql::listings;
use sutra_store_sql::rows::{HistoryRow, InstanceRow, OutboxRow, TaskRow};
use sutra_store_sql::{Backend, Scope, Statements};

use crate::PostgresStore;
use crate::codec::db;

#[async_trait::async_trait]
impl Reads for PostgresStore {
    async fn instance(&self, tenant: &str, id: &str) -> Result<Option<InstanceRecord>> {
        let mut tx = self.begin(Scope::Tenant(tenant)).await?;
        let row: Option<InstanceRow> = sqlx::query_as(
            "SELECT snapshot, owner, fence, recoveries, created_at, updated_at FROM instances
             WHERE tenant = $1 AND id = $2",
        )
        .bind(tenant)
        .bind(id)
        .fetch_optional(tx.connection())
        .await
        .map_err(db)?;
        tx.commit().await?;
        row.map(InstanceRow::decode).transpose()
    }

    async fn instances(
        &self,
        tenant: &str,
        filter: &InstanceFilter,
    ) -> Result<Vec<InstanceRecord>> {
        let mut sql = listings::instances(tenant, filter);
        let mut tx = self.begin(Scope::Tenant(tenant)).await?;
        let rows: Vec<InstanceRow> = sql
            .build_query_as()
            .fetch_all(tx.connection())
            .await
            .map_err(db)?;
        tx.commit().await?;
        rows.into_iter().map(InstanceRow::decode).collect()
    }

    async fn history(&self, tenant: &str, id: &str) -> Result<Vec<HistoryEvent>> {
        let mut tx = self.begin(Scope::Tenant(tenant)).await?;
        let rows: Vec<HistoryRow> = sqlx::query_as(
            "SELECT seq, at, kind, node, token, detail FROM history
             WHERE tenant = $1 AND instance = $2 ORDER BY seq",
        )
        .bind(tenant)
        .bind(id)
        .fetch_all(tx.connection())
        .await
        .map_err(db)?;
        tx.commit().await?;
        rows.into_iter().map(HistoryRow::decode).collect()
    }

    async fn tasks(&self, tenant: &str, instance: &str) -> Result<Vec<TaskRecord>> {
        let mut tx = self.begin(Scope::Tenant(tenant)).await?;
        let rows: Vec<TaskRow> = sqlx::query_as(concat!(
            "SELECT ",
            sutra_store_sql::task_columns!(),
            " FROM tasks WHERE tenant = $1 AND instance = $2 ORDER BY park"
        ))
        .bind(tenant)
        .bind(instance)
        .fetch_all(tx.connection())
        .await
        .map_err(db)?;
        tx.commit().await?;
        rows.into_iter().map(TaskRow::decode).collect()
    }

    async fn list_tasks(&self, tenant: &str, filter: &TaskFilter) -> Result<Vec<TaskRecord>> {
        let mut sql = listings::tasks(tenant, filter);
        let mut tx = self.begin(Scope::Tenant(tenant)).await?;
        let rows: Vec<TaskRow> = sql
            .build_query_as()
            .fetch_all(tx.connection())
            .await
            .map_err(db)?;
        tx.commit().await?;
        rows.into_iter().map(TaskRow::decode).collect()
    }

    async fn outbox(&self, tenant: &str, instance: &str) -> Result<Vec<OutboxRecord>> {
        let mut tx = self.begin(Scope::Tenant(tenant)).await?;
        let rows: Vec<OutboxRow> = sqlx::query_as(
            "SELECT channel, payload, message_key, idempotency_key, instance, deployment, version,
                    attempts, sent_at, poisoned, last_error, next_attempt_at
             FROM outbox WHERE tenant = $1 AND instance = $2 ORDER BY id",
        )
        .bind(tenant)
        .bind(instance)
        .fetch_all(tx.connection())
        .await
        .map_err(db)?;
        tx.commit().await?;
        rows.into_iter().map(OutboxRow::decode).collect()
    }

    /// Readiness means the store accepts a commit: a connection, a transaction, and a primary
    /// rather than a read-only standby.
    async fn ping(&self) -> Result<()> {
        let mut tx = self.begin(Scope::System).await?;
        let standby: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
            .fetch_one(tx.connection())
            .await
            .map_err(db)?;
        tx.commit().await?;
        if standby {
            return Err(Error::Unavailable(
                "the database is a read-only standby".to_owned(),
            ));
        }
        Ok(())
    }
}

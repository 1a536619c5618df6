//! The API's reads on SQLite, each one statement on the pool (WAL lets them run beside the
//! writer). Listings put only the filters given in the SQL, so that SQLite can use the index of
//! each (see `sutra_store_sql::listings`).

use sutra_core::step::HistoryEvent;
use sutra_store::{
    InstanceFilter, InstanceRecord, OutboxRecord, Reads, Result, TaskFilter, TaskRecord,
};
use sutra_store_sql::Statements;
use sutra_store_sql::listings;
use sutra_store_sql::rows::{HistoryRow, InstanceRow, OutboxRow, TaskRow};

use crate::SqliteStore;
use crate::codec::db;

#[async_trait::async_trait]
impl Reads for SqliteStore {
    async fn instance(&self, tenant: &str, id: &str) -> Result<Option<InstanceRecord>> {
        let row: Option<InstanceRow> = sqlx::query_as(
            "SELECT snapshot, owner, fence, recoveries, created_at, updated_at FROM instances
             WHERE tenant = ?1 AND id = ?2",
        )
        .bind(tenant)
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?;
        row.map(InstanceRow::decode).transpose()
    }

    async fn instances(
        &self,
        tenant: &str,
        filter: &InstanceFilter,
    ) -> Result<Vec<InstanceRecord>> {
        let mut sql = listings::instances(tenant, filter);
        let rows: Vec<InstanceRow> = sql
            .build_query_as()
            .fetch_all(&self.pool)
            .await
            .map_err(db)?;
        rows.into_iter().map(InstanceRow::decode).collect()
    }

    async fn history(&self, tenant: &str, id: &str) -> Result<Vec<HistoryEvent>> {
        let rows: Vec<HistoryRow> = sqlx::query_as(
            "SELECT seq, at, kind, node, token, detail FROM history
             WHERE tenant = ?1 AND instance = ?2 ORDER BY seq",
        )
        .bind(tenant)
        .bind(id)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.into_iter().map(HistoryRow::decode).collect()
    }

    async fn tasks(&self, tenant: &str, instance: &str) -> Result<Vec<TaskRecord>> {
        let rows: Vec<TaskRow> = sqlx::query_as(concat!(
            "SELECT ",
            sutra_store_sql::task_columns!(),
            " FROM tasks WHERE tenant = ?1 AND instance = ?2 ORDER BY park"
        ))
        .bind(tenant)
        .bind(instance)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.into_iter().map(TaskRow::decode).collect()
    }

    async fn list_tasks(&self, tenant: &str, filter: &TaskFilter) -> Result<Vec<TaskRecord>> {
        let mut sql = listings::tasks(tenant, filter);
        let rows: Vec<TaskRow> = sql
            .build_query_as()
            .fetch_all(&self.pool)
            .await
            .map_err(db)?;
        rows.into_iter().map(TaskRow::decode).collect()
    }

    async fn outbox(&self, tenant: &str, instance: &str) -> Result<Vec<OutboxRecord>> {
        let rows: Vec<OutboxRow> = sqlx::query_as(
            "SELECT channel, payload, message_key, idempotency_key, instance, deployment, version,
                    attempts, sent_at, poisoned, last_error, next_attempt_at
             FROM outbox WHERE tenant = ?1 AND instance = ?2 ORDER BY id",
        )
        .bind(tenant)
        .bind(instance)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.into_iter().map(OutboxRow::decode).collect()
    }

    /// Readiness means the store accepts a commit, so this takes the write lock and lets go.
    async fn ping(&self) -> Result<()> {
        self.begin_write().await?.commit().await
    }
}

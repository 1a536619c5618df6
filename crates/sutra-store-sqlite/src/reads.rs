//! The API's reads on SQLite, each one statement alone (WAL lets them run beside the writer).
//! Listings put only the filters given in the SQL, so that SQLite can use the index of each (see
//! `sutra_store_sql::listings`).

use futures_util::TryStreamExt;
use sutra_store::{InstanceFilter, Result, TaskFilter};
use sutra_store_sql::rows::{HistoryRow, InstanceRow, InstanceSummaryRow, OutboxRow, TaskRow};
use sutra_store_sql::{ReadStatements, listings};

use crate::codec::db;
use crate::statements::Session;

impl ReadStatements for Session {
    /// A row marked unreadable whose snapshot is not even JSON reads it as `null`, so that the
    /// row decodes and answers its mark's detail (decision 0082) rather than the JSON error.
    async fn instance_row(&mut self, tenant: &str, id: &str) -> Result<Option<InstanceRow>> {
        let query = sqlx::query_as(
            "SELECT CASE WHEN unreadable IS NOT NULL AND NOT json_valid(snapshot) THEN 'null'
                         ELSE snapshot END AS snapshot,
                    owner, fence, recoveries, created_at, updated_at, unreadable
             FROM instances WHERE tenant = ?1 AND id = ?2",
        );
        self.fetch_optional(query.bind(tenant).bind(id)).await
    }

    async fn instance_summary_rows(
        &mut self,
        tenant: &str,
        filter: &InstanceFilter,
        tokens: bool,
    ) -> Result<Vec<InstanceSummaryRow>> {
        self.fetch_all(listings::summaries(tenant, filter, tokens).build_query_as())
            .await
    }

    async fn instance_rows(
        &mut self,
        tenant: &str,
        filter: &InstanceFilter,
        budget: usize,
    ) -> Result<(Vec<InstanceRow>, bool)> {
        let mut sql = listings::instances(tenant, filter);
        let connection = self.connection().await?;
        let rows = sql.build_query_as().fetch(connection).map_err(db);
        listings::within_budget(rows, budget).await
    }

    async fn history_rows(&mut self, tenant: &str, instance: &str) -> Result<Vec<HistoryRow>> {
        let query = sqlx::query_as(
            "SELECT seq, at, kind, node, token, detail FROM history
             WHERE tenant = ?1 AND instance = ?2 ORDER BY seq",
        );
        self.fetch_all(query.bind(tenant).bind(instance)).await
    }

    async fn task_rows(&mut self, tenant: &str, instance: &str) -> Result<Vec<TaskRow>> {
        let query = sqlx::query_as(concat!(
            "SELECT ",
            sutra_store_sql::task_columns!(),
            " FROM tasks WHERE tenant = ?1 AND instance = ?2 ORDER BY park"
        ));
        self.fetch_all(query.bind(tenant).bind(instance)).await
    }

    async fn listed_task_rows(
        &mut self,
        tenant: &str,
        filter: &TaskFilter,
    ) -> Result<Vec<TaskRow>> {
        self.fetch_all(listings::tasks(tenant, filter).build_query_as())
            .await
    }

    async fn outbox_rows(&mut self, tenant: &str, instance: &str) -> Result<Vec<OutboxRow>> {
        let query = sqlx::query_as(
            "SELECT channel, payload, message_key, idempotency_key, instance, deployment, version,
                    attempts, sent_at, poisoned, last_error, next_attempt_at
             FROM outbox WHERE tenant = ?1 AND instance = ?2 ORDER BY id",
        );
        self.fetch_all(query.bind(tenant).bind(instance)).await
    }

    /// Readiness means the store accepts a commit, so this takes the write lock and lets go.
    async fn ping(&mut self) -> Result<()> {
        self.write().await.map(drop)
    }
}

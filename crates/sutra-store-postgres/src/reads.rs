//! The API's reads on PostgreSQL, each one statement in a transaction scoped to the tenant, so
//! that row-level security shows it only the tenant's rows. Listings are built once, for both
//! backends (see `sutra_store_sql::listings`).

use futures_util::TryStreamExt;
use sutra_store::{Error, InstanceFilter, Result, TaskFilter};
use sutra_store_sql::rows::{HistoryRow, InstanceRow, InstanceSummaryRow, OutboxRow, TaskRow};
use sutra_store_sql::{ReadStatements, listings};

use crate::codec::db;
use crate::statements::Scoped;

impl ReadStatements for Scoped {
    async fn instance_row(&mut self, tenant: &str, id: &str) -> Result<Option<InstanceRow>> {
        sqlx::query_as(
            "SELECT snapshot, owner, fence, recoveries, created_at, updated_at, unreadable
             FROM instances WHERE tenant = $1 AND id = $2",
        )
        .bind(tenant)
        .bind(id)
        .fetch_optional(self.connection())
        .await
        .map_err(db)
    }

    async fn instance_summary_rows(
        &mut self,
        tenant: &str,
        filter: &InstanceFilter,
        tokens: bool,
    ) -> Result<Vec<InstanceSummaryRow>> {
        let mut sql = listings::summaries(tenant, filter, tokens);
        sql.build_query_as()
            .fetch_all(self.connection())
            .await
            .map_err(db)
    }

    async fn instance_rows(
        &mut self,
        tenant: &str,
        filter: &InstanceFilter,
        budget: usize,
    ) -> Result<(Vec<InstanceRow>, bool)> {
        let mut sql = listings::instances(tenant, filter);
        let rows = sql.build_query_as().fetch(self.connection()).map_err(db);
        listings::within_budget(rows, budget).await
    }

    async fn history_rows(&mut self, tenant: &str, instance: &str) -> Result<Vec<HistoryRow>> {
        sqlx::query_as(
            "SELECT seq, at, kind, node, token, detail FROM history
             WHERE tenant = $1 AND instance = $2 ORDER BY seq",
        )
        .bind(tenant)
        .bind(instance)
        .fetch_all(self.connection())
        .await
        .map_err(db)
    }

    async fn task_rows(&mut self, tenant: &str, instance: &str) -> Result<Vec<TaskRow>> {
        sqlx::query_as(concat!(
            "SELECT ",
            sutra_store_sql::task_columns!(),
            " FROM tasks WHERE tenant = $1 AND instance = $2 ORDER BY park"
        ))
        .bind(tenant)
        .bind(instance)
        .fetch_all(self.connection())
        .await
        .map_err(db)
    }

    async fn listed_task_rows(
        &mut self,
        tenant: &str,
        filter: &TaskFilter,
    ) -> Result<Vec<TaskRow>> {
        let mut sql = listings::tasks(tenant, filter);
        sql.build_query_as()
            .fetch_all(self.connection())
            .await
            .map_err(db)
    }

    async fn outbox_rows(&mut self, tenant: &str, instance: &str) -> Result<Vec<OutboxRow>> {
        sqlx::query_as(
            "SELECT channel, payload, message_key, idempotency_key, instance, deployment, version,
                    attempts, sent_at, poisoned, last_error, next_attempt_at
             FROM outbox WHERE tenant = $1 AND instance = $2 ORDER BY id",
        )
        .bind(tenant)
        .bind(instance)
        .fetch_all(self.connection())
        .await
        .map_err(db)
    }

    /// Readiness means the store accepts a commit: a connection, a transaction, and a primary
    /// rather than a read-only standby.
    async fn ping(&mut self) -> Result<()> {
        let standby: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
            .fetch_one(self.connection())
            .await
            .map_err(db)?;
        if standby {
            return Err(Error::Unavailable(
                "the database is a read-only standby".to_owned(),
            ));
        }
        Ok(())
    }
}

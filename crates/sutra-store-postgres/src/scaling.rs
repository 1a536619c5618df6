//! The scaling signal's counts on PostgreSQL: the shared statements of
//! `sutra_store_sql::scaling`, each served by an index (`tasks_available`, `tasks_locked`,
//! `outbox_pending`, `instances_by_status`).

use sutra_store::Result;
use sutra_store_sql::ScalingStatements;
use sutra_store_sql::scaling::{INSTANCES, TASKS_AVAILABLE, WAITING};

use crate::codec::db;
use crate::statements::Scoped;

impl ScalingStatements for Scoped {
    async fn waiting(&mut self) -> Result<(i64, i64, i64)> {
        sqlx::query_as(WAITING)
            .fetch_one(self.connection())
            .await
            .map_err(db)
    }

    async fn tasks_available(&mut self) -> Result<Vec<(String, i64)>> {
        sqlx::query_as(TASKS_AVAILABLE)
            .fetch_all(self.connection())
            .await
            .map_err(db)
    }

    async fn instances_by_status(&mut self) -> Result<Vec<(String, i64)>> {
        sqlx::query_as(INSTANCES)
            .fetch_all(self.connection())
            .await
            .map_err(db)
    }
}

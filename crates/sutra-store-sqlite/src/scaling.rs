//! The scaling signal's counts on SQLite: the shared statements of `sutra_store_sql::scaling`.

use sutra_store::Result;
use sutra_store_sql::ScalingStatements;
use sutra_store_sql::scaling::{INSTANCES, TASKS_AVAILABLE, WAITING};

use crate::codec::db;
use crate::statements::Session;

impl ScalingStatements for Session {
    async fn waiting(&mut self) -> Result<(i64, i64, i64)> {
        sqlx::query_as(WAITING)
            .fetch_one(self.connection().await?)
            .await
            .map_err(db)
    }

    async fn tasks_available(&mut self) -> Result<Vec<(String, i64)>> {
        sqlx::query_as(TASKS_AVAILABLE)
            .fetch_all(self.connection().await?)
            .await
            .map_err(db)
    }

    async fn instances_by_status(&mut self) -> Result<Vec<(String, i64)>> {
        sqlx::query_as(INSTANCES)
            .fetch_all(self.connection().await?)
            .await
            .map_err(db)
    }
}

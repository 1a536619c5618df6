//! The scaling signal's counts on SQLite: the shared statements of `sutra_store_sql::scaling`,
//! exact.

use sutra_store::Result;
use sutra_store_sql::ScalingStatements;
use sutra_store_sql::scaling::{LIVE_BY_TENANT, instances, tasks_available, waiting};

use crate::codec::db;
use crate::statements::Session;

impl ScalingStatements for Session {
    async fn waiting(&mut self, tenant: Option<&str>) -> Result<(i64, i64, i64)> {
        waiting(tenant)
            .build_query_as()
            .fetch_one(self.connection().await?)
            .await
            .map_err(db)
    }

    async fn tasks_available(
        &mut self,
        tenant: Option<&str>,
    ) -> Result<Vec<(String, String, i64)>> {
        self.fetch_all(tasks_available(tenant).build_query_as())
            .await
    }

    async fn instances_by_status(&mut self, tenant: Option<&str>) -> Result<Vec<(String, i64)>> {
        self.fetch_all(instances(tenant).build_query_as()).await
    }

    async fn live_by_tenant(&mut self) -> Result<Vec<(String, i64)>> {
        self.fetch_all(sqlx::query_as(LIVE_BY_TENANT)).await
    }
}

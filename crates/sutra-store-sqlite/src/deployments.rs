//! Deployments on SQLite: the shared deploy script ([`sutra_store_sql::deployments`]) in one
//! write transaction, which SQLite's single writer orders with every other deploy. Nothing
//! announces a deploy: every process on a file stored it or polls the revision.

use sutra_store::{DeploymentRecord, Deployments, Result};
use sutra_store_sql::rows::DeploymentRow;
use sutra_store_sql::{DeploymentStatements, params};

use crate::SqliteStore;
use crate::codec::{db, micros, unsigned};
use crate::statements::Write;

#[async_trait::async_trait]
impl Deployments for SqliteStore {
    async fn deploy(&self, tenant: &str, name: &str, source: &str) -> Result<DeploymentRecord> {
        sutra_store_sql::deployments::deploy(self, tenant, name, source).await
    }

    async fn deployments(&self, tenant: Option<&str>) -> Result<Vec<DeploymentRecord>> {
        let rows: Vec<DeploymentRow> = sqlx::query_as(
            "SELECT tenant, name, version, status, source, created_at FROM deployments
             WHERE ?1 IS NULL OR tenant = ?1
             ORDER BY created_at, tenant, name, version",
        )
        .bind(tenant)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.into_iter().map(DeploymentRow::decode).collect()
    }

    async fn deployment_revision(&self) -> Result<u64> {
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM deployments")
            .fetch_one(&self.pool)
            .await
            .map_err(db)?;
        unsigned(count, "a deployment count")
    }
}

impl DeploymentStatements for Write {
    async fn drain_active(&mut self, tenant: &str, name: &str) -> Result<()> {
        let query = sqlx::query(
            "UPDATE deployments SET status = ?3 WHERE tenant = ?1 AND name = ?2 AND status = ?4",
        );
        let query = params::drain(query, tenant, name);
        self.execute(query).await.map(drop)
    }

    async fn insert_version(
        &mut self,
        tenant: &str,
        name: &str,
        source: &str,
    ) -> Result<DeploymentRow> {
        let now = micros(self.now());
        let query = sqlx::query_as(
            "INSERT INTO deployments (tenant, name, version, status, source, created_at)
             SELECT ?1, ?2, COALESCE(MAX(version), 0) + 1, ?3, ?4, ?5
             FROM deployments WHERE tenant = ?1 AND name = ?2
             RETURNING tenant, name, version, status, source, created_at",
        );
        params::version(query, tenant, name, source)
            .bind(now)
            .fetch_one(self.connection())
            .await
            .map_err(db)
    }

    async fn announce_deployment(&mut self) -> Result<()> {
        Ok(())
    }
}

//! Deployments on PostgreSQL: the shared deploy script ([`sutra_store_sql::deployments`]), whose
//! advisory lock on the name orders concurrent deploys of it, and which announces each stored
//! version to every replica (see [`crate::notices`]).

use sutra_store::{DeploymentRecord, Deployments, Result};
use sutra_store_sql::rows::DeploymentRow;
use sutra_store_sql::{Backend, DeploymentStatements, Scope, Statements, params};

use crate::codec::{db, unsigned};
use crate::statements::Scoped;
use crate::{PostgresStore, notices};

#[async_trait::async_trait]
impl Deployments for PostgresStore {
    async fn deploy(&self, tenant: &str, name: &str, source: &str) -> Result<DeploymentRecord> {
        sutra_store_sql::deployments::deploy(self, tenant, name, source).await
    }

    async fn deployments(&self, tenant: Option<&str>) -> Result<Vec<DeploymentRecord>> {
        let scope = tenant.map_or(Scope::System, Scope::Tenant);
        let mut tx = self.begin(scope).await?;
        let rows: Vec<DeploymentRow> = sqlx::query_as(
            "SELECT tenant, name, version, status, source, created_at FROM deployments
             WHERE $1::text IS NULL OR tenant = $1
             ORDER BY created_at, tenant, name, version",
        )
        .bind(tenant)
        .fetch_all(tx.connection())
        .await
        .map_err(db)?;
        tx.commit().await?;
        rows.into_iter().map(DeploymentRow::decode).collect()
    }

    async fn deployment_revision(&self) -> Result<u64> {
        let mut tx = self.begin(Scope::System).await?;
        let count: i64 = sqlx::query_scalar("SELECT count(*) FROM deployments")
            .fetch_one(tx.connection())
            .await
            .map_err(db)?;
        tx.commit().await?;
        unsigned(count, "a deployment count")
    }

    async fn deployment_notice(&self) -> Result<()> {
        self.notices.next().await
    }
}

impl DeploymentStatements for Scoped {
    async fn drain_active(&mut self, tenant: &str, name: &str) -> Result<()> {
        let query = sqlx::query(
            "UPDATE deployments SET status = $3 WHERE tenant = $1 AND name = $2 AND status = $4",
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
        let query = sqlx::query_as(
            "INSERT INTO deployments (tenant, name, version, status, source, created_at)
             SELECT $1, $2, COALESCE(MAX(version), 0) + 1, $3, $4, sutra_now()
             FROM deployments WHERE tenant = $1 AND name = $2
             RETURNING tenant, name, version, status, source, created_at",
        );
        params::version(query, tenant, name, source)
            .fetch_one(self.connection())
            .await
            .map_err(db)
    }

    /// Delivered at the commit, to every replica listening (see [`crate::notices`]).
    async fn announce_deployment(&mut self) -> Result<()> {
        let query = sqlx::query("SELECT pg_notify($1, '')").bind(notices::CHANNEL);
        self.execute(query).await.map(drop)
    }
}

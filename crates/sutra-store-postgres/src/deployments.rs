//! Deployments on PostgreSQL: the statements of the shared deploy script, whose advisory lock on
//! the name orders concurrent deploys of it, and which announces each stored
//! version to every replica (see [`crate::notices`]).

use sutra_store::Result;
use sutra_store_sql::rows::DeploymentRow;
use sutra_store_sql::{DeploymentStatements, NewVersion, params};

use crate::codec::db;
use crate::notices;
use crate::statements::Scoped;

impl DeploymentStatements for Scoped {
    async fn drain_active(&mut self, tenant: &str, name: &str) -> Result<()> {
        let query = sqlx::query(
            "UPDATE deployments SET status = $3 WHERE tenant = $1 AND name = $2 AND status = $4",
        );
        let query = params::drain(query, tenant, name);
        self.execute(query).await.map(drop)
    }

    async fn insert_version(&mut self, version: &NewVersion<'_>) -> Result<DeploymentRow> {
        let query = sqlx::query_as(
            "INSERT INTO deployments (tenant, name, version, status, source, created_at)
             SELECT $1, $2, COALESCE(MAX(version), 0) + 1, $3, $4, sutra_now()
             FROM deployments WHERE tenant = $1 AND name = $2
             RETURNING tenant, name, version, status, source, created_at",
        );
        params::version(query, version)
            .fetch_one(self.connection())
            .await
            .map_err(db)
    }

    /// Delivered at the commit, to every replica listening (see [`crate::notices`]).
    async fn announce_deployment(&mut self) -> Result<()> {
        let query = sqlx::query("SELECT pg_notify($1, '')").bind(notices::DEPLOYMENTS);
        self.execute(query).await.map(drop)
    }

    async fn deployments(&mut self, tenant: Option<&str>) -> Result<Vec<DeploymentRow>> {
        sqlx::query_as(
            "SELECT tenant, name, version, status, source, created_at FROM deployments
             WHERE $1::text IS NULL OR tenant = $1
             ORDER BY created_at, tenant, name, version",
        )
        .bind(tenant)
        .fetch_all(self.connection())
        .await
        .map_err(db)
    }

    async fn deployment_count(&mut self) -> Result<i64> {
        sqlx::query_scalar("SELECT count(*) FROM deployments")
            .fetch_one(self.connection())
            .await
            .map_err(db)
    }
}

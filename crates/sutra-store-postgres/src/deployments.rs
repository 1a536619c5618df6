//! Deployments on PostgreSQL: the statements of the shared deploy script, whose advisory lock on
//! the name orders concurrent deploys of it, and which announces each stored
//! version to every replica (see [`crate::notices`]).

use jiff::SignedDuration;
use sutra_core::snapshot::Status;
use sutra_store::codec::duration_micros;
use sutra_store::{DeploymentStatus, Result, TaskState};
use sutra_store_sql::rows::DeploymentRow;
use sutra_store_sql::{DeploymentStatements, NewVersion};

use crate::codec::db;
use crate::notices;
use crate::statements::Scoped;

impl DeploymentStatements for Scoped {
    async fn drain_active(&mut self, tenant: &str, name: &str) -> Result<()> {
        let query = sqlx::query(
            "UPDATE deployments SET status = $3 WHERE tenant = $1 AND name = $2 AND status = $4",
        );
        let query = query
            .bind(tenant)
            .bind(name)
            .bind(DeploymentStatus::Draining.as_str())
            .bind(DeploymentStatus::Active.as_str());
        self.execute(query).await.map(drop)
    }

    async fn insert_version(&mut self, version: &NewVersion<'_>) -> Result<DeploymentRow> {
        let query = sqlx::query_as(
            "INSERT INTO deployments (tenant, name, version, status, source, created_at)
             SELECT $1, $2, COALESCE(MAX(version), 0) + 1, $3, $4, sutra_now()
             FROM deployments WHERE tenant = $1 AND name = $2
             RETURNING tenant, name, version, status, source, created_at",
        );
        query
            .bind(version.tenant)
            .bind(version.name)
            .bind(DeploymentStatus::Active.as_str())
            .bind(version.source)
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

    async fn retirement(
        &mut self,
        tenant: &str,
        name: &str,
        version: u32,
    ) -> Result<(i64, i64, i64)> {
        let query = sqlx::query_as(
            "WITH d AS (SELECT $5::text AS tenant, $6::text AS name, $7::bigint AS version)
             SELECT
               (SELECT count(*) FROM d JOIN instances i ON i.tenant = d.tenant
                  AND i.deployment = d.name AND i.version = d.version
                  AND i.status NOT IN ($1, $2)),
               (SELECT count(*) FROM d JOIN outbox o ON o.tenant = d.tenant
                  AND o.deployment = d.name AND o.version = d.version
                  AND o.sent_at IS NULL AND NOT o.poisoned),
               (SELECT count(*) FROM d JOIN instances i ON i.tenant = d.tenant
                  AND i.deployment = d.name AND i.version = d.version
                  JOIN tasks t ON t.instance = i.id AND t.state IN ($3, $4))",
        );
        query
            .bind(Status::Completed.as_str())
            .bind(Status::Cancelled.as_str())
            .bind(TaskState::Available.as_str())
            .bind(TaskState::Locked.as_str())
            .bind(tenant)
            .bind(name)
            .bind(i64::from(version))
            .fetch_one(self.connection())
            .await
            .map_err(db)
    }

    async fn retire_drained(&mut self, grace: SignedDuration) -> Result<Vec<DeploymentRow>> {
        let query = sqlx::query_as(
            "UPDATE deployments d SET status = $6
             WHERE d.status = $5
               AND EXISTS (SELECT 1 FROM deployments n WHERE n.tenant = d.tenant
                  AND n.name = d.name AND n.version > d.version
                  AND n.created_at <= sutra_now() - $7)
               AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.tenant = d.tenant
                  AND i.deployment = d.name AND i.version = d.version
                  AND i.status NOT IN ($1, $2))
               AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.tenant = d.tenant
                  AND o.deployment = d.name AND o.version = d.version
                  AND o.sent_at IS NULL AND NOT o.poisoned)
               AND NOT EXISTS (SELECT 1 FROM instances i JOIN tasks t ON t.instance = i.id
                  WHERE i.tenant = d.tenant AND i.deployment = d.name
                  AND i.version = d.version AND t.state IN ($3, $4))
             RETURNING tenant, name, version, status, source, created_at",
        );
        query
            .bind(Status::Completed.as_str())
            .bind(Status::Cancelled.as_str())
            .bind(TaskState::Available.as_str())
            .bind(TaskState::Locked.as_str())
            .bind(DeploymentStatus::Draining.as_str())
            .bind(DeploymentStatus::Retired.as_str())
            .bind(duration_micros(grace))
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

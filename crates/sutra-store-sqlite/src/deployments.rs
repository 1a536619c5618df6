//! Deployments on SQLite: the statements of the shared deploy script, in one write transaction,
//! which SQLite's single writer orders with every other deploy. Nothing announces a deploy:
//! every process on a file stored it or polls the revision.

use jiff::SignedDuration;
use sutra_core::snapshot::Status;
use sutra_store::codec::duration_micros;
use sutra_store::{DeploymentStatus, Result, TaskState};
use sutra_store_sql::rows::DeploymentRow;
use sutra_store_sql::{DeploymentStatements, NewVersion};

use crate::codec::{db, micros};
use crate::statements::Session;

impl DeploymentStatements for Session {
    async fn drain_active(&mut self, tenant: &str, name: &str) -> Result<()> {
        let tx = self.write().await?;
        let query = sqlx::query(
            "UPDATE deployments SET status = ?3 WHERE tenant = ?1 AND name = ?2 AND status = ?4",
        );
        let query = query
            .bind(tenant)
            .bind(name)
            .bind(DeploymentStatus::Draining.as_str())
            .bind(DeploymentStatus::Active.as_str());
        tx.execute(query).await.map(drop)
    }

    async fn insert_version(&mut self, version: &NewVersion<'_>) -> Result<DeploymentRow> {
        let tx = self.write().await?;
        let now = micros(tx.now());
        let query = sqlx::query_as(
            "INSERT INTO deployments (tenant, name, version, status, source, created_at)
             SELECT ?1, ?2, COALESCE(MAX(version), 0) + 1, ?3, ?4, ?5
             FROM deployments WHERE tenant = ?1 AND name = ?2
             RETURNING tenant, name, version, status, source, created_at",
        );
        query
            .bind(version.tenant)
            .bind(version.name)
            .bind(DeploymentStatus::Active.as_str())
            .bind(version.source)
            .bind(now)
            .fetch_one(tx.connection())
            .await
            .map_err(db)
    }

    async fn announce_deployment(&mut self) -> Result<()> {
        Ok(())
    }

    async fn deployments(&mut self, tenant: Option<&str>) -> Result<Vec<DeploymentRow>> {
        sqlx::query_as(
            "SELECT tenant, name, version, status, source, created_at FROM deployments
             WHERE ?1 IS NULL OR tenant = ?1
             ORDER BY created_at, tenant, name, version",
        )
        .bind(tenant)
        .fetch_all(self.connection().await?)
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
            "SELECT
               (SELECT COUNT(*) FROM instances WHERE tenant = ?5 AND deployment = ?6
                  AND version = ?7 AND status NOT IN (?1, ?2)),
               (SELECT COUNT(*) FROM outbox WHERE tenant = ?5 AND deployment = ?6
                  AND version = ?7 AND sent_at IS NULL AND NOT poisoned),
               (SELECT COUNT(*) FROM instances i JOIN tasks t ON t.instance = i.id
                  WHERE i.tenant = ?5 AND i.deployment = ?6 AND i.version = ?7
                  AND t.state IN (?3, ?4))",
        );
        query
            .bind(Status::Completed.as_str())
            .bind(Status::Cancelled.as_str())
            .bind(TaskState::Available.as_str())
            .bind(TaskState::Locked.as_str())
            .bind(tenant)
            .bind(name)
            .bind(i64::from(version))
            .fetch_one(self.connection().await?)
            .await
            .map_err(db)
    }

    async fn retire_drained(&mut self, grace: SignedDuration) -> Result<Vec<DeploymentRow>> {
        let tx = self.write().await?;
        let since = micros(tx.now()) - duration_micros(grace);
        let query = sqlx::query_as(
            "UPDATE deployments AS d SET status = ?6
             WHERE d.status = ?5
               AND EXISTS (SELECT 1 FROM deployments n WHERE n.tenant = d.tenant
                  AND n.name = d.name AND n.version > d.version AND n.created_at <= ?7)
               AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.tenant = d.tenant
                  AND i.deployment = d.name AND i.version = d.version
                  AND i.status NOT IN (?1, ?2))
               AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.tenant = d.tenant
                  AND o.deployment = d.name AND o.version = d.version
                  AND o.sent_at IS NULL AND NOT o.poisoned)
               AND NOT EXISTS (SELECT 1 FROM instances i JOIN tasks t ON t.instance = i.id
                  WHERE i.tenant = d.tenant AND i.deployment = d.name
                  AND i.version = d.version AND t.state IN (?3, ?4))
             RETURNING tenant, name, version, status, source, created_at",
        );
        query
            .bind(Status::Completed.as_str())
            .bind(Status::Cancelled.as_str())
            .bind(TaskState::Available.as_str())
            .bind(TaskState::Locked.as_str())
            .bind(DeploymentStatus::Draining.as_str())
            .bind(DeploymentStatus::Retired.as_str())
            .bind(since)
            .fetch_all(tx.connection())
            .await
            .map_err(db)
    }

    async fn deployment_count(&mut self) -> Result<i64> {
        sqlx::query_scalar("SELECT COUNT(*) FROM deployments")
            .fetch_one(self.connection().await?)
            .await
            .map_err(db)
    }
}

//! Deployments: the deploy script — version n+1 of a deployment becomes active, the previous one
//! draining — and the reads of the stored versions.

use std::future::Future;

use jiff::SignedDuration;
use sutra_store::codec::unsigned;
use sutra_store::{DeploymentRecord, Deployments, Result, Retirement};

use crate::rows::DeploymentRow;
use crate::statements::{Backend, LockOn, Scope, Statements};
use crate::store::SqlStore;

#[async_trait::async_trait]
impl<B: Backend> Deployments for SqlStore<B> {
    async fn deploy(&self, tenant: &str, name: &str, source: &str) -> Result<DeploymentRecord> {
        let version = NewVersion {
            tenant,
            name,
            source,
        };
        let row = self
            .once(Scope::Tenant(tenant), async |tx| {
                // Two deploys of one name would both read version n and both insert n+1.
                tx.serialize(&[LockOn::Deployment { tenant, name }]).await?;
                tx.drain_active(tenant, name).await?;
                let row = tx.insert_version(&version).await?;
                tx.announce_deployment().await?;
                Ok(row)
            })
            .await?;
        row.decode()
    }

    async fn deployments(&self, tenant: Option<&str>) -> Result<Vec<DeploymentRecord>> {
        let scope = tenant.map_or(Scope::System, Scope::Tenant);
        let rows = self
            .once(scope, async |tx| tx.deployments(tenant).await)
            .await?;
        rows.into_iter().map(DeploymentRow::decode).collect()
    }

    async fn retirement(&self, tenant: &str, name: &str, version: u32) -> Result<Retirement> {
        let (instances, outbox, tasks) = self
            .once(Scope::Tenant(tenant), async |tx| {
                tx.retirement(tenant, name, version).await
            })
            .await?;
        Ok(Retirement {
            instances: unsigned(instances, "a count of instances")?,
            outbox: unsigned(outbox, "a count of outbox rows")?,
            tasks: unsigned(tasks, "a count of tasks")?,
        })
    }

    async fn retire_drained(&self, grace: SignedDuration) -> Result<Vec<DeploymentRecord>> {
        let rows = self
            .once(Scope::System, async |tx| tx.retire_drained(grace).await)
            .await?;
        rows.into_iter().map(DeploymentRow::decode).collect()
    }

    async fn deployment_revision(&self) -> Result<u64> {
        let count = self
            .once(Scope::System, async |tx| tx.deployment_count().await)
            .await?;
        unsigned(count, "a deployment count")
    }

    async fn deployment_notice(&self) -> Result<()> {
        self.backend().deployment_notice().await
    }
}

/// Version n+1 of a deployment.
pub struct NewVersion<'a> {
    pub tenant: &'a str,
    pub name: &'a str,
    pub source: &'a str,
}

/// The statements of a deploy (`deployments`).
pub trait DeploymentStatements: Statements {
    /// The active version of `name`, if any, becomes draining.
    fn drain_active(&mut self, tenant: &str, name: &str)
    -> impl Future<Output = Result<()>> + Send;

    /// Inserts version n+1 of `name`, active.
    fn insert_version(
        &mut self,
        version: &NewVersion<'_>,
    ) -> impl Future<Output = Result<DeploymentRow>> + Send;

    /// Tells the other processes on the store, once this transaction commits, that a version
    /// was stored.
    fn announce_deployment(&mut self) -> impl Future<Output = Result<()>> + Send;

    /// Every version of the tenant's deployments (every tenant's when `None`), oldest first.
    fn deployments(
        &mut self,
        tenant: Option<&str>,
    ) -> impl Future<Output = Result<Vec<DeploymentRow>>> + Send;

    /// How many deployment versions are stored, of every tenant.
    fn deployment_count(&mut self) -> impl Future<Output = Result<i64>> + Send;

    /// What keeps a version from retiring: its unended instances, pending outbox rows and
    /// live tasks, counted.
    fn retirement(
        &mut self,
        tenant: &str,
        name: &str,
        version: u32,
    ) -> impl Future<Output = Result<(i64, i64, i64)>> + Send;

    /// Retires every draining version nothing keeps whose successor is at least `grace` old;
    /// returns them.
    fn retire_drained(
        &mut self,
        grace: SignedDuration,
    ) -> impl Future<Output = Result<Vec<DeploymentRow>>> + Send;
}

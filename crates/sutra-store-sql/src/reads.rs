//! The API's reads, each one statement in the tenant's scope, so that a backend keeping tenants
//! apart shows it only the tenant's rows. Listings are built once (see [`crate::listings`]).

use std::future::Future;

use sutra_core::step::HistoryEvent;
use sutra_store::{
    InstanceFilter, InstanceRecord, InstanceSummary, OutboxRecord, Reads, Result, TaskFilter,
    TaskRecord, WithinBudget,
};

use crate::rows::{HistoryRow, InstanceRow, InstanceSummaryRow, OutboxRow, TaskRow};
use crate::statements::{Backend, Scope, Statements};
use crate::store::SqlStore;

#[async_trait::async_trait]
impl<B: Backend> Reads for SqlStore<B> {
    async fn instance(&self, tenant: &str, id: &str) -> Result<Option<InstanceRecord>> {
        let row = self
            .once(Scope::Tenant(tenant), async |tx| {
                tx.instance_row(tenant, id).await
            })
            .await?;
        row.map(InstanceRow::decode).transpose()
    }

    async fn instance_summaries(
        &self,
        tenant: &str,
        filter: &InstanceFilter,
        tokens: bool,
    ) -> Result<Vec<InstanceSummary>> {
        let rows = self
            .once(Scope::Tenant(tenant), async |tx| {
                tx.instance_summary_rows(tenant, filter, tokens).await
            })
            .await?;
        rows.into_iter().map(InstanceSummaryRow::decode).collect()
    }

    async fn instances(
        &self,
        tenant: &str,
        filter: &InstanceFilter,
        budget: usize,
    ) -> Result<WithinBudget> {
        let (rows, spent) = self
            .once(Scope::Tenant(tenant), async |tx| {
                tx.instance_rows(tenant, filter, budget).await
            })
            .await?;
        let records = rows.into_iter().map(InstanceRow::decode);
        Ok(WithinBudget {
            records: records.collect::<Result<_>>()?,
            spent,
        })
    }

    async fn history(&self, tenant: &str, id: &str) -> Result<Vec<HistoryEvent>> {
        let rows = self
            .once(Scope::Tenant(tenant), async |tx| {
                tx.history_rows(tenant, id).await
            })
            .await?;
        rows.into_iter().map(HistoryRow::decode).collect()
    }

    async fn tasks(&self, tenant: &str, instance: &str) -> Result<Vec<TaskRecord>> {
        let rows = self
            .once(Scope::Tenant(tenant), async |tx| {
                tx.task_rows(tenant, instance).await
            })
            .await?;
        rows.into_iter().map(TaskRow::decode).collect()
    }

    async fn list_tasks(&self, tenant: &str, filter: &TaskFilter) -> Result<Vec<TaskRecord>> {
        let rows = self
            .once(Scope::Tenant(tenant), async |tx| {
                tx.listed_task_rows(tenant, filter).await
            })
            .await?;
        rows.into_iter().map(TaskRow::decode).collect()
    }

    async fn outbox(&self, tenant: &str, instance: &str) -> Result<Vec<OutboxRecord>> {
        let rows = self
            .once(Scope::Tenant(tenant), async |tx| {
                tx.outbox_rows(tenant, instance).await
            })
            .await?;
        rows.into_iter().map(OutboxRow::decode).collect()
    }

    /// Readiness means the store accepts a commit; what that takes is the backend's to say.
    async fn ping(&self) -> Result<()> {
        self.once(Scope::System, async |tx| tx.ping().await).await
    }
}

/// The reads of the API (`reads`).
pub trait ReadStatements: Statements {
    fn instance_row(
        &mut self,
        tenant: &str,
        id: &str,
    ) -> impl Future<Output = Result<Option<InstanceRow>>> + Send;

    /// The listing [`crate::listings::summaries`] builds.
    fn instance_summary_rows(
        &mut self,
        tenant: &str,
        filter: &InstanceFilter,
        tokens: bool,
    ) -> impl Future<Output = Result<Vec<InstanceSummaryRow>>> + Send;

    /// The listing [`crate::listings::instances`] builds, read as it streams
    /// [`crate::listings::within_budget`].
    fn instance_rows(
        &mut self,
        tenant: &str,
        filter: &InstanceFilter,
        budget: usize,
    ) -> impl Future<Output = Result<(Vec<InstanceRow>, bool)>> + Send;

    /// An instance's history, in sequence order.
    fn history_rows(
        &mut self,
        tenant: &str,
        instance: &str,
    ) -> impl Future<Output = Result<Vec<HistoryRow>>> + Send;

    /// An instance's tasks, in park order.
    fn task_rows(
        &mut self,
        tenant: &str,
        instance: &str,
    ) -> impl Future<Output = Result<Vec<TaskRow>>> + Send;

    /// The listing [`crate::listings::tasks`] builds.
    fn listed_task_rows(
        &mut self,
        tenant: &str,
        filter: &TaskFilter,
    ) -> impl Future<Output = Result<Vec<TaskRow>>> + Send;

    /// An instance's outbox rows, in the order they were written.
    fn outbox_rows(
        &mut self,
        tenant: &str,
        instance: &str,
    ) -> impl Future<Output = Result<Vec<OutboxRow>>> + Send;

    /// Fails unless the store would accept a commit now.
    fn ping(&mut self) -> impl Future<Output = Result<()>> + Send;
}

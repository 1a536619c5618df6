//! The scaling signal's counts (SPEC §8), in one read: every tenant's in a system-scoped one,
//! or one tenant's in a read scoped to it whose statements select its rows themselves (decision
//! 0076), so that a count for a tenant reads none of another's on either backend. The statements
//! are built once for both backends, as the listings are, and literal where a partial index is
//! to serve them (a state bound as a parameter would keep PostgreSQL's generic plan off
//! `tasks_available` and `outbox_pending`); the tenant is bound, as every tenant's statement
//! binds it.

use std::future::Future;

use sqlx::{Database, Encode, QueryBuilder, Type};
use sutra_core::snapshot::Status;
use sutra_store::codec::{corrupt, unsigned};
use sutra_store::{Available, Backlog, Result, Scaling};

use crate::statements::{Backend, Scope, Statements};
use crate::store::SqlStore;

/// The fleet's waiting work as one number — buffered messages, pending outbox rows, available
/// and locked tasks — what a KEDA `ScaledObject`'s PostgreSQL scaler divides by its target per
/// replica. `deploy/keda/scaledobject.yaml` and the chart hold this text, word for word (a test
/// compares them), and it counts what the gauges count.
pub const SCALING_SIGNAL: &str = "SELECT (SELECT COUNT(*) FROM buffered) + (SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL AND NOT poisoned) + (SELECT COUNT(*) FROM tasks WHERE state IN ('available', 'locked'))";

/// Every tenant's live instances, through PostgreSQL's `instances_live` partial index.
pub const LIVE_BY_TENANT: &str = "SELECT tenant, COUNT(*) FROM instances
    WHERE status IN ('created', 'suspended') GROUP BY tenant";

/// The inbox's backlog, the outbox's, and the tasks workers hold, of `tenant` (every tenant's
/// when `None`): what a KEDA `ScaledObject` adds up (with the available tasks) as the work.
pub fn waiting<DB>(tenant: Option<&str>) -> QueryBuilder<DB>
where
    DB: Database,
    for<'t> String: Encode<'t, DB> + Type<DB>,
{
    let mut sql = QueryBuilder::new("SELECT (SELECT COUNT(*) FROM buffered");
    of_tenant(&mut sql, " WHERE ", tenant);
    sql.push("), (SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL AND NOT poisoned");
    of_tenant(&mut sql, " AND ", tenant);
    sql.push("), (SELECT COUNT(*) FROM tasks WHERE state = 'locked'");
    of_tenant(&mut sql, " AND ", tenant);
    sql.push(")");
    sql
}

/// Available tasks by tenant and topic, of `tenant` (every tenant's when `None`): grouped in the
/// order of `tasks_available` (tenant, topic, …), which streams the count off the index.
pub fn tasks_available<DB>(tenant: Option<&str>) -> QueryBuilder<DB>
where
    DB: Database,
    for<'t> String: Encode<'t, DB> + Type<DB>,
{
    let mut sql =
        QueryBuilder::new("SELECT tenant, topic, COUNT(*) FROM tasks WHERE state = 'available'");
    of_tenant(&mut sql, " AND ", tenant);
    sql.push(" GROUP BY tenant, topic ORDER BY tenant, topic");
    sql
}

/// Instances by status, of `tenant` (every tenant's when `None`).
pub fn instances<DB>(tenant: Option<&str>) -> QueryBuilder<DB>
where
    DB: Database,
    for<'t> String: Encode<'t, DB> + Type<DB>,
{
    let mut sql = QueryBuilder::new("SELECT status, COUNT(*) FROM instances");
    of_tenant(&mut sql, " WHERE ", tenant);
    sql.push(" GROUP BY status ORDER BY status");
    sql
}

/// The condition that selects `tenant`'s rows, after `joint`; none for every tenant's.
fn of_tenant<DB>(sql: &mut QueryBuilder<DB>, joint: &str, tenant: Option<&str>)
where
    DB: Database,
    for<'t> String: Encode<'t, DB> + Type<DB>,
{
    if let Some(tenant) = tenant {
        sql.push(joint)
            .push("tenant = ")
            .push_bind(tenant.to_owned());
    }
}

#[async_trait::async_trait]
impl<B: Backend> Scaling for SqlStore<B> {
    async fn backlog(&self, tenant: Option<&str>) -> Result<Backlog> {
        let scope = tenant.map_or(Scope::System, Scope::Tenant);
        let (waiting, available, instances) = self
            .once(scope, async |tx| {
                let waiting = tx.waiting(tenant).await?;
                let available = tx.tasks_available(tenant).await?;
                let instances = tx.instances_by_status(tenant).await?;
                Ok((waiting, available, instances))
            })
            .await?;
        let (inbox, outbox, locked) = waiting;
        let count = |n: i64| unsigned(n, "a count");
        Ok(Backlog {
            inbox: count(inbox)?,
            outbox: count(outbox)?,
            tasks_locked: count(locked)?,
            tasks_available: available
                .into_iter()
                .map(|(tenant, topic, n)| {
                    Ok(Available {
                        tenant,
                        topic,
                        tasks: count(n)?,
                    })
                })
                .collect::<Result<_>>()?,
            instances: instances
                .into_iter()
                .map(|(status, n)| {
                    let parsed = Status::parse(&status)
                        .ok_or_else(|| corrupt("an instance status", &status))?;
                    Ok((parsed, count(n)?))
                })
                .collect::<Result<_>>()?,
        })
    }

    async fn live_by_tenant(&self) -> Result<Vec<(String, u64)>> {
        let counted = self
            .once(Scope::System, async |tx| tx.live_by_tenant().await)
            .await?;
        counted
            .into_iter()
            .map(|(tenant, n)| Ok((tenant, unsigned(n, "a count")?)))
            .collect()
    }
}

/// The scaling signal's counts (`scaling`), each the statement of the same name there, of
/// `tenant` (every tenant's when `None`).
pub trait ScalingStatements: Statements {
    /// Buffered messages, pending outbox rows, locked tasks.
    fn waiting(
        &mut self,
        tenant: Option<&str>,
    ) -> impl Future<Output = Result<(i64, i64, i64)>> + Send;
    /// Available tasks: (tenant, topic, count).
    fn tasks_available(
        &mut self,
        tenant: Option<&str>,
    ) -> impl Future<Output = Result<Vec<(String, String, i64)>>> + Send;
    fn instances_by_status(
        &mut self,
        tenant: Option<&str>,
    ) -> impl Future<Output = Result<Vec<(String, i64)>>> + Send;
    /// [`LIVE_BY_TENANT`].
    fn live_by_tenant(&mut self) -> impl Future<Output = Result<Vec<(String, i64)>>> + Send;
}

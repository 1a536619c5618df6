//! Schedules (issue 34): the sync script — a deployment version's scheduled flows become its
//! schedule rows, unless a newer version is stored already — and the one-statement reads and
//! updates of the rows: the listing, the due scan, the scheduler's advance, and pausing.
//!
//! A tenant's rows are written acting for it; the due scan, and the listing of every tenant's,
//! read across tenants in the system scope, as the retirement gate does.

use std::future::Future;

use jiff::Timestamp;
use sutra_store::{Advance, NewSchedule, Result, ScheduleKey, ScheduleRecord, Schedules};

use crate::rows::ScheduleRow;
use crate::statements::{Backend, LockOn, Scope, Statements};
use crate::store::SqlStore;

#[async_trait::async_trait]
impl<B: Backend> Schedules for SqlStore<B> {
    async fn sync_schedules(
        &self,
        tenant: &str,
        deployment: &str,
        version: u32,
        schedules: &[NewSchedule],
    ) -> Result<()> {
        let sync = ScheduleSync {
            tenant,
            deployment,
            version,
            schedules,
        };
        self.once(Scope::Tenant(tenant), async |tx| {
            // Two replicas syncing versions of one deployment at once would each judge "newer"
            // before the other wrote, and the older could delete or bring back a row after the
            // newer: syncs are ordered as deploys of the name are.
            tx.serialize(&[LockOn::Deployment {
                tenant,
                name: deployment,
            }])
            .await?;
            if !tx.newer_version_stored(&sync).await? {
                if !schedules.is_empty() {
                    tx.upsert_schedules(&sync).await?;
                }
                tx.delete_unscheduled(&sync).await?;
            }
            Ok(())
        })
        .await
    }

    async fn schedules(&self, tenant: Option<&str>) -> Result<Vec<ScheduleRecord>> {
        let scope = tenant.map_or(Scope::System, Scope::Tenant);
        let rows = self
            .once(scope, async |tx| tx.schedules(tenant).await)
            .await?;
        rows.into_iter().map(ScheduleRow::decode).collect()
    }

    async fn due_schedules(&self, now: Timestamp, limit: u32) -> Result<Vec<ScheduleRecord>> {
        let rows = self
            .once(Scope::System, async |tx| tx.due_schedules(now, limit).await)
            .await?;
        rows.into_iter().map(ScheduleRow::decode).collect()
    }

    async fn advance_schedule(
        &self,
        key: &ScheduleKey,
        version: u32,
        advance: &Advance,
    ) -> Result<bool> {
        self.once(Scope::Tenant(&key.tenant), async |tx| {
            tx.advance_schedule(key, version, advance).await
        })
        .await
    }

    async fn set_schedule_paused(
        &self,
        key: &ScheduleKey,
        paused: bool,
    ) -> Result<Option<ScheduleRecord>> {
        let row = self
            .once(Scope::Tenant(&key.tenant), async |tx| {
                tx.set_schedule_paused(key, paused).await
            })
            .await?;
        row.map(ScheduleRow::decode).transpose()
    }
}

/// The schedules of a deployment version, to sync its rows to.
pub struct ScheduleSync<'a> {
    pub tenant: &'a str,
    pub deployment: &'a str,
    pub version: u32,
    pub schedules: &'a [NewSchedule],
}

impl ScheduleSync<'_> {
    /// The flows the version schedules.
    pub fn flows(&self) -> Vec<&str> {
        self.schedules
            .iter()
            .map(|schedule| schedule.flow.as_str())
            .collect()
    }
}

/// The statements of the schedule rows (`schedules`).
pub trait ScheduleStatements: Statements {
    /// Whether a version of the deployment newer than `sync.version` is stored: as a schedule
    /// row, or as a deployment version. Either means a replica loading `sync.version` is late,
    /// and must change nothing. Runs in the transaction the sync writes in, if it writes.
    fn newer_version_stored(
        &mut self,
        sync: &ScheduleSync<'_>,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Inserts each schedule's row, or replaces a row of an older version: `paused` and the last
    /// fire kept, `next_at` kept unless the expression or zone changed. A row of the same version
    /// is left as it is.
    fn upsert_schedules(
        &mut self,
        sync: &ScheduleSync<'_>,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Deletes the deployment's rows of older versions whose flows `sync` does not schedule.
    fn delete_unscheduled(
        &mut self,
        sync: &ScheduleSync<'_>,
    ) -> impl Future<Output = Result<()>> + Send;

    /// The tenant's rows (every tenant's when `None`), by tenant, deployment and flow.
    fn schedules(
        &mut self,
        tenant: Option<&str>,
    ) -> impl Future<Output = Result<Vec<ScheduleRow>>> + Send;

    /// Up to `limit` unpaused rows with `next_at <= now`, of every tenant, the earliest first.
    fn due_schedules(
        &mut self,
        now: Timestamp,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<ScheduleRow>>> + Send;

    /// Moves the row to `advance.next_at`, recording the fired tick if any, if its `next_at` is
    /// still `advance.from` and its version `version`; whether it did.
    fn advance_schedule(
        &mut self,
        key: &ScheduleKey,
        version: u32,
        advance: &Advance,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Sets the row's `paused`; the row, or `None` when there is none.
    fn set_schedule_paused(
        &mut self,
        key: &ScheduleKey,
        paused: bool,
    ) -> impl Future<Output = Result<Option<ScheduleRow>>> + Send;
}

//! Schedules (issue 34, decision 0056): one row per scheduled flow of a deployment's active
//! version, holding when it fires next, what it fired last and whether an operator paused it.
//!
//! The rows are the fleet's shared memory of a schedule: the `scheduler` role's leader reads the
//! due ones and advances them; any replica answers and pauses them. Whether a tick started an
//! instance is not recorded here but in the inbox (the tick's event id), so a leader that dies
//! between the start and [`Schedules::advance_schedule`] leaves a row its successor fires again
//! and the inbox answers as a duplicate.

use jiff::Timestamp;

use crate::Result;

/// A scheduled flow of a deployment version, as an activation gives it to
/// [`Schedules::sync_schedules`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSchedule {
    pub flow: String,
    /// The expression as written (`cron 0 2 * * *`, `every PT15M`): a row whose expression or
    /// zone changes starts again at `next_at`.
    pub expression: String,
    pub zone: String,
    /// The first tick after the activation: the row's `next_at` when it is new or its expression
    /// or zone changed.
    pub next_at: Timestamp,
}

/// A schedule row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleRecord {
    pub tenant: String,
    pub deployment: String,
    pub flow: String,
    /// The deployment version whose flow the schedule starts.
    pub version: u32,
    pub expression: String,
    pub zone: String,
    /// The next tick to fire.
    pub next_at: Timestamp,
    /// The last tick fired, and the instance it started.
    pub last_at: Option<Timestamp>,
    pub last_instance: Option<String>,
    pub paused: bool,
}

/// A schedule's row, by its key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ScheduleKey {
    pub tenant: String,
    pub deployment: String,
    pub flow: String,
}

/// What the scheduler did with a due row: the row moves to `next_at`, and a fired tick is
/// recorded as the last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advance {
    /// The `next_at` the scheduler read: the advance writes nothing if the row moved since
    /// (another leader advanced it, or a deploy replaced it).
    pub from: Timestamp,
    pub next_at: Timestamp,
    /// The tick fired and the instance it started; `None` when the tick was skipped.
    pub fired: Option<(Timestamp, String)>,
}

/// The store of schedule rows.
#[async_trait::async_trait]
pub trait Schedules: Send + Sync {
    /// Makes `schedules` the schedules of `deployment`, as of `version`: a flow's row is inserted,
    /// or replaced when its stored version is older (keeping `paused` and the last fire, and
    /// keeping `next_at` unless the expression or zone changed); rows of flows not in
    /// `schedules` are deleted. Nothing changes when a newer version is stored already — a row
    /// of a newer version, or a newer version of the deployment itself, even one that schedules
    /// nothing — so a replica late to load a version cannot bring its predecessor's schedule
    /// back; syncing the stored version again changes nothing either. Syncs of one deployment
    /// are ordered with each other and with its deploys.
    async fn sync_schedules(
        &self,
        tenant: &str,
        deployment: &str,
        version: u32,
        schedules: &[NewSchedule],
    ) -> Result<()>;

    /// The tenant's schedules (every tenant's when `None`), by deployment and flow.
    async fn schedules(&self, tenant: Option<&str>) -> Result<Vec<ScheduleRecord>>;

    /// Up to `limit` rows of every tenant due at `now` (`next_at <= now`) and not paused, the
    /// earliest first.
    async fn due_schedules(&self, now: Timestamp, limit: u32) -> Result<Vec<ScheduleRecord>>;

    /// Moves a due row on, if its `next_at` is still `advance.from` and its version `version`;
    /// returns whether it did.
    async fn advance_schedule(
        &self,
        key: &ScheduleKey,
        version: u32,
        advance: &Advance,
    ) -> Result<bool>;

    /// Pauses or resumes a schedule; returns the row as it is now, or `None` when there is no
    /// such schedule. A paused row is not due; resuming it fires what its catch-up says at the
    /// next pass.
    async fn set_schedule_paused(
        &self,
        key: &ScheduleKey,
        paused: bool,
    ) -> Result<Option<ScheduleRecord>>;
}

//! The statement layer: each method one statement (or, where a dialect needs several, one
//! step of a script), its SQL text the backend's. A backend implements these traits once, on its
//! unit of work ([`Backend::Tx`]); the scripts of this crate decide the order the statements run
//! in and check what each returns, so that order and those checks exist once. How a statement
//! runs is the backend's: on PostgreSQL every unit of work is a transaction scoped to its tenant;
//! on SQLite a statement that writes begins the write transaction, and one atomic on its own (a
//! claim, a read) runs alone unless the write transaction is already begun.
//!
//! What differs between dialects stays behind a method: placeholders, how a list is bound
//! (`json_each` on SQLite, arrays and `unnest` on PostgreSQL), whose clock "now" is (the
//! process's on SQLite, read once when the transaction begins; `sutra_now()` on PostgreSQL), and
//! how transactions are ordered with each other (SQLite's single writer orders every write
//! transaction already; PostgreSQL takes advisory locks, see [`Statements::serialize`]).
//!
//! Statements that write a step's rows take the step's whole set of them (its history, its
//! outbox rows), so that a backend may write each set in one statement; a commit of many steps
//! at once changes the scripts, not this shape.

use std::future::Future;

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use sutra_core::snapshot::{InstanceInfo, ParkId, Snapshot};
use sutra_core::step::{Disarm, HistoryEvent};
use sutra_store::{
    BufferedMessage, ClaimToken, DeliveryId, DeliveryKind, EndNotice, InboxAnswer, InboxEntry,
    InstanceFilter, LockedTask, NewDelivery, OutboxEntry, OutboxId, OutboxRetry, Owner, Result,
    TaskFilter, TaskPoll, TaskState, WaitTarget,
};

use crate::rows::{
    ClaimedOutboxRow, ClaimedRow, CompletedRow, DeliveryRow, DeploymentRow, ExpiredRow, HeldRow,
    HistoryRow, InstanceRow, LeaseRow, OutboxRow, SweptRow, TaskRow,
};

/// Whose rows a transaction may touch. SQLite keeps no tenants apart by itself and ignores it;
/// PostgreSQL's row-level security shows a transaction only the rows of its scope.
#[derive(Debug, Clone, Copy)]
pub enum Scope<'a> {
    /// One tenant's rows: everything a request on behalf of a tenant does.
    Tenant(&'a str),
    /// Every tenant's rows, to read, update and delete, never to insert: the store's own
    /// cross-tenant work (sweep, due deliveries, outbox sending), whose trait methods name no
    /// tenant.
    System,
}

/// What a transaction must be ordered with: the other transactions naming the same thing run
/// before or after it, never interleaved with it.
#[derive(Debug, Clone, Copy)]
pub enum LockOn<'a> {
    /// `buffer` and a park's commit on the same correlation key: whichever goes second sees
    /// what the first wrote (docs/decisions/0015).
    Correlation(Correlation<'a>),
    /// Deploys of one deployment name: version n+1 is computed from version n.
    Deployment { tenant: &'a str, name: &'a str },
}

/// A correlation key: what a wait parks on and an early message is buffered under.
#[derive(Debug, Clone, Copy)]
pub struct Correlation<'a> {
    pub tenant: &'a str,
    pub channel: &'a str,
    pub key: &'a str,
}

/// A message's key in the inbox.
#[derive(Debug, Clone, Copy)]
pub struct InboxKey<'a> {
    pub tenant: &'a str,
    pub channel: &'a str,
    pub event_id: &'a str,
}

/// A claim to take: `owner`'s, on the instance, unless another owner's claim younger than
/// `timeout` holds it.
pub struct NewClaim<'a> {
    pub tenant: &'a str,
    pub instance: &'a str,
    pub owner: &'a Owner,
    pub timeout: SignedDuration,
}

/// A lease to take: `role` for `holder`, until `ttl` from now.
pub struct NewLease<'a> {
    pub role: &'a str,
    pub holder: &'a str,
    pub ttl: SignedDuration,
}

/// Version n+1 of a deployment.
pub struct NewVersion<'a> {
    pub tenant: &'a str,
    pub name: &'a str,
    pub source: &'a str,
}

/// A delivery to write: due at `due_at`, or at once by the store's clock when `None`.
pub struct NewDeliveryRow<'a> {
    pub tenant: &'a str,
    pub instance: &'a str,
    pub park: ParkId,
    pub kind: &'a DeliveryKind,
    pub due_at: Option<Timestamp>,
}

impl<'a> From<&'a NewDelivery> for NewDeliveryRow<'a> {
    /// An asked delivery, due at its own time.
    fn from(delivery: &'a NewDelivery) -> NewDeliveryRow<'a> {
        NewDeliveryRow {
            tenant: &delivery.tenant,
            instance: &delivery.instance,
            park: delivery.park,
            kind: &delivery.kind,
            due_at: Some(delivery.due_at),
        }
    }
}

/// The fields of an [`sutra_store::Arm::Wait`]: the park's correlation alias.
pub struct WaitArm<'a> {
    pub instance: &'a InstanceInfo,
    pub park: ParkId,
    pub on: Correlation<'a>,
}

/// The fields of an [`sutra_store::Arm::Task`], and the id of its task.
pub struct TaskArm<'a> {
    pub instance: &'a InstanceInfo,
    pub park: ParkId,
    /// [`sutra_store::task_id`].
    pub id: String,
    pub topic: &'a str,
    pub input: &'a Value,
    pub retries: u32,
    pub backoff: SignedDuration,
    pub lock: SignedDuration,
    /// `Some`: armed locked for a worker ([`sutra_store::TakenBy`]).
    pub taken: Option<TakenTask<'a>>,
}

/// The lock a task is armed with when a worker took it in the step that arms it.
pub struct TakenTask<'a> {
    pub worker: &'a str,
    /// The lock's length asked for.
    pub lock: SignedDuration,
    /// Random: the proof of the lock, as a poll's.
    pub lock_token: String,
    /// When the lock runs out as answered to the worker: the lock's length from a moment before
    /// the transaction's writes, on this process's clock. The row's own expiry is never earlier
    /// (see each backend).
    pub expires_at: Timestamp,
}

/// A step's own rows: its instance row (the fenced settle, or a start's insert), its history,
/// the waits and deliveries of the parks it resolves, and the tasks it arms — what every step
/// writes, which a backend may write in one statement ([`StepStatements::write_rows`]).
pub struct StepRows<'a> {
    /// The claim the step settles under; `None` inserts a new, unowned instance.
    pub claim: Option<&'a ClaimToken>,
    pub snapshot: &'a Snapshot,
    /// [`sutra_store::StepCommit::held_by`].
    pub held_by: Option<&'a str>,
    pub history: &'a [HistoryEvent],
    /// Parks whose wait and pending deliveries are deleted (their tasks are resolved before).
    pub cleared: &'a [Disarm],
    pub tasks: &'a [TaskArm<'a>],
    /// A start's message: its inbox row is inserted before anything else, unless an instance
    /// waits on its correlation key (the message is a relay) or another start consumed it
    /// already; either way nothing is written.
    pub message: Option<&'a InboxEntry>,
}

/// What [`StepStatements::write_rows`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wrote {
    /// Every row.
    Rows,
    /// Nothing: the settle's claim no longer holds.
    ClaimLost,
    /// Nothing: an instance waits on the start message's key.
    Waited,
    /// Nothing: another start consumed the message (its inbox row is there).
    Consumed,
}

/// A backend the scripts can begin transactions on, and what the store does on it that is not
/// a statement.
pub trait Backend: Send + Sync + 'static {
    type Tx: ClaimStatements
        + StepStatements
        + DeliveryStatements
        + TaskStatements
        + IntakeStatements
        + OutboxStatements
        + LeaseStatements
        + DeploymentStatements
        + ReadStatements
        + PurgeStatements
        + ScalingStatements
        + 'static;

    /// Begins a unit of work scoped to `scope`: a transaction, or (where a backend need not
    /// open one for a statement atomic on its own) whatever its statements begin when they run.
    fn begin(&self, scope: Scope<'_>) -> impl Future<Output = Result<Self::Tx>> + Send;

    /// [`Backend::begin`], for work whose commit may be lost with a crash of the database
    /// because losing it only means doing it again (a poll's locks: see
    /// [`sutra_store::Tasks::poll_tasks`]); a backend may answer its commit before it is
    /// flushed. By default it is any other unit of work.
    fn begin_redoable(&self, scope: Scope<'_>) -> impl Future<Output = Result<Self::Tx>> + Send {
        self.begin(scope)
    }

    /// [`sutra_store::Leases::shared_by_replicas`].
    fn shared_by_replicas(&self) -> bool;

    /// [`sutra_store::Deployments::deployment_notice`]: a backend that cannot tell never
    /// returns.
    fn deployment_notice(&self) -> impl Future<Output = Result<()>> + Send {
        std::future::pending()
    }

    /// [`sutra_store::Steps::end_notice`]: a backend that cannot tell never returns.
    fn end_notice(&self) -> impl Future<Output = Result<EndNotice>> + Send {
        std::future::pending()
    }
}

/// The statements more than one script runs, and the transaction's end.
pub trait Statements: Send + Sized {
    /// Commits; dropping the transaction instead rolls it back.
    fn commit(self) -> impl Future<Output = Result<()>> + Send;

    /// Opens the next member of a group (`sutra_store::Group::member`): from here on the
    /// transaction acts for `tenant`, and holds whatever lock its statements need to.
    fn begin_member(&mut self, tenant: &str) -> impl Future<Output = Result<()>> + Send;

    /// Orders this transaction with every other that names any of `on`, until it ends.
    fn serialize(&mut self, on: &[LockOn<'_>]) -> impl Future<Output = Result<()>> + Send;

    fn insert_delivery(
        &mut self,
        delivery: NewDeliveryRow<'_>,
    ) -> impl Future<Output = Result<DeliveryId>> + Send;

    /// Inserts a message's inbox row unless one exists; whether this insert made it.
    fn insert_inbox(
        &mut self,
        tenant: &str,
        entry: &InboxEntry,
    ) -> impl Future<Output = Result<bool>> + Send;

    fn inbox_answer(
        &mut self,
        key: InboxKey<'_>,
    ) -> impl Future<Output = Result<Option<InboxAnswer>>> + Send;

    fn find_wait(
        &mut self,
        on: Correlation<'_>,
    ) -> impl Future<Output = Result<Option<WaitTarget>>> + Send;
}

/// The statements of the claim (`claim`).
pub trait ClaimStatements: Statements {
    /// Takes the instance's claim for its owner if it is free, already the owner's, or older than
    /// the timeout by the store's clock, and grows the fence; `None`, having written
    /// nothing, otherwise.
    fn claim(
        &mut self,
        claim: &NewClaim<'_>,
    ) -> impl Future<Output = Result<Option<ClaimedRow>>> + Send;

    /// Locks the instance's row for this transaction if the claim predicate holds and no other
    /// transaction holds the row (skipping it, never waiting); its fence, snapshot and holder,
    /// or `None`, having written nothing. The claim of a group member ([`ClaimKind::Locked`]).
    ///
    /// [`ClaimKind::Locked`]: sutra_store::ClaimKind::Locked
    fn lock_claimable(
        &mut self,
        claim: &NewClaim<'_>,
    ) -> impl Future<Output = Result<Option<ClaimedRow>>> + Send;

    /// [`ClaimStatements::lock_claimable`], then, if the row is claimed,
    /// [`TaskStatements::complete_locked`] of the task: what each returned. By default the two
    /// statements; a backend may make them one.
    fn lock_claimable_completing(
        &mut self,
        claim: &NewClaim<'_>,
        task: &str,
        lock_token: &str,
    ) -> impl Future<Output = Result<(Option<ClaimedRow>, Option<CompletedRow>)>> + Send
    where
        Self: TaskStatements,
    {
        async move {
            let Some(claimed) = self.lock_claimable(claim).await? else {
                return Ok((None, None));
            };
            let completed = self.complete_locked(claim.tenant, task, lock_token).await?;
            Ok((Some(claimed), completed))
        }
    }

    fn instance_exists(
        &mut self,
        tenant: &str,
        instance: &str,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Clears the claim if `token` still holds it.
    fn release(
        &mut self,
        tenant: &str,
        instance: &str,
        token: &ClaimToken,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Clears every claim older than `claim_timeout`, counting a recovery on each; returns them.
    fn sweep(
        &mut self,
        claim_timeout: SignedDuration,
    ) -> impl Future<Output = Result<Vec<SweptRow>>> + Send;
}

/// The statements of a step's commit (`commit`).
pub trait StepStatements: Statements {
    /// Tells the other processes on the store, once this transaction commits, that `instances`
    /// ended ([`sutra_store::Steps::end_notice`]). Sent once per transaction, for every step
    /// in it that announces one.
    fn announce_ended(&mut self, instances: &[String]) -> impl Future<Output = Result<()>> + Send;

    /// Writes `rows`, or nothing at all when the settle's claim no longer holds or a start's
    /// message is not its to consume.
    fn write_rows(&mut self, rows: &StepRows<'_>) -> impl Future<Output = Result<Wrote>> + Send;

    /// Cancels the park's task if a worker may still take it (available or locked).
    fn cancel_task(
        &mut self,
        instance: &str,
        park: ParkId,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Inserts a correlation alias unless the key is taken; whether this insert made it.
    fn insert_wait(&mut self, wait: &WaitArm<'_>) -> impl Future<Output = Result<bool>> + Send;

    /// Deletes and returns the oldest live buffered message on the key, if any.
    fn take_buffered(
        &mut self,
        on: Correlation<'_>,
    ) -> impl Future<Output = Result<Option<Value>>> + Send;

    fn insert_outbox(
        &mut self,
        instance: &InstanceInfo,
        entries: &[OutboxEntry],
    ) -> impl Future<Output = Result<()>> + Send;

    /// Deletes the delivery the step applied.
    fn take_delivery(
        &mut self,
        instance: &str,
        delivery: DeliveryId,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Writes the answer to a consumed message over whatever inbox row it had.
    fn record_consumed(
        &mut self,
        tenant: &str,
        entry: &InboxEntry,
    ) -> impl Future<Output = Result<()>> + Send;
}

/// The statements of the deliveries (`deliveries`); steps and the task scripts insert
/// them ([`Statements::insert_delivery`]).
pub trait DeliveryStatements: Statements {
    /// Deliveries due by the store's clock, oldest due first, each marked as handed out: one
    /// dispatch more, due again `redeliver_after` later. A row another dispatcher is marking is
    /// skipped, never handed out twice. The rows read as they came due, their dispatches
    /// counting this one.
    fn due_deliveries(
        &mut self,
        limit: u32,
        redeliver_after: SignedDuration,
    ) -> impl Future<Output = Result<Vec<DeliveryRow>>> + Send;

    fn delivery(
        &mut self,
        id: DeliveryId,
    ) -> impl Future<Output = Result<Option<DeliveryRow>>> + Send;

    /// Moves the delivery's due time to `until`, counting a refused attempt and clearing its
    /// dispatches.
    fn defer(
        &mut self,
        id: DeliveryId,
        until: Timestamp,
    ) -> impl Future<Output = Result<()>> + Send;

    fn discard(&mut self, id: DeliveryId) -> impl Future<Output = Result<()>> + Send;

    /// The earliest due time, in microseconds.
    fn next_due(&mut self) -> impl Future<Output = Result<Option<i64>>> + Send;
}

/// The statements of the pull surface's scripts (`tasks`).
pub trait TaskStatements: Statements {
    /// When the next task of the topics is available or its lock expires, in microseconds.
    fn next_task_at(
        &mut self,
        tenant: &str,
        topics: &[String],
    ) -> impl Future<Output = Result<Option<i64>>> + Send;

    /// Turns terminal every task of the tenant whose last attempt's lock expired; returns them.
    fn exhaust_expired(
        &mut self,
        tenant: &str,
    ) -> impl Future<Output = Result<Vec<ExpiredRow>>> + Send;

    /// Locks up to `poll.max` available tasks and expired ones within their budget, oldest
    /// first, each with a fresh token; and, when it locked fewer than that, [`Self::next_task_at`]
    /// as it is after these locks (microseconds), so that the next poll knows how long it may
    /// wait without looking.
    fn lock_tasks(
        &mut self,
        poll: &TaskPoll,
    ) -> impl Future<Output = Result<(Vec<LockedTask>, Option<i64>)>> + Send;

    /// Reads the task, held until the transaction ends, and the store's clock to judge its lock
    /// by.
    fn held_task(
        &mut self,
        tenant: &str,
        id: &str,
    ) -> impl Future<Output = Result<Option<(HeldRow, Timestamp)>>> + Send;

    /// Completes the task if `lock_token` holds its lock now, by the store's clock; writes
    /// nothing otherwise.
    fn complete_locked(
        &mut self,
        tenant: &str,
        id: &str,
        lock_token: &str,
    ) -> impl Future<Output = Result<Option<CompletedRow>>> + Send;

    /// The lock ends: the task leaves `locked` for `state`.
    fn end_lock(&mut self, id: &str, state: TaskState) -> impl Future<Output = Result<()>> + Send;

    /// The lock ends and the task is available again once `after` has passed, `spent` attempts
    /// later: one for a failed attempt within the budget, none for a task its worker handed back.
    fn reopen_task(
        &mut self,
        id: &str,
        spent: u32,
        after: SignedDuration,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Moves the lock's deadline to `lock` from now; returns it.
    fn extend_lock(
        &mut self,
        id: &str,
        lock: SignedDuration,
    ) -> impl Future<Output = Result<Timestamp>> + Send;
}

/// The statement of intake's script (`intake`).
pub trait IntakeStatements: Statements {
    fn insert_buffered(
        &mut self,
        tenant: &str,
        message: &BufferedMessage,
    ) -> impl Future<Output = Result<()>> + Send;
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

/// The statements of the outbox worker's side (`outbox`); steps write the rows
/// ([`StepStatements::insert_outbox`]).
pub trait OutboxStatements: Statements {
    /// Stamps up to `batch` rows due for sending whose claim is missing or older than
    /// `stale_after`; returns them in the order they are handed out: oldest due first, then in
    /// the order they were written.
    fn claim_outbox(
        &mut self,
        batch: u32,
        stale_after: SignedDuration,
    ) -> impl Future<Output = Result<Vec<ClaimedOutboxRow>>> + Send;

    fn outbox_sent(&mut self, id: OutboxId) -> impl Future<Output = Result<()>> + Send;

    /// Records a failed send of a row neither sent nor poisoned.
    fn outbox_failed(
        &mut self,
        id: OutboxId,
        error: &str,
        retry: OutboxRetry,
    ) -> impl Future<Output = Result<()>> + Send;
}

/// The statements of the lease rows (`leases`).
pub trait LeaseStatements: Statements {
    /// Inserts or takes over the role's row for the holder, unless another holder's lease is
    /// live; the row, or `None` having written nothing.
    fn acquire_lease(
        &mut self,
        lease: &NewLease<'_>,
    ) -> impl Future<Output = Result<Option<LeaseRow>>> + Send;

    /// Ends `holder`'s lease on `role` now, unless it ended already.
    fn release_lease(
        &mut self,
        role: &str,
        holder: &str,
    ) -> impl Future<Output = Result<()>> + Send;

    fn leases(&mut self) -> impl Future<Output = Result<Vec<LeaseRow>>> + Send;
}

/// The reads of the API (`reads`).
pub trait ReadStatements: Statements {
    fn instance_row(
        &mut self,
        tenant: &str,
        id: &str,
    ) -> impl Future<Output = Result<Option<InstanceRow>>> + Send;

    /// The listing [`crate::listings::instances`] builds.
    fn instance_rows(
        &mut self,
        tenant: &str,
        filter: &InstanceFilter,
    ) -> impl Future<Output = Result<Vec<InstanceRow>>> + Send;

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

/// The scaling signal's counts (`scaling`), each the statement of the same name there.
pub trait ScalingStatements: Statements {
    /// Buffered messages, pending outbox rows, locked tasks.
    fn waiting(&mut self) -> impl Future<Output = Result<(i64, i64, i64)>> + Send;
    fn tasks_available(&mut self) -> impl Future<Output = Result<Vec<(String, i64)>>> + Send;
    fn instances_by_status(&mut self) -> impl Future<Output = Result<Vec<(String, i64)>>> + Send;
}

/// The purger's deletions (`purge`), each of at most `batch` rows; each returns how many
/// it deleted.
pub trait PurgeStatements: Statements {
    /// Terminal instances last updated longer ago than `retention` (never `failed` ones), with
    /// the inbox rows of the messages they consumed.
    fn purge_instances(
        &mut self,
        retention: SignedDuration,
        batch: u32,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Expired buffered messages, and their inbox rows while those say only that the message was
    /// buffered.
    fn purge_buffered(&mut self, batch: u32) -> impl Future<Output = Result<u64>> + Send;

    /// Outbox rows sent longer ago than `retention`; pending and poisoned rows stay.
    fn purge_outbox(
        &mut self,
        retention: SignedDuration,
        batch: u32,
    ) -> impl Future<Output = Result<u64>> + Send;
}

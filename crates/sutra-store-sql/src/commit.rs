//! A step's commit (SPEC §5.2): one transaction whose first statement decides whether the step
//! may land at all — the fenced release of the claim, or a start's inbox row — followed by every
//! row of the step. Any error returns before the commit, and dropping the transaction rolls it
//! back: a refused step has written nothing.
//!
//! On a store with other writers running at the same time, the fenced update holds the
//! instance's row lock to the end, so no claim, sweep or other commit interleaves with the step;
//! the one race left between transactions on different rows — a park and an early message on the
//! same correlation key — is ordered by [`Statements::serialize`] (see `waits`).

use std::future::Future;

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use sutra_core::snapshot::{InstanceInfo, ParkId, ParkSort, Snapshot, Status};
use sutra_core::step::{Disarm, HistoryEvent, Message};
use sutra_store::codec::corrupt;
use sutra_store::{
    Arm, ClaimKind, ClaimToken, Committed, DeliveryId, DeliveryKind, EndNotice, Error, InboxAnswer,
    InboxEntry, LockedTask, NewChild, OutboxEntry, Report, Result, StepCommit, Steps, TaskState,
    WaitTarget, task_id,
};
use uuid::Uuid;

use crate::statements::{Backend, Correlation, InboxKey, NewDeliveryRow, Scope, Statements};
use crate::store::SqlStore;
use crate::waits::{ArmedWait, WaitArm, lock_then_find_each, lock_waits_refusing_taken_aliases};

#[async_trait::async_trait]
impl<B: Backend> Steps for SqlStore<B> {
    async fn commit(&self, step: &StepCommit) -> Result<Committed> {
        let now = self.backend().clock().now();
        self.once(Scope::Tenant(&step.snapshot.instance.tenant), async |tx| {
            let committed = write_step(tx, step, None, now).await?;
            if step.announce_end {
                let ended = std::slice::from_ref(&step.snapshot.instance.id);
                tx.announce_ended(ended).await?;
            }
            Ok(committed)
        })
        .await
    }

    async fn end_notice(&self) -> Result<EndNotice> {
        self.backend().end_notice().await
    }
}

/// Every row of a step, in the caller's transaction (its own, or a group's). `resolved` is the
/// park whose task this transaction completed already: there is no task of it left to cancel.
/// `now` is when a task armed locked for a worker starts its lock, as the worker is told.
///
/// A taken alias refuses first, before any write; then come the cancels of the tasks of the
/// task parks it resolves, which a worker may still hold (a `receive`'s or a timer's park has
/// none to look for), then the step's own rows ([`StepStatements::write_rows`]) — the settle
/// guarded by the claim's fence, or the start's insert led by its message's inbox row, either of
/// which may refuse having written nothing — and last the rows a park arms that another
/// transaction may race for.
pub(crate) async fn write_step<T: StepStatements>(
    tx: &mut T,
    step: &StepCommit,
    resolved: Option<ParkId>,
    now: Timestamp,
) -> Result<Committed> {
    let instance = &step.snapshot.instance;
    refuse_foreign_children(step)?;
    lock_waits_refusing_taken_aliases(tx, step).await?;
    let mut writer = StepWriter {
        tx,
        step,
        instance,
        now,
    };
    let tasks: Vec<ParkId> = step
        .disarms
        .iter()
        .filter(|disarm| disarm.sort == ParkSort::Task && Some(disarm.park) != resolved)
        .map(|disarm| disarm.park)
        .collect();
    if !tasks.is_empty() {
        writer.cancel_tasks(&tasks).await?;
    }
    let (taken, mut due_now) = writer.write_rows().await?;
    // Races of this step whose arm matched a buffered message already: their other arms take
    // none, so that a losing arm's message is not consumed by a delivery that can never apply.
    let mut matched_races = Vec::new();
    for arm in &step.arms {
        let group = match arm {
            Arm::Wait { group, .. } => *group,
            _ => None,
        };
        let buffered = group.is_none_or(|group| !matched_races.contains(&group));
        let matched = writer.arm(arm, buffered).await?;
        if let (Some(_), Some(group)) = (matched, group) {
            matched_races.push(group);
        }
        due_now.extend(matched);
    }
    writer.tx.insert_outbox(instance, &step.outbox).await?;
    if let Some(taken) = step.taken {
        writer.tx.take_delivery(&instance.id, taken).await?;
    }
    Ok(Committed { due_now, taken })
}

/// Inserts the inbox row of a message unless one exists: whoever's insert produced the row owns
/// the message. Returns the first answer when the message was consumed already.
pub async fn insert_inbox_unless_consumed<T: Statements>(
    tx: &mut T,
    tenant: &str,
    entry: &InboxEntry,
) -> Result<Option<InboxAnswer>> {
    if tx.insert_inbox(tenant, entry).await? {
        return Ok(None);
    }
    first_answer(tx, tenant, entry).await.map(Some)
}

/// The answer of the first to consume a message whose inbox row this transaction did not make.
/// The read is a statement after the insert that found the row, so (READ COMMITTED) it sees the
/// row a racing insert committed.
pub(crate) async fn first_answer<T: Statements>(
    tx: &mut T,
    tenant: &str,
    entry: &InboxEntry,
) -> Result<InboxAnswer> {
    match tx
        .inbox_answer(InboxKey {
            tenant,
            channel: &entry.channel,
            event_id: &entry.event_id,
        })
        .await?
    {
        Some(first) => Ok(first),
        // Only a purge between the two statements gets here: nothing was written, so try again.
        None => Err(Error::Unavailable(format!(
            "the inbox row of `{}` on `{}` vanished while it was read",
            entry.event_id, entry.channel
        ))),
    }
}

/// Refuses, before anything is written, a child the store would write other than its snapshot
/// says: a child lives in its parent's tenant (the rows are written in the parent's scope), and
/// is inserted `created`, the status its row is given. Either is a caller's bug.
fn refuse_foreign_children(step: &StepCommit) -> Result<()> {
    let parent = &step.snapshot.instance;
    for child in &step.children {
        let info = &child.snapshot.instance;
        if info.tenant != parent.tenant || child.snapshot.status != Status::Created {
            return Err(Error::Corrupt(format!(
                "the child `{}` of `{}` is not a created instance of its tenant `{}`",
                info.id, parent.id, parent.tenant
            )));
        }
    }
    Ok(())
}

struct StepWriter<'s, T> {
    tx: &'s mut T,
    step: &'s StepCommit,
    instance: &'s InstanceInfo,
    now: Timestamp,
}

impl<T: StepStatements> StepWriter<'_, T> {
    /// Writes the instance's row and every row that only lands beside it. A settle writes the
    /// snapshot and clears the owner if and only if the claim is still ours: the fence makes a
    /// holder whose claim lapsed (and was taken) unable to commit. The row lock it takes is held
    /// until the commit. A start inserts a new, unowned instance. Returns the tasks it armed
    /// locked for a worker, and the deliveries it asked due now (its calls' rows).
    async fn write_rows(&mut self) -> Result<(Vec<LockedTask>, Vec<DeliveryId>)> {
        let step = self.step;
        let locks = task_locks(&step.arms, self.now);
        let tasks = task_arms(self.instance, &step.arms, &locks);
        let cancelled = cancelled_calls(step);
        let rows = step_rows(step, &tasks, &cancelled);
        match self.tx.write_rows(&rows).await? {
            Wrote::Rows { asked } => Ok((tasks.iter().filter_map(locked_task).collect(), asked)),
            Wrote::ClaimLost => Err(Error::ClaimLost),
            Wrote::Waited => {
                let entry = rows.message.expect("only a start's message is waited for");
                Err(Error::Waited {
                    channel: entry.channel.clone(),
                    key: entry.key.clone().unwrap_or_default(),
                })
            }
            Wrote::Consumed => {
                let entry = rows.message.expect("only a start's message is consumed");
                Err(Error::Duplicate(
                    first_answer(self.tx, &self.instance.tenant, entry).await?,
                ))
            }
        }
    }

    /// Cancels the tasks of the parks a worker may still take, in one statement whatever their
    /// number (a for-each withdrawing its bodies), before the parks' other rows are deleted
    /// ([`StepRows::cleared`]): a worker completing one concurrently holds its row, so the
    /// update waits for that completion to commit, and the delete that follows — a later
    /// statement — then sees and resolves the delivery the completion wrote.
    async fn cancel_tasks(&mut self, parks: &[ParkId]) -> Result<()> {
        self.tx.cancel_tasks(&self.instance.id, parks).await
    }

    /// Writes the row behind a park that [`StepWriter::write_rows`] did not (a wait or a
    /// timer); returns the delivery of a buffered message it matched, when `buffered` lets a
    /// wait take one.
    async fn arm(&mut self, arm: &Arm, buffered: bool) -> Result<Option<DeliveryId>> {
        match arm {
            Arm::Wait {
                park, channel, key, ..
            } => self.arm_wait(*park, channel, key, buffered).await,
            Arm::Timer { park, due } => {
                self.deliver(*park, &DeliveryKind::Timer, Some(*due))
                    .await?;
                Ok(None)
            }
            Arm::Task { .. } => Ok(None),
        }
    }

    /// Inserts the correlation alias, then takes the oldest live buffered message for it, in
    /// this same transaction: an early message and the park cannot miss each other. The alias
    /// stays: the relay delivery consumes it like any relay.
    async fn arm_wait(
        &mut self,
        park: ParkId,
        channel: &str,
        key: &str,
        buffered: bool,
    ) -> Result<Option<DeliveryId>> {
        let on = Correlation {
            tenant: &self.instance.tenant,
            channel,
            key,
        };
        let wait = WaitArm {
            instance: self.instance,
            park,
            on,
        };
        let early = match self.tx.insert_wait(&wait, buffered).await? {
            ArmedWait::KeyTaken => {
                // Taken since `lock_waits_refusing_taken_aliases` looked: this step has written
                // rows already.
                return Err(Error::Unavailable(format!(
                    "the correlation key `{key}` on `{channel}` was taken while the step was \
                     written; retry"
                )));
            }
            ArmedWait::Armed { early: None } => return Ok(None),
            ArmedWait::Armed { early: Some(early) } => early,
        };
        let message: Message =
            serde_json::from_value(early).map_err(|e| corrupt("a buffered message", e))?;
        let relay = DeliveryKind::Relay { message };
        self.deliver(park, &relay, None).await.map(Some)
    }

    async fn deliver(
        &mut self,
        park: ParkId,
        kind: &DeliveryKind,
        due_at: Option<jiff::Timestamp>,
    ) -> Result<DeliveryId> {
        let row = NewDeliveryRow {
            tenant: &self.instance.tenant,
            instance: &self.instance.id,
            park,
            kind,
            due_at,
        };
        self.tx.insert_delivery(row).await
    }
}

/// The parks of sort `Call` the step disarms: every live child waiting on one is asked to cancel.
/// The park the step's event answered is among them when the executor consumed it (a failed
/// child whose error was caught is cancelled, which a failed child allows); the executor leaves
/// out a park it keeps waiting on.
fn cancelled_calls(step: &StepCommit) -> Vec<ParkId> {
    step.disarms
        .iter()
        .filter(|disarm| disarm.sort == ParkSort::Call)
        .map(|disarm| disarm.park)
        .collect()
}

/// A step's own rows, with its task arms' rows and the `Call` parks it disarms.
pub(crate) fn step_rows<'a>(
    step: &'a StepCommit,
    tasks: &'a [TaskArm<'a>],
    cancelled_calls: &'a [ParkId],
) -> StepRows<'a> {
    StepRows {
        claim: step.claim.as_ref(),
        snapshot: &step.snapshot,
        held_by: step.held_by.as_deref(),
        history: &step.history,
        cleared: &step.disarms,
        tasks,
        message: step.inbox.as_ref().filter(|_| step.claim.is_none()),
        consumed: step.inbox.as_ref().filter(|_| step.claim.is_some()),
        children: &step.children,
        cancelled_calls,
        report: step.report.as_ref(),
    }
}

/// The lock a task arm taken by a worker is armed with: its proof and when it runs out.
#[derive(Debug, Clone)]
pub(crate) struct ArmLock {
    lock_token: String,
    expires_at: Timestamp,
}

/// The lock of each of `arms` (in their order) that a worker took in the step, `now` being a
/// moment before the transaction's writes: drawn once, so that the rows written and the task
/// the worker is handed agree however late the rows are written.
pub(crate) fn task_locks(arms: &[Arm], now: Timestamp) -> Vec<Option<ArmLock>> {
    arms.iter()
        .map(|arm| match arm {
            Arm::Task {
                taken_by: Some(taken_by),
                ..
            } => Some(ArmLock {
                lock_token: Uuid::new_v4().to_string(),
                expires_at: lock_expiry(now, taken_by.lock),
            }),
            _ => None,
        })
        .collect()
}

/// The task rows of `arms`, with their `locks` ([`task_locks`]).
pub(crate) fn task_arms<'s>(
    instance: &'s InstanceInfo,
    arms: &'s [Arm],
    locks: &[Option<ArmLock>],
) -> Vec<TaskArm<'s>> {
    arms.iter()
        .zip(locks)
        .filter_map(|(arm, lock)| task_arm(instance, arm, lock.as_ref()))
        .collect()
}

/// The task row of a task arm; `None` for the other arms.
fn task_arm<'s>(
    instance: &'s InstanceInfo,
    arm: &'s Arm,
    lock: Option<&ArmLock>,
) -> Option<TaskArm<'s>> {
    let Arm::Task {
        park,
        topic,
        input,
        retries,
        backoff,
        lock: lock_length,
        taken_by,
    } = arm
    else {
        return None;
    };
    let taken = taken_by
        .as_ref()
        .zip(lock)
        .map(|(taken_by, lock)| TakenTask {
            worker: &taken_by.worker,
            lock: taken_by.lock,
            lock_token: lock.lock_token.clone(),
            expires_at: lock.expires_at,
        });
    Some(TaskArm {
        instance,
        park: *park,
        id: task_id(&instance.id, *park),
        topic,
        input,
        retries: *retries,
        backoff: *backoff,
        lock: *lock_length,
        taken,
    })
}

/// `lock` after `now`, to the microsecond the stores keep: a worker is never told of a moment
/// later than the row's.
fn lock_expiry(now: Timestamp, lock: SignedDuration) -> Timestamp {
    // Saturating adds fail only for calendar units, which a signed duration has none of.
    let at = now.saturating_add(lock).unwrap_or(Timestamp::MAX);
    Timestamp::from_microsecond(at.as_microsecond()).unwrap_or(at)
}

/// The task as its worker gets it, when `task` was armed locked for one.
pub(crate) fn locked_task(task: &TaskArm<'_>) -> Option<LockedTask> {
    let taken = task.taken.as_ref()?;
    Some(LockedTask {
        id: task.id.clone(),
        instance: task.instance.id.clone(),
        topic: task.topic.to_owned(),
        input: task.input.clone(),
        attempt: 1,
        lock_token: taken.lock_token.clone(),
        lock_expires_at: taken.expires_at,
    })
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

impl TaskArm<'_> {
    /// Available, or locked when a worker took it.
    pub fn state(&self) -> TaskState {
        match self.taken {
            Some(_) => TaskState::Locked,
            None => TaskState::Available,
        }
    }
}

/// [`StepStatements::write_plain`] one step at a time, each its own statement.
pub async fn write_each<T: StepStatements>(tx: &mut T, plain: &[StepRows<'_>]) -> Result<usize> {
    let mut landed = 0;
    for rows in plain {
        if let Wrote::Rows { .. } = tx.write_rows(rows).await? {
            landed += 1;
        }
    }
    Ok(landed)
}

/// What a settle's fenced update checks and adds, by its claim's kind: the owner a durable
/// claim wrote (none for a locked claim, which wrote nothing), and what the settle adds to the
/// fence the claim read (a durable claim grew it already; a locked one's step grows it here).
pub fn settle_fence(token: &ClaimToken) -> (Option<&str>, i64) {
    match token.kind {
        ClaimKind::Durable => (Some(token.owner.0.as_str()), 0),
        ClaimKind::Locked => (None, 1),
    }
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
    /// A settle's message (a relay's): its answer is written over whatever inbox row it had (the
    /// row a buffered message left, whose answer had no instance yet), only if the settle lands
    /// — in the same statement where a backend's statements are round trips.
    pub consumed: Option<&'a InboxEntry>,
    /// The instances the step calls: each row `created`, with `parent` and `parent_park`, and
    /// its `start` delivery due now ([`sutra_store::DeliveryKind::Start`]).
    pub children: &'a [NewChild],
    /// Parks of sort `Call` the step disarms: a `cancel` delivery due now for each child of the
    /// instance waiting on one of them that has not ended (`completed` or `cancelled`) — as the
    /// statement sees the rows: a child of [`StepRows::children`] is not among them (the
    /// executor drops the call of a park it makes and resolves in one step).
    pub cancelled_calls: &'a [ParkId],
    /// The ending child's report: a `child_ended` delivery due now for the parent's park, only
    /// if the parent is there and has not ended.
    pub report: Option<&'a Report>,
}

/// What [`StepStatements::write_rows`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wrote {
    /// Every row; `asked` are the deliveries due now that the calls' rows asked (the children's
    /// starts and cancels, the report), for [`sutra_store::Committed::due_now`].
    Rows { asked: Vec<DeliveryId> },
    /// Nothing: the settle's claim no longer holds.
    ClaimLost,
    /// Nothing: an instance waits on the start message's key.
    Waited,
    /// Nothing: another start consumed the message (its inbox row is there).
    Consumed,
}

/// The statements of a step's commit (`commit`).
pub trait StepStatements: Statements {
    /// Tells the other processes on the store, once this transaction commits, that `instances`
    /// ended ([`sutra_store::Steps::end_notice`]). Sent once per transaction, for every step
    /// in it that announces one.
    fn announce_ended(&mut self, instances: &[String]) -> impl Future<Output = Result<()>> + Send;

    /// Writes `rows`, or nothing at all when the settle's claim no longer holds or a start's
    /// message is not its to consume; a settle's consumed message ([`StepRows::consumed`])
    /// with them.
    fn write_rows(&mut self, rows: &StepRows<'_>) -> impl Future<Output = Result<Wrote>> + Send;

    /// Writes the rows of several plain steps of one kind — all settles or all starts
    /// (`deferred::deferrable`: no children, cancels or report; a start's message leads it) —
    /// each as [`StepStatements::write_rows`] would and each on its own terms: a settle whose
    /// fence no longer holds, or a start whose message is consumed or awaited, writes nothing
    /// of any kind, and the others land. Returns how many landed. The steps are of distinct
    /// instances. This writes them one by one; a backend whose statements are round trips
    /// writes them all in one (decision 0059).
    fn write_plain(
        &mut self,
        plain: &[StepRows<'_>],
    ) -> impl Future<Output = Result<usize>> + Send {
        write_each(self, plain)
    }

    /// Cancels the tasks of `parks` that a worker may still take (available or locked), in one
    /// statement.
    fn cancel_tasks(
        &mut self,
        instance: &str,
        parks: &[ParkId],
    ) -> impl Future<Output = Result<()>> + Send;

    /// Takes the advisory locks of `on`, all of one tenant ([`Statements::serialize`]), and reads
    /// who holds each key, in `on`'s order, as the statement saw the waits before the locks were taken. This
    /// runs [`Statements::serialize`] and then [`Statements::find_wait`] per key; a backend whose
    /// statements are round trips does it in one.
    fn lock_and_find_waits(
        &mut self,
        on: &[Correlation<'_>],
    ) -> impl Future<Output = Result<Vec<Option<WaitTarget>>>> + Send {
        lock_then_find_each(self, on)
    }

    /// Inserts a correlation alias unless the key is taken and, when it made it and `buffered`
    /// asks, deletes and returns the oldest live buffered message on the key.
    fn insert_wait(
        &mut self,
        wait: &WaitArm<'_>,
        buffered: bool,
    ) -> impl Future<Output = Result<ArmedWait>> + Send;

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
}

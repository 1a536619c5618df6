//! The pull surface's scripts (SPEC §5.5): a poll, and a worker's completion, failure and
//! extension of a task. Each is one transaction: the task row is read (and held) inside it,
//! judged by the rules `sutra_store` gives every backend ([`HeldRow::check`], [`after_failure`],
//! [`retry_backoff`]) against the store's clock, and written together with the delivery that
//! carries its outcome to the instance — a completion and its delivery are one fact. Steps write
//! and cancel the task rows (`commit`).

use std::future::Future;

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use sutra_core::step::TaskError;
use sutra_store::codec::{park_id, timestamp, unsigned};
use sutra_store::{
    DeliveryId, DeliveryKind, Error, HeldTask, LockedTask, Polled, Result, TaskFailure, TaskPoll,
    TaskState, Tasks, after_failure, lock_expired, retry_backoff,
};

use crate::rows::{CompletedRow, ExpiredRow, Held, HeldRow};
use crate::statements::{Backend, NewDeliveryRow, Scope, Statements};
use crate::store::SqlStore;

#[async_trait::async_trait]
impl<B: Backend> Tasks for SqlStore<B> {
    async fn poll_tasks(&self, poll: &TaskPoll) -> Result<Polled> {
        let mut tx = self
            .backend()
            .begin_redoable(Scope::Tenant(&poll.tenant))
            .await?;
        // The next availability is asked here rather than by the waiting poll's caller: one
        // transaction fewer for every poll that comes back empty, and none at all for a worker's
        // next poll after a short one, which can wait without looking (the engine's `Looks`).
        let (tasks, next_at) = tx.lock_tasks(poll).await?;
        tx.commit().await?;
        Ok(Polled {
            tasks,
            next_at: next_at.map(timestamp).transpose()?,
        })
    }

    async fn exhaust_expired(&self, tenant: &str) -> Result<Vec<DeliveryId>> {
        self.once(Scope::Tenant(tenant), async |tx| {
            exhaust_expired(tx, tenant).await
        })
        .await
    }

    #[cfg(feature = "conformance")]
    async fn next_task_at(&self, tenant: &str, topics: &[String]) -> Result<Option<Timestamp>> {
        let earliest = self
            .once(Scope::Tenant(tenant), async |tx| {
                tx.next_task_at(tenant, topics).await
            })
            .await?;
        earliest.map(timestamp).transpose()
    }

    async fn complete_task(
        &self,
        tenant: &str,
        id: &str,
        lock_token: &str,
        output: &Value,
    ) -> Result<()> {
        // A refusal's transaction is rolled back before it is answered (`once`): a worker that
        // acts on the answer at once does not find the task's row still locked by it.
        self.once(Scope::Tenant(tenant), async |tx| {
            let task = complete_locked(tx, tenant, id, lock_token).await?;
            deliver_output(tx, tenant, &task, output).await
        })
        .await
    }

    async fn fail_task(
        &self,
        tenant: &str,
        id: &str,
        lock_token: &str,
        failure: &TaskFailure,
    ) -> Result<TaskState> {
        self.once(Scope::Tenant(tenant), async |tx| {
            let held = held(tx, tenant, id, lock_token).await?;
            let state = after_failure(held.attempt, held.retries, failure.retry);
            let TaskError { code, message } = failure.error.clone();
            let outcome = match state {
                TaskState::Available => None,
                TaskState::Failed => Some(DeliveryKind::TaskFailed { code, message }),
                // `after_failure` answers nothing else but terminal.
                _ => Some(DeliveryKind::TaskExhausted { code, message }),
            };
            match outcome {
                None => {
                    let backoff = retry_backoff(held.backoff, held.attempt);
                    tx.reopen_task(id, 1, backoff).await?;
                }
                Some(outcome) => {
                    tx.end_lock(id, state).await?;
                    deliver(tx, tenant, &held, &outcome).await?;
                }
            }
            Ok(state)
        })
        .await
    }

    async fn release_task(&self, tenant: &str, id: &str, lock_token: &str) -> Result<()> {
        self.once(Scope::Tenant(tenant), async |tx| {
            held(tx, tenant, id, lock_token).await?;
            tx.reopen_task(id, 0, SignedDuration::ZERO).await
        })
        .await
    }

    async fn extend_task(
        &self,
        tenant: &str,
        id: &str,
        lock_token: &str,
        lock: SignedDuration,
    ) -> Result<Timestamp> {
        self.once(Scope::Tenant(tenant), async |tx| {
            held(tx, tenant, id, lock_token).await?;
            tx.extend_lock(id, lock).await
        })
        .await
    }
}

/// Completes the task if `lock_token` holds it now, by the store's clock, in the caller's
/// transaction (its own, or a group's): one statement when it does. A refusal writes nothing;
/// the task's row, read then, says why.
pub(crate) async fn complete_locked<T: TaskStatements>(
    tx: &mut T,
    tenant: &str,
    id: &str,
    lock_token: &str,
) -> Result<HeldTask> {
    let completed = tx.complete_locked(tenant, id, lock_token).await?;
    completed_or_why(tx, tenant, id, lock_token, completed).await
}

/// The task `complete_locked` completed, or why it did not.
pub(crate) async fn completed_or_why<T: TaskStatements>(
    tx: &mut T,
    tenant: &str,
    id: &str,
    lock_token: &str,
    completed: Option<CompletedRow>,
) -> Result<HeldTask> {
    if let Some(completed) = completed {
        return Ok(HeldTask {
            instance: completed.instance,
            park: park_id(completed.park)?,
        });
    }
    held(tx, tenant, id, lock_token).await?;
    // The lock the update did not find holds after all: the row changed between the two.
    Err(Error::Unavailable(format!(
        "task {id} changed while it was completed; retry"
    )))
}

/// Records a completed task's output as a delivery to its park, due now.
pub(crate) async fn deliver_output<T: Statements>(
    tx: &mut T,
    tenant: &str,
    task: &HeldTask,
    output: &Value,
) -> Result<()> {
    let completed = DeliveryKind::TaskCompleted {
        output: output.clone(),
    };
    let row = NewDeliveryRow {
        tenant,
        instance: &task.instance,
        park: task.park,
        kind: &completed,
        due_at: None,
    };
    tx.insert_delivery(row).await.map(drop)
}

/// Turns terminal every task of the tenant whose last attempt's lock expired, recording the
/// exhausted delivery of each.
async fn exhaust_expired<T: TaskStatements>(tx: &mut T, tenant: &str) -> Result<Vec<DeliveryId>> {
    let expired = tx.exhaust_expired(tenant).await?;
    let mut due_now = Vec::with_capacity(expired.len());
    for task in expired {
        let TaskError { code, message } = lock_expired(
            task.worker.as_deref(),
            unsigned(task.attempt, "a task attempt")?,
        );
        let exhausted = DeliveryKind::TaskExhausted { code, message };
        let row = NewDeliveryRow {
            tenant,
            instance: &task.instance,
            park: park_id(task.park)?,
            kind: &exhausted,
            due_at: None,
        };
        due_now.push(tx.insert_delivery(row).await?);
    }
    Ok(due_now)
}

/// Reads the task inside the transaction and checks that `lock_token` holds it now, by the
/// store's clock. A refusal returns before anything is written.
pub(crate) async fn held<T: TaskStatements>(
    tx: &mut T,
    tenant: &str,
    id: &str,
    lock_token: &str,
) -> Result<Held> {
    let (row, now): (HeldRow, Timestamp) = tx
        .held_task(tenant, id)
        .await?
        .ok_or_else(|| Error::TaskNotFound(id.to_owned()))?;
    row.check(id, lock_token, now)
}

/// Records a task's outcome as a delivery to its park, due now, in the caller's transaction.
async fn deliver<T: Statements>(
    tx: &mut T,
    tenant: &str,
    held: &Held,
    kind: &DeliveryKind,
) -> Result<DeliveryId> {
    let row = NewDeliveryRow {
        tenant,
        instance: &held.instance,
        park: held.park,
        kind,
        due_at: None,
    };
    tx.insert_delivery(row).await
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

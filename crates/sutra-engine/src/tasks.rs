//! The pull surface (SPEC §5.5): workers long-poll for tasks, then complete, fail or extend them
//! with the lock token a poll gave them.
//!
//! The long wait lives here and in the task row's lock, never in an instance claim: the instance
//! stays suspended and unclaimed while a worker holds its task. The store records an outcome as a
//! delivery in the same transaction as the task update; this module only wakes the dispatcher,
//! which resumes the instance through the ordinary claim. So a completion answered to the worker
//! is durable, and one whose answer was lost is still taken exactly once.
//!
//! A waiting poll sleeps until the earliest moment a task of its topics can become available (a
//! retry's backoff ends, a lock expires), unless this replica wakes it first by arming or
//! rescheduling a task. Tasks armed by other replicas are found by a bounded backstop.

use std::pin::pin;

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use sutra_store::{LockedTask, TaskFailure, TaskPoll, TaskState};
use tokio::time::Instant;

use crate::{Engine, Error, fault};

/// The longest a poll waits: proxies tend to cut connections idle for longer.
pub const MAX_WAIT: SignedDuration = SignedDuration::from_secs(60);
/// The most tasks one poll locks: one short transaction's worth.
pub const MAX_TASKS: u32 = 100;
/// The longest a waiting poll sleeps between looks: the backstop for tasks armed by another
/// replica, which cannot wake this one.
const BACKSTOP: SignedDuration = SignedDuration::from_secs(1);
/// The shortest sleep between looks, so that a clock ahead of the database's cannot make a poll
/// spin on a task that is "already" available.
const FLOOR: SignedDuration = SignedDuration::from_millis(10);

/// A worker's long-poll.
#[derive(Debug, Clone)]
pub struct PollRequest {
    /// `max` is clamped to `1..=`[`MAX_TASKS`].
    pub poll: TaskPoll,
    /// How long to wait when no task is available; capped at [`MAX_WAIT`].
    pub wait: SignedDuration,
}

impl Engine {
    /// Locks up to `max` tasks, waiting up to `wait` for the first to become available. Empty when
    /// none did, or when the replica is shutting down.
    pub async fn poll_tasks(&self, request: PollRequest) -> Result<Vec<LockedTask>, Error> {
        let mut poll = request.poll;
        poll.max = poll.max.clamp(1, MAX_TASKS);
        let wait = request.wait.clamp(SignedDuration::ZERO, MAX_WAIT);
        let deadline = Instant::now() + wait.unsigned_abs();
        let mut ending = self.polls_ending();
        loop {
            // Listening before looking: a task armed between the look and the sleep still wakes.
            let mut woken = pin!(self.shared().tasks_available.notified());
            woken.as_mut().enable();
            let polled = self.store().poll_tasks(&poll).await?;
            if !polled.due_now.is_empty() {
                self.shared().deliveries_due.notify_one();
            }
            let now = Instant::now();
            if !polled.tasks.is_empty() || now >= deadline || *ending.borrow() {
                return Ok(polled.tasks);
            }
            let pause = self.until_next_task(&poll).await?.min(deadline - now);
            tokio::select! {
                () = woken => {}
                () = tokio::time::sleep(pause) => {}
                _ = ending.changed() => {}
            }
        }
    }

    /// Answers every waiting long-poll now, and every later one without waiting: the replica is
    /// going away, and its workers should poll another. Call it before draining HTTP requests,
    /// which would otherwise wait out every poll.
    pub fn end_polls(&self) {
        self.polls_end.send_replace(true);
    }

    fn polls_ending(&self) -> tokio::sync::watch::Receiver<bool> {
        self.polls_end.subscribe()
    }

    /// How long a waiting poll may sleep before a task of its topics could be available.
    async fn until_next_task(&self, poll: &TaskPoll) -> Result<std::time::Duration, Error> {
        let next = self
            .store()
            .next_task_at(&poll.tenant, &poll.topics)
            .await?;
        let pause = next.map_or(BACKSTOP, |at| {
            at.duration_since(Timestamp::now()).clamp(FLOOR, BACKSTOP)
        });
        Ok(pause.unsigned_abs())
    }

    /// Completes a task; the instance resumes with `output` through its claim, at once.
    pub async fn complete_task(
        &self,
        tenant: &str,
        id: &str,
        lock_token: &str,
        output: &Value,
    ) -> Result<(), Error> {
        self.store()
            .complete_task(tenant, id, lock_token, output)
            .await
            .map_err(task_error)?;
        fault::point("after-task-complete");
        self.shared().deliveries_due.notify_one();
        Ok(())
    }

    /// Records a failed attempt; returns where it left the task (available again after a
    /// backoff, failed, or terminal).
    pub async fn fail_task(
        &self,
        tenant: &str,
        id: &str,
        lock_token: &str,
        failure: &TaskFailure,
    ) -> Result<TaskState, Error> {
        let state = self
            .store()
            .fail_task(tenant, id, lock_token, failure)
            .await
            .map_err(task_error)?;
        if state == TaskState::Available {
            // Waiting polls sleep until the next availability they knew of; this one is new.
            self.shared().tasks_available.notify_waiters();
        } else {
            self.shared().deliveries_due.notify_one();
        }
        Ok(state)
    }

    /// Moves a held lock's deadline to `lock` from now; returns the new deadline.
    pub async fn extend_task(
        &self,
        tenant: &str,
        id: &str,
        lock_token: &str,
        lock: SignedDuration,
    ) -> Result<Timestamp, Error> {
        self.store()
            .extend_task(tenant, id, lock_token, lock)
            .await
            .map_err(task_error)
    }
}

fn task_error(error: sutra_store::Error) -> Error {
    match error {
        sutra_store::Error::TaskNotFound(id) => Error::TaskNotFound(id),
        sutra_store::Error::LockLost(detail) => Error::LockLost(detail),
        other => Error::Store(other),
    }
}

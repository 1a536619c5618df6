//! The pull surface's vocabulary (SPEC §5.5): what a worker asks of the store and gets back, and
//! the rules every backend applies the same way — whether a lock token still holds its task, what
//! a failed attempt leads to, and how long a retry backs off.
//!
//! The rules are plain functions here rather than SQL in each backend so that SQLite and
//! PostgreSQL cannot disagree on them; a backend reads the task row inside its write transaction,
//! asks these functions, and writes what they say.

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use sutra_core::codes;
use sutra_core::snapshot::ParkId;
use sutra_core::step::TaskError;

use crate::{DeliveryId, Error, Result};

/// A worker's poll: lock up to `max` tasks of `topics`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskPoll {
    pub tenant: String,
    /// Who takes the locks; recorded on the task and named if its lock expires.
    pub worker: String,
    pub topics: Vec<String>,
    pub max: u32,
    /// How long each lock lasts; `None`: the task node's own `lock`.
    pub lock: Option<SignedDuration>,
}

/// A task locked for a worker.
#[derive(Debug, Clone, PartialEq)]
pub struct LockedTask {
    pub id: String,
    pub instance: String,
    pub topic: String,
    pub input: Value,
    /// Which attempt this lock is, from 1.
    pub attempt: u32,
    /// Proof of the lock, required to complete, fail or extend the task.
    pub lock_token: String,
    pub lock_expires_at: Timestamp,
}

/// What one poll did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Polled {
    pub tasks: Vec<LockedTask>,
    /// When it locked fewer tasks than it asked for: when a task of its topics next becomes
    /// available to a poll (a retry's backoff ends, a lock expires), read in the same transaction after its locks, so that a waiting poll (or the next poll
    /// of the same topics) knows how long it may sleep without asking again. `None` when it
    /// locked as many as it asked for, or when no task of its topics will become available.
    pub next_at: Option<Timestamp>,
}

/// A worker's report that an attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFailure {
    pub error: TaskError,
    /// `false`: a business error, sent to the node's `on-error` at once whatever the budget.
    pub retry: bool,
}

/// Which tasks a listing shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskFilter {
    pub topic: Option<String>,
    pub state: Option<TaskState>,
    /// Keyset cursor: tasks are listed in id order, so `id > after` pages forward.
    pub after: Option<String>,
    /// At most this many; `0` means no limit.
    pub limit: u32,
}

/// An external task row (SPEC §5.5), as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRecord {
    /// `{instance}:{park}`: a park has at most one task.
    pub id: String,
    pub instance: String,
    pub park: ParkId,
    pub topic: String,
    pub input: Value,
    pub state: TaskState,
    /// The attempt the task is on while locked, or the one its next lock will be; from 1.
    pub attempt: u32,
    pub retries: u32,
    /// Who took the last lock.
    pub worker: Option<String>,
    /// When the lock expires, while the task is locked.
    pub locked_until: Option<Timestamp>,
    /// When a poll may take it (later than its creation while a retry backs off).
    pub available_at: Timestamp,
    pub created_at: Timestamp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// Waiting for a worker to poll it.
    Available,
    /// Polled; the lock expires at `locked_until`.
    Locked,
    Completed,
    /// A business error reported by the worker.
    Failed,
    /// Failed past its retry budget.
    Terminal,
    /// Its park was resolved (disarmed) while the task was still available or locked.
    Cancelled,
}

impl TaskState {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Available => "available",
            TaskState::Locked => "locked",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Terminal => "terminal",
            TaskState::Cancelled => "cancelled",
        }
    }

    pub fn parse(text: &str) -> Option<TaskState> {
        [
            TaskState::Available,
            TaskState::Locked,
            TaskState::Completed,
            TaskState::Failed,
            TaskState::Terminal,
            TaskState::Cancelled,
        ]
        .into_iter()
        .find(|state| state.as_str() == text)
    }
}

/// A task's lock as stored, to check a worker's token against.
#[derive(Debug, Clone, Copy)]
pub struct TaskLock<'a> {
    pub state: TaskState,
    pub token: Option<&'a str>,
    pub until: Option<Timestamp>,
}

impl TaskLock<'_> {
    /// Whether `presented` holds task `id` at `now`. A lock that expired is lost even before
    /// another worker takes the task: the expiry already counted as a failed attempt.
    pub fn check(&self, id: &str, presented: &str, now: Timestamp) -> Result<()> {
        let why = match (self.state, self.token, self.until) {
            (TaskState::Locked, Some(token), _) if token != presented => {
                "the lock token does not match: another worker holds it now, or it was never this task's"
            }
            (TaskState::Locked, Some(_), Some(until)) if until > now => return Ok(()),
            (TaskState::Locked, _, _) => "the lock expired",
            (TaskState::Available, _, _) => {
                "the task is not locked (its lock expired or it failed, and it waits for a poll)"
            }
            (TaskState::Completed, _, _) => "the task was already completed",
            (TaskState::Failed | TaskState::Terminal, _, _) => "the task already failed",
            (TaskState::Cancelled, _, _) => {
                "the task was cancelled: its instance no longer waits on it"
            }
        };
        Err(Error::LockLost(format!("task {id}: {why}")))
    }
}

/// The id of a park's task: `{instance}:{park}`. A park has at most one task, and re-arming it
/// (a restore) replaces its earlier, resolved row.
pub fn task_id(instance: &str, park: ParkId) -> String {
    format!("{instance}:{park}")
}

/// The instance a task id names ([`task_id`]); `None` for an id no task can have.
pub fn task_instance(id: &str) -> Option<&str> {
    id.rsplit_once(':').map(|(instance, _)| instance)
}

/// Where a failed attempt leaves the task: [`TaskState::Failed`] for a business error,
/// [`TaskState::Available`] for a retry within the budget, [`TaskState::Terminal`] past it. The
/// budget is `retries` retries after the first attempt: `retries + 1` attempts in all.
pub fn after_failure(attempt: u32, retries: u32, retry: bool) -> TaskState {
    if !retry {
        TaskState::Failed
    } else if attempt <= retries {
        TaskState::Available
    } else {
        TaskState::Terminal
    }
}

/// How long the retry after failed attempt `attempt` (from 1) waits: `backoff * 2^(attempt-1)`,
/// saturating (64 doublings saturate any non-zero backoff).
pub fn retry_backoff(backoff: SignedDuration, attempt: u32) -> SignedDuration {
    let doublings = attempt.saturating_sub(1).min(64);
    (0..doublings).fold(backoff, |delay, _| delay.saturating_mul(2))
}

/// The error an exhausted delivery carries when the last attempt's lock expired: no worker
/// answered, so there is no worker message to pass on.
pub fn lock_expired(worker: Option<&str>, attempt: u32) -> TaskError {
    let worker = worker.map_or_else(String::new, |worker| format!(" of worker `{worker}`"));
    TaskError {
        code: codes::TASK_LOCK_LOST.code.to_owned(),
        message: format!("the lock{worker} on attempt {attempt} expired without an answer"),
    }
}

/// The pull surface: polling, completing, failing and extending external tasks.
#[async_trait::async_trait]
pub trait Tasks: Send + Sync {
    /// Locks up to `poll.max` tasks of `poll.topics` for `poll.worker` in one transaction, oldest
    /// available first: available tasks whose `available_at` has come, and locked tasks whose lock
    /// expired — an expired lock is a failed attempt, so the task is handed out as its next
    /// attempt. An expired task already at its last attempt is not handed out: it waits for
    /// [`Tasks::exhaust_expired`]. Each lock gets a fresh random token.
    ///
    /// A poll's commit need not be flushed before it answers: all it writes is locks, and a lock
    /// lost with the database's crash only hands its task out again, as an expired one does —
    /// whatever a worker did under it later is refused for the lost lock, and whatever lands
    /// durably after it (a completion under it) makes it durable too.
    async fn poll_tasks(&self, poll: &TaskPoll) -> Result<Polled>;

    /// Turns terminal every task of `tenant` whose last attempt's lock expired, each with a
    /// [`crate::DeliveryKind::TaskExhausted`] delivery ([`lock_expired`]) due now, and returns
    /// those deliveries: a worker that keeps dying must not keep a task alive forever.
    async fn exhaust_expired(&self, tenant: &str) -> Result<Vec<DeliveryId>>;

    /// When a task of `topics` next becomes available to a poll (a retry's backoff ends, a lock
    /// expires), if any will. A time already past means one is available now. For the
    /// conformance suite: a poll answers it with its tasks ([`Polled::next_at`]).
    #[cfg(feature = "conformance")]
    async fn next_task_at(&self, tenant: &str, topics: &[String]) -> Result<Option<Timestamp>>;

    /// Completes a task `lock_token` holds ([`TaskLock::check`], else [`Error::LockLost`]) and
    /// records a [`crate::DeliveryKind::TaskCompleted`] delivery due now, in one transaction.
    async fn complete_task(
        &self,
        tenant: &str,
        id: &str,
        lock_token: &str,
        output: &Value,
    ) -> Result<()>;

    /// Records a failed attempt of a task `lock_token` holds and returns where it left the task
    /// ([`after_failure`]): available again after [`retry_backoff`], or failed or terminal with a
    /// [`crate::DeliveryKind::TaskFailed`] or [`crate::DeliveryKind::TaskExhausted`] delivery due
    /// now, written in the same transaction.
    async fn fail_task(
        &self,
        tenant: &str,
        id: &str,
        lock_token: &str,
        failure: &TaskFailure,
    ) -> Result<TaskState>;

    /// Ends a lock `lock_token` holds without spending an attempt: the task is available again
    /// at once, on the attempt it was on. A worker stopping before its handler finished hands its
    /// tasks back so, rather than letting their locks lapse (which spends the attempt, and keeps
    /// the task from everyone until then).
    async fn release_task(&self, tenant: &str, id: &str, lock_token: &str) -> Result<()>;

    /// Moves the deadline of a lock `lock_token` holds to `lock` from now; returns it.
    async fn extend_task(
        &self,
        tenant: &str,
        id: &str,
        lock_token: &str,
        lock: SignedDuration,
    ) -> Result<Timestamp>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_retries_after_the_first_attempt() {
        assert_eq!(after_failure(1, 0, true), TaskState::Terminal);
        assert_eq!(after_failure(1, 2, true), TaskState::Available);
        assert_eq!(after_failure(3, 2, true), TaskState::Terminal);
        assert_eq!(after_failure(1, 2, false), TaskState::Failed);
    }

    #[test]
    fn backoff_doubles_per_failed_attempt_and_saturates() {
        let five = SignedDuration::from_secs(5);
        assert_eq!(retry_backoff(five, 1), five);
        assert_eq!(retry_backoff(five, 3), SignedDuration::from_secs(20));
        assert_eq!(retry_backoff(five, u32::MAX), SignedDuration::MAX);
    }

    #[test]
    fn only_the_live_matching_token_holds_the_lock() {
        let now = Timestamp::UNIX_EPOCH;
        let later = now + SignedDuration::from_secs(1);
        let locked = TaskLock {
            state: TaskState::Locked,
            token: Some("t"),
            until: Some(later),
        };
        assert_eq!(locked.check("x", "t", now), Ok(()));
        assert!(matches!(
            locked.check("x", "u", now),
            Err(Error::LockLost(_))
        ));
        assert!(matches!(
            locked.check("x", "t", later),
            Err(Error::LockLost(_))
        ));
        let completed = TaskLock {
            state: TaskState::Completed,
            ..locked
        };
        assert!(matches!(
            completed.check("x", "t", now),
            Err(Error::LockLost(_))
        ));
    }
}

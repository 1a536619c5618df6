//! The pull surface (SPEC §5.5): workers long-poll for tasks, then complete, fail, extend or
//! hand back (release) them with the lock token a poll gave them.
//!
//! The long wait lives here and in the task row's lock, never in an instance claim: the instance
//! stays suspended and unclaimed while a worker holds its task. A completion runs on its
//! instance's lane: the task update and the resuming step are one transaction when the claim is
//! free (decision 0024); when it is not, the store records the outcome as a delivery in that
//! transaction and the dispatcher resumes the instance later through the ordinary claim. A
//! failure is recorded as a delivery the same way. So an outcome answered to the worker is
//! durable, and one whose answer was lost is still taken exactly once.
//!
//! A waiting poll sleeps until the earliest moment a task of its topics can become available (a
//! retry's backoff ends, a lock expires), unless this replica wakes it first by arming or
//! rescheduling a task. Tasks armed by other replicas are found by a bounded backstop.
//!
//! Tasks whose last attempt's lock expired are turned terminal by polls, but not by every poll:
//! at most one of a tenant's polls per [`EXHAUST_EVERY`] on this replica looks for them, across
//! all the tenant's topics ([`Exhaustion`]). A poll is the most frequent transaction of the task
//! path, and the look was one more statement in each.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::Mutex;

use jiff::{SignedDuration, Timestamp};
use sutra_store::{LockedTask, TaskFailure, TaskPoll, TaskState};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::Error;
use crate::lane::Lanes;
use crate::runner::{Completion, task_error};
use crate::shared::Shared;

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

/// How often a tenant's polls on one replica look for tasks whose last lock expired: at most
/// this long after the lock expired, the task is terminal and its instance told.
const EXHAUST_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// When each tenant's polls on this replica last looked for exhausted tasks.
#[derive(Default)]
pub(crate) struct Exhaustion {
    looked: Mutex<HashMap<String, Instant>>,
}

impl Exhaustion {
    /// Whether a poll of `tenant` should look now; if so, the look is counted as made.
    fn due(&self, tenant: &str) -> bool {
        let mut looked = self.looked.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        match looked.get_mut(tenant) {
            Some(last) if now.duration_since(*last) < EXHAUST_EVERY => false,
            Some(last) => {
                *last = now;
                true
            }
            None => {
                looked.insert(tenant.to_owned(), now);
                true
            }
        }
    }
}

/// A worker's long-poll.
#[derive(Debug, Clone)]
pub struct PollRequest {
    /// `max` is clamped to `1..=`[`MAX_TASKS`].
    pub poll: TaskPoll,
    /// How long to wait when no task is available; capped at [`MAX_WAIT`].
    pub wait: SignedDuration,
}

/// Locks up to `max` tasks, waiting up to `wait` for the first to become available; a wait ends
/// early when `ending` is set.
pub(crate) async fn poll(
    shared: &Shared,
    exhaustion: &Exhaustion,
    mut ending: watch::Receiver<bool>,
    request: PollRequest,
) -> Result<Vec<LockedTask>, Error> {
    let mut poll = request.poll;
    poll.max = poll.max.clamp(1, MAX_TASKS);
    let wait = request.wait.clamp(SignedDuration::ZERO, MAX_WAIT);
    let deadline = Instant::now() + wait.unsigned_abs();
    loop {
        // Listening before looking: a task armed between the look and the sleep still wakes.
        let mut woken = pin!(shared.tasks_available.notified());
        woken.as_mut().enable();
        if exhaustion.due(&poll.tenant) {
            let due_now = shared.store.exhaust_expired(&poll.tenant).await?;
            if !due_now.is_empty() {
                shared.deliveries_due.notify_one();
            }
        }
        let polled = shared.store.poll_tasks(&poll).await?;
        let now = Instant::now();
        if !polled.tasks.is_empty() || now >= deadline || *ending.borrow() {
            return Ok(polled.tasks);
        }
        let pause = until(polled.next_at).min(deadline - now);
        tokio::select! {
            () = woken => {}
            () = tokio::time::sleep(pause) => {}
            _ = ending.changed() => {}
        }
    }
}

/// How long a waiting poll may sleep before a task of its topics could be available, `next` as
/// its empty poll answered it.
fn until(next: Option<Timestamp>) -> std::time::Duration {
    let pause = next.map_or(BACKSTOP, |at| {
        at.duration_since(Timestamp::now()).clamp(FLOOR, BACKSTOP)
    });
    pause.unsigned_abs()
}

/// Completes a task on its instance's lane, which resumes the instance in the same transaction
/// when its claim is free, and otherwise leaves the completion to the dispatcher as a delivery.
pub(crate) async fn complete(lanes: &Lanes, completion: Completion) -> Result<(), Error> {
    lanes.complete(completion).await
}

/// Records a failed attempt, and wakes whoever acts next: the waiting polls when the task is
/// available again, else the dispatcher.
pub(crate) async fn fail(
    shared: &Shared,
    tenant: &str,
    id: &str,
    lock_token: &str,
    failure: &TaskFailure,
) -> Result<TaskState, Error> {
    let state = shared
        .store
        .fail_task(tenant, id, lock_token, failure)
        .await
        .map_err(task_error)?;
    if state == TaskState::Available {
        // Waiting polls sleep until the next availability they knew of; this one is new.
        shared.tasks_available.notify_waiters();
    } else {
        shared.deliveries_due.notify_one();
    }
    Ok(state)
}

/// Hands a task back, and wakes the waiting polls: it is available again now.
pub(crate) async fn release(
    shared: &Shared,
    tenant: &str,
    id: &str,
    lock_token: &str,
) -> Result<(), Error> {
    shared
        .store
        .release_task(tenant, id, lock_token)
        .await
        .map_err(task_error)?;
    shared.tasks_available.notify_waiters();
    Ok(())
}

pub(crate) async fn extend(
    shared: &Shared,
    tenant: &str,
    id: &str,
    lock_token: &str,
    lock: SignedDuration,
) -> Result<Timestamp, Error> {
    shared
        .store
        .extend_task(tenant, id, lock_token, lock)
        .await
        .map_err(task_error)
}

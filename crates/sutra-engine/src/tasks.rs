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
//! A poll does not look again where the last look at its topics left nothing behind and nothing
//! has changed since ([`Looks`]): a worker's next poll after one that took fewer tasks than it
//! asked for goes straight to waiting, as if it were that poll's wait going on. At low load that
//! next poll is one in two of a task's transactions, and it found nothing.
//!
//! Tasks whose last attempt's lock expired are turned terminal by polls, but not by every poll:
//! at most one of a tenant's polls per [`EXHAUST_EVERY`] on this replica looks for them, across
//! all the tenant's topics ([`Exhaustion`]). A poll is the most frequent transaction of the task
//! path, and the look was one more statement in each.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use jiff::{SignedDuration, Timestamp};
use sutra_store::{LockedTask, Polled, TaskFailure, TaskPoll, TaskState};
use tokio::sync::{Notify, futures::Notified, watch};
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

/// What the polls on this replica remember between them.
#[derive(Default)]
pub(crate) struct Polls {
    exhaustion: Exhaustion,
    looks: Looks,
}

/// When each tenant's polls on this replica last looked for exhausted tasks.
#[derive(Default)]
struct Exhaustion {
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

/// Whether a task may have become available on this replica's account: a commit armed one, a
/// failed attempt was rescheduled, a task was handed back. Each announcement wakes every waiting
/// poll and moves the generation on, which tells a poll that the last look is out of date.
#[derive(Default)]
pub(crate) struct Availability {
    woken: Notify,
    generation: AtomicU64,
}

impl Availability {
    pub fn announce(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.woken.notify_waiters();
    }

    fn notified(&self) -> Notified<'_> {
        self.woken.notified()
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }
}

/// The last look at each tenant's topics that left tasks behind for nobody: it took fewer than
/// it asked for, so at its snapshot no other task of those topics was available. Until this
/// replica announces an availability, the time it said a task could next become available
/// comes, or the backstop since the look runs out, another poll of the same topics would find
/// nothing a waiting poll would not: it waits instead of looking. Tasks armed by another
/// replica are found within the backstop of the look, as they are by a waiting poll.
#[derive(Default)]
pub(crate) struct Looks {
    last: Mutex<HashMap<(String, Vec<String>), Look>>,
}

#[derive(Clone, Copy)]
struct Look {
    generation: u64,
    at: Instant,
    next_at: Option<Timestamp>,
}

/// Distinct topic sets are few (one per kind of worker); a map grown past this many is a
/// caller inventing topics, and is forgotten rather than kept.
const MOST_LOOKS: usize = 1024;

impl Looks {
    /// How long a poll of `poll`'s topics may wait without looking, when the last look is still
    /// good at `generation` and `now`; `None`: look.
    fn quiet_for(
        &self,
        poll: &TaskPoll,
        generation: u64,
        now: Instant,
    ) -> Option<std::time::Duration> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let look = *last.get(&key(poll))?;
        if look.generation != generation {
            return None;
        }
        let backstop = BACKSTOP
            .unsigned_abs()
            .checked_sub(now.duration_since(look.at))?;
        let next = match look.next_at {
            Some(at) => at.duration_since(Timestamp::now()).try_into().ok()?,
            None => backstop,
        };
        Some(next.min(backstop)).filter(|quiet| !quiet.is_zero())
    }

    /// Keeps what a look that began at `at`, at `generation`, found, for the polls after it.
    fn remember(&self, poll: &TaskPoll, generation: u64, at: Instant, polled: &Polled) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let short = polled.tasks.len() < poll.max as usize;
        if !short {
            last.remove(&key(poll));
            return;
        }
        if last.len() >= MOST_LOOKS {
            last.clear();
        }
        let look = Look {
            generation,
            at,
            next_at: polled.next_at,
        };
        last.insert(key(poll), look);
    }
}

/// A poll's tenant and its topics in order: polls of one set of topics, however listed.
fn key(poll: &TaskPoll) -> (String, Vec<String>) {
    let mut topics = poll.topics.clone();
    topics.sort();
    topics.dedup();
    (poll.tenant.clone(), topics)
}

/// What a worker completing a task asks for besides: its next task, when the step the
/// completion resumes arms one of `topics` — locked for `worker` in the same transaction and
/// answered with the completion, so that no poll and no second write of the task's row stand
/// between one task and the next (eager dispatch, decision 0038).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Take {
    pub worker: String,
    pub topics: Vec<String>,
    /// How long the lock lasts; `None`: the task node's own `lock`.
    pub lock: Option<SignedDuration>,
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
    polls: &Polls,
    mut ending: watch::Receiver<bool>,
    request: PollRequest,
) -> Result<Vec<LockedTask>, Error> {
    let mut poll = request.poll;
    poll.max = poll.max.clamp(1, MAX_TASKS);
    let wait = request.wait.clamp(SignedDuration::ZERO, MAX_WAIT);
    let deadline = Instant::now() + wait.unsigned_abs();
    loop {
        // Listening before looking: a task armed between the look and the sleep still wakes.
        let mut woken = pin!(shared.tasks.notified());
        woken.as_mut().enable();
        let generation = shared.tasks.generation();
        let began = Instant::now();
        let quiet = polls.looks.quiet_for(&poll, generation, began);
        let pause = match quiet {
            Some(quiet) if began < deadline && !*ending.borrow() => quiet,
            _ => {
                let polled = look(shared, polls, &poll).await?;
                polls.looks.remember(&poll, generation, began, &polled);
                let now = Instant::now();
                if !polled.tasks.is_empty() || now >= deadline || *ending.borrow() {
                    return Ok(polled.tasks);
                }
                until(polled.next_at)
            }
        };
        let pause = pause.min(deadline.saturating_duration_since(Instant::now()));
        tokio::select! {
            () = woken => {}
            () = tokio::time::sleep(pause) => {}
            _ = ending.changed() => {}
        }
    }
}

/// One look: the tenant's expired locks turned terminal when that is due, then the poll.
async fn look(shared: &Shared, polls: &Polls, poll: &TaskPoll) -> Result<Polled, Error> {
    if polls.exhaustion.due(&poll.tenant) {
        let due_now = shared.store.exhaust_expired(&poll.tenant).await?;
        if !due_now.is_empty() {
            shared.deliveries_due.notify_one();
        }
    }
    Ok(shared.store.poll_tasks(poll).await?)
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
/// Answers the task the resumed step armed locked for the worker, when it asked for one
/// ([`Take`]) and the step armed one of its topics.
pub(crate) async fn complete(
    lanes: &Lanes,
    completion: Completion,
) -> Result<Option<LockedTask>, Error> {
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
        shared.tasks.announce();
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
    shared.tasks.announce();
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn poll(topics: &[&str], max: u32) -> TaskPoll {
        TaskPoll {
            tenant: "t".to_owned(),
            worker: "w".to_owned(),
            topics: topics.iter().map(|topic| (*topic).to_owned()).collect(),
            max,
            lock: None,
        }
    }

    fn locked(n: usize) -> Vec<LockedTask> {
        let task = LockedTask {
            id: "i:1".to_owned(),
            instance: "i".to_owned(),
            topic: "a".to_owned(),
            input: serde_json::Value::Null,
            attempt: 1,
            lock_token: "token".to_owned(),
            lock_expires_at: Timestamp::now(),
        };
        vec![task; n]
    }

    fn found(n: usize, next_at: Option<Timestamp>) -> Polled {
        Polled {
            tasks: locked(n),
            next_at,
        }
    }

    #[test]
    fn a_short_look_lets_the_next_poll_of_its_topics_wait_until_something_changes() {
        let looks = Looks::default();
        let at = Instant::now();
        looks.remember(&poll(&["a", "b"], 4), 7, at, &found(1, None));

        let quiet = looks.quiet_for(&poll(&["b", "a"], 10), 7, at);
        assert_eq!(
            quiet,
            Some(BACKSTOP.unsigned_abs()),
            "any order of the topics"
        );
        assert_eq!(
            looks.quiet_for(&poll(&["a"], 10), 7, at),
            None,
            "other topics"
        );
        assert_eq!(
            looks.quiet_for(&poll(&["a", "b"], 10), 8, at),
            None,
            "an availability announced since"
        );
        let later = at + BACKSTOP.unsigned_abs();
        assert_eq!(
            looks.quiet_for(&poll(&["a", "b"], 10), 7, later),
            None,
            "the backstop ran out: another replica may have armed one"
        );
    }

    #[test]
    fn a_look_that_took_all_it_asked_for_leaves_the_next_poll_to_look() {
        let looks = Looks::default();
        let at = Instant::now();
        looks.remember(&poll(&["a"], 2), 1, at, &found(1, None));
        looks.remember(&poll(&["a"], 2), 1, at, &found(2, None));

        assert_eq!(looks.quiet_for(&poll(&["a"], 2), 1, at), None);
    }

    #[test]
    fn the_next_availability_a_look_found_ends_the_quiet() {
        let looks = Looks::default();
        let at = Instant::now();
        let soon = Timestamp::now() + SignedDuration::from_millis(300);
        looks.remember(&poll(&["a"], 2), 1, at, &found(0, Some(soon)));
        let quiet = looks.quiet_for(&poll(&["a"], 2), 1, at).expect("quiet");
        assert!(quiet <= Duration::from_millis(300), "{quiet:?}");

        let past = Timestamp::now() - SignedDuration::from_millis(1);
        looks.remember(&poll(&["a"], 2), 1, at, &found(0, Some(past)));
        assert_eq!(
            looks.quiet_for(&poll(&["a"], 2), 1, at),
            None,
            "a task is available now"
        );
    }
}

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
//! A poll that waits is registered with its replica ([`Registration`], in `waiting`): a
//! step that arms a task of its topics on this replica locks the task for the waiting worker in
//! the step's own transaction and hands it over once committed, so that the poll is answered
//! without a look of its own and the task's row is written once, not twice (decision 0039).
//!
//! Tasks whose last attempt's lock expired are turned terminal by polls, but not by every poll:
//! at most one of a tenant's polls per [`EXHAUST_EVERY`] on this replica looks for them, across
//! all the tenant's topics ([`Exhaustion`]). A poll is the most frequent transaction of the task
//! path, and the look was one more statement in each.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use jiff::{SignedDuration, Timestamp};
use sutra_store::{Clock, LockedTask, Polled, TaskFailure, TaskPoll, TaskState};
use tokio::sync::{mpsc, watch};

use crate::error::Error;
pub use crate::handoff::Take;
use crate::handoff::release_unheard;
use crate::lane::Lanes;
use crate::request::Completion;
use crate::runner::task_error;
use crate::shared::Shared;
use crate::waiting::{Entered, Handed};

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
    /// Whether a poll of `tenant` should look `now`; if so, the look is counted as made.
    fn due(&self, tenant: &str, now: Instant) -> bool {
        let mut looked = self.looked.lock().unwrap_or_else(|p| p.into_inner());
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
    /// good at `generation` and now by `clock`; `None`: look.
    fn quiet_for(
        &self,
        poll: &TaskPoll,
        generation: u64,
        clock: &Clock,
    ) -> Option<std::time::Duration> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let look = *last.get(&key(poll))?;
        if look.generation != generation {
            return None;
        }
        let backstop = BACKSTOP
            .unsigned_abs()
            .checked_sub(clock.elapsed(look.at))?;
        let next = match look.next_at {
            Some(at) => at.duration_since(clock.now()).try_into().ok()?,
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

/// A waiting poll's place: what was handed to it arrives here.
struct Registration {
    shared: Arc<Shared>,
    entered: Entered,
    tenant: String,
    receiver: mpsc::UnboundedReceiver<Handed>,
    /// How many messages arrived: reservations resolved.
    received: u32,
    arrived: Vec<LockedTask>,
    closed: bool,
}

/// How long an ending wait gives the steps that reserved it to commit and hand their tasks
/// over, rather than fail them and have the tasks released: far longer than a commit, far
/// shorter than a lock.
const HANDOVER: std::time::Duration = std::time::Duration::from_secs(5);

impl Registration {
    /// Registers `poll` as waiting until the registration is closed or dropped.
    fn new(shared: &Arc<Shared>, poll: &TaskPoll) -> Registration {
        let (entered, receiver) = shared.waiting.enter(poll);
        Registration {
            shared: Arc::clone(shared),
            entered,
            tenant: poll.tenant.clone(),
            receiver,
            received: 0,
            arrived: Vec::new(),
            closed: false,
        }
    }

    /// Waits until something is handed over: a task, or word that a reserved one did not commit.
    async fn handed(&mut self) {
        if let Some(handed) = self.receiver.recv().await {
            self.receive(handed);
        }
    }

    fn receive(&mut self, handed: Handed) {
        self.received += 1;
        if let Handed::Task(task) = handed {
            self.arrived.push(task);
        }
    }

    /// Ends the wait: no step reserves this poll any more, the reservations already made are
    /// awaited (up to [`HANDOVER`]), and the tasks handed over are the poll's.
    async fn finish(mut self) -> Vec<LockedTask> {
        self.shared.waiting.remove(self.entered.id);
        let deadline = self.shared.clock.instant() + HANDOVER;
        while self.received < self.entered.reserved.load(Ordering::SeqCst) {
            let handed = self.receiver.recv();
            match self.shared.clock.timeout_at(deadline, handed).await {
                Ok(Some(handed)) => self.receive(handed),
                Ok(None) | Err(_) => break,
            }
        }
        self.close()
    }

    /// Ends the wait at once: no step reserves this poll any more, a reservation not yet handed
    /// over fails to hand (and its task is released), and the tasks handed over so far are the
    /// poll's.
    fn close(&mut self) -> Vec<LockedTask> {
        self.closed = true;
        self.shared.waiting.remove(self.entered.id);
        self.receiver.close();
        while let Ok(handed) = self.receiver.try_recv() {
            self.receive(handed);
        }
        std::mem::take(&mut self.arrived)
    }
}

impl Drop for Registration {
    /// A poll dropped while waiting (its caller went away) hands back what reached it.
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        for task in self.close() {
            release_unheard(&self.shared, &self.tenant, task);
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
    shared: &Arc<Shared>,
    polls: &Polls,
    mut ending: watch::Receiver<bool>,
    request: PollRequest,
) -> Result<Vec<LockedTask>, Error> {
    let mut poll = request.poll;
    poll.max = poll.max.clamp(1, MAX_TASKS);
    // Granted up to `sutra.tasks.max-lock` before the poll waits, so that a task handed to it as
    // the task is armed is held no longer either.
    poll.lock = poll.lock.map(|lock| shared.config.granted_lock(lock));
    let wait = request.wait.clamp(SignedDuration::ZERO, MAX_WAIT);
    let deadline = shared.clock.instant() + wait.unsigned_abs();
    loop {
        // Listening before looking: a task armed between the look and the sleep still wakes.
        let mut woken = pin!(shared.tasks.notified());
        woken.as_mut().enable();
        let generation = shared.tasks.generation();
        let began = shared.clock.instant();
        let quiet = polls.looks.quiet_for(&poll, generation, &shared.clock);
        let pause = match quiet {
            Some(quiet) if began < deadline && !*ending.borrow() => quiet,
            _ => {
                let polled = look(shared, polls, &poll).await?;
                polls.looks.remember(&poll, generation, began, &polled);
                let now = shared.clock.instant();
                if !polled.tasks.is_empty() || now >= deadline || *ending.borrow() {
                    return Ok(polled.tasks);
                }
                until(polled.next_at, shared.clock.now())
            }
        };
        let pause = pause.min(deadline.saturating_duration_since(shared.clock.instant()));
        let mut waiting = Registration::new(shared, &poll);
        tokio::select! {
            () = woken => {}
            () = shared.clock.sleep(pause) => {}
            _ = ending.changed() => {}
            () = waiting.handed() => {}
        }
        let handed = waiting.finish().await;
        if !handed.is_empty() {
            return Ok(handed);
        }
    }
}

/// One look: the tenant's expired locks turned terminal when that is due, then the poll.
async fn look(shared: &Shared, polls: &Polls, poll: &TaskPoll) -> Result<Polled, Error> {
    if polls.exhaustion.due(&poll.tenant, shared.clock.instant()) {
        let due_now = shared.store.exhaust_expired(&poll.tenant).await?;
        if !due_now.is_empty() {
            shared.deliveries_due.notify_one();
        }
    }
    Ok(shared.store.poll_tasks(poll).await?)
}

/// How long a waiting poll may sleep from `now` before a task of its topics could be available,
/// `next` as its empty poll answered it.
fn until(next: Option<Timestamp>, now: Timestamp) -> std::time::Duration {
    let pause = next.map_or(BACKSTOP, |at| at.duration_since(now).clamp(FLOOR, BACKSTOP));
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

/// Moves a held lock's deadline to `lock` from now, granted up to `sutra.tasks.max-lock`;
/// returns the deadline it got.
pub(crate) async fn extend(
    shared: &Shared,
    tenant: &str,
    id: &str,
    lock_token: &str,
    lock: SignedDuration,
) -> Result<Timestamp, Error> {
    let lock = shared.config.granted_lock(lock);
    shared
        .store
        .extend_task(tenant, id, lock_token, lock)
        .await
        .map_err(task_error)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sutra_store::ManualClock;

    use super::*;
    use crate::waiting::tests::{locked, poll};

    fn found(n: usize, next_at: Option<Timestamp>) -> Polled {
        Polled {
            tasks: locked(n),
            next_at,
        }
    }

    fn clock() -> ManualClock {
        ManualClock::starting_at(Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn a_short_look_lets_the_next_poll_of_its_topics_wait_until_something_changes() {
        let looks = Looks::default();
        let manual = clock();
        let clock = manual.clock();
        let at = clock.instant();
        looks.remember(&poll(&["a", "b"], 4), 7, at, &found(1, None));

        let quiet = looks.quiet_for(&poll(&["b", "a"], 10), 7, &clock);
        assert_eq!(
            quiet,
            Some(BACKSTOP.unsigned_abs()),
            "any order of the topics"
        );
        assert_eq!(
            looks.quiet_for(&poll(&["a"], 10), 7, &clock),
            None,
            "other topics"
        );
        assert_eq!(
            looks.quiet_for(&poll(&["a", "b"], 10), 8, &clock),
            None,
            "an availability announced since"
        );
        manual.advance(BACKSTOP.unsigned_abs());
        assert_eq!(
            looks.quiet_for(&poll(&["a", "b"], 10), 7, &clock),
            None,
            "the backstop ran out: another replica may have armed one"
        );
    }

    #[test]
    fn a_look_that_took_all_it_asked_for_leaves_the_next_poll_to_look() {
        let looks = Looks::default();
        let clock = clock().clock();
        let at = clock.instant();
        looks.remember(&poll(&["a"], 2), 1, at, &found(1, None));
        looks.remember(&poll(&["a"], 2), 1, at, &found(2, None));

        assert_eq!(looks.quiet_for(&poll(&["a"], 2), 1, &clock), None);
    }

    #[test]
    fn the_next_availability_a_look_found_ends_the_quiet() {
        let looks = Looks::default();
        let clock = clock().clock();
        let at = clock.instant();
        let soon = clock.now() + SignedDuration::from_millis(300);
        looks.remember(&poll(&["a"], 2), 1, at, &found(0, Some(soon)));
        let quiet = looks.quiet_for(&poll(&["a"], 2), 1, &clock).expect("quiet");
        assert!(quiet <= Duration::from_millis(300), "{quiet:?}");

        let past = clock.now() - SignedDuration::from_millis(1);
        looks.remember(&poll(&["a"], 2), 1, at, &found(0, Some(past)));
        assert_eq!(
            looks.quiet_for(&poll(&["a"], 2), 1, &clock),
            None,
            "a task is available now"
        );
    }
}

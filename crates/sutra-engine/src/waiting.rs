//! The polls waiting on this replica (decision 0039), and the announcement that a task may have
//! become available here (decision 0037): what the engine's shared state holds for the steps
//! that arm tasks and for the polls that wait for them.
//!
//! A poll that waits is registered here ([`Waiting`]): a step that arms a task of its topics on
//! this replica reserves the poll ([`Reservation`]), locks the task for the waiting worker in the
//! step's own transaction and hands it over once committed, so that the poll is answered without
//! a look of its own and the task's row is written once, not twice.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use jiff::SignedDuration;
use sutra_store::{LockedTask, TakenBy, TaskPoll};
use tokio::sync::{Notify, futures::Notified, mpsc};

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

    pub(crate) fn notified(&self) -> Notified<'_> {
        self.woken.notified()
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }
}

/// The polls waiting on this replica, oldest first, for the steps that arm tasks of their
/// topics to lock those tasks for them as they arm them (decision 0039).
#[derive(Default)]
pub(crate) struct Waiting {
    next_id: AtomicU64,
    waiters: Mutex<Vec<Waiter>>,
}

struct Waiter {
    id: u64,
    tenant: String,
    worker: String,
    topics: Vec<String>,
    lock: Option<SignedDuration>,
    /// How many more tasks the poll can take.
    room: u32,
    /// How many reservations were made for it: each ends in one message on `handed`.
    reserved: Arc<AtomicU32>,
    handed: mpsc::UnboundedSender<Handed>,
}

/// What a waiting poll is told.
pub(crate) enum Handed {
    /// A task locked for it, committed.
    Task(LockedTask),
    /// A task reserved for it did not commit: look again.
    LookAgain,
}

impl Waiting {
    /// `poll` waits from now on: its entry, and where what is handed to it arrives.
    pub(crate) fn enter(&self, poll: &TaskPoll) -> (Entered, mpsc::UnboundedReceiver<Handed>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let reserved = Arc::new(AtomicU32::new(0));
        let (handed, receiver) = mpsc::unbounded_channel();
        let waiter = Waiter {
            id,
            tenant: poll.tenant.clone(),
            worker: poll.worker.clone(),
            topics: poll.topics.clone(),
            lock: poll.lock,
            room: poll.max,
            reserved: Arc::clone(&reserved),
            handed,
        };
        self.lock().push(waiter);
        (Entered { id, reserved }, receiver)
    }

    /// Reserves the oldest waiting poll of `tenant` that takes `topic`, for a task whose own
    /// lock is `task_lock`; `None` when no poll waits for it.
    pub(crate) fn reserve(
        &self,
        tenant: &str,
        topic: &str,
        task_lock: SignedDuration,
    ) -> Option<Reservation> {
        let mut waiters = self.lock();
        let at = waiters.iter().position(|waiter| {
            waiter.tenant == tenant
                && waiter.topics.iter().any(|taken| taken == topic)
                && !waiter.handed.is_closed()
        })?;
        let waiter = &mut waiters[at];
        waiter.room -= 1;
        waiter.reserved.fetch_add(1, Ordering::SeqCst);
        let reservation = Reservation {
            taken_by: TakenBy {
                worker: waiter.worker.clone(),
                lock: waiter.lock.unwrap_or(task_lock),
            },
            handed: Some(waiter.handed.clone()),
        };
        if waiter.room == 0 {
            waiters.remove(at);
        }
        Some(reservation)
    }

    /// How many polls wait here with room for a task.
    pub(crate) fn count(&self) -> usize {
        self.lock().len()
    }

    pub(crate) fn remove(&self, id: u64) {
        self.lock().retain(|waiter| waiter.id != id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Waiter>> {
        self.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A poll's entry among the waiting.
pub(crate) struct Entered {
    pub id: u64,
    pub reserved: Arc<AtomicU32>,
}

/// A waiting poll reserved for a task a step is arming: the task is locked for
/// [`Reservation::taken_by`] in the step's transaction, and handed over once it committed. A
/// reservation dropped without handing (the step did not commit) tells the poll to look again.
pub(crate) struct Reservation {
    pub taken_by: TakenBy,
    handed: Option<mpsc::UnboundedSender<Handed>>,
}

impl Reservation {
    /// Hands the committed `task` to its poll; the task back when the poll has gone.
    pub(crate) fn hand(mut self, task: LockedTask) -> Option<LockedTask> {
        let handed = self.handed.take().expect("a reservation hands once");
        match handed.send(Handed::Task(task)) {
            Ok(()) => None,
            Err(failed) => match failed.0 {
                Handed::Task(task) => Some(task),
                Handed::LookAgain => None,
            },
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(handed) = self.handed.take() {
            let _ = handed.send(Handed::LookAgain);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use jiff::Timestamp;

    use super::*;

    pub(crate) fn poll(topics: &[&str], max: u32) -> TaskPoll {
        TaskPoll {
            tenant: "t".to_owned(),
            worker: "w".to_owned(),
            topics: topics.iter().map(|topic| (*topic).to_owned()).collect(),
            max,
            lock: None,
        }
    }

    pub(crate) fn locked(n: usize) -> Vec<LockedTask> {
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

    /// A task node's own lock, where a test does not look at it.
    const HOUR_LOCK: SignedDuration = SignedDuration::from_hours(1);

    fn handed_task(id: &str) -> LockedTask {
        LockedTask {
            id: id.to_owned(),
            ..locked(1).remove(0)
        }
    }

    fn reserved(waiting: &Waiting, topic: &str) -> Option<String> {
        let reservation = waiting.reserve("t", topic, SignedDuration::from_mins(5))?;
        let worker = reservation.taken_by.worker.clone();
        let back = reservation.hand(handed_task("i:1"));
        back.is_none().then_some(worker)
    }

    #[test]
    fn a_step_reserves_the_oldest_poll_waiting_for_its_tenant_and_topic() {
        let waiting = Waiting::default();
        let other_tenant = TaskPoll {
            tenant: "other".to_owned(),
            ..poll(&["a"], 1)
        };
        let (_, _other) = waiting.enter(&other_tenant);
        let (_, _b) = waiting.enter(&TaskPoll {
            worker: "wb".to_owned(),
            ..poll(&["b"], 1)
        });
        let (_, _first) = waiting.enter(&TaskPoll {
            worker: "w1".to_owned(),
            ..poll(&["a", "b"], 1)
        });
        let (_, _second) = waiting.enter(&TaskPoll {
            worker: "w2".to_owned(),
            ..poll(&["a"], 1)
        });

        assert_eq!(reserved(&waiting, "a").as_deref(), Some("w1"));
        assert_eq!(reserved(&waiting, "a").as_deref(), Some("w2"));
        assert_eq!(reserved(&waiting, "a"), None, "each took all it asked for");
        assert_eq!(reserved(&waiting, "b").as_deref(), Some("wb"));
        assert_eq!(reserved(&waiting, "c"), None);
    }

    #[test]
    fn a_waiting_poll_takes_as_many_tasks_as_it_asked_for_with_its_own_lock() {
        let waiting = Waiting::default();
        let asked = TaskPoll {
            lock: Some(SignedDuration::from_secs(30)),
            ..poll(&["a"], 2)
        };
        let (_, mut handed) = waiting.enter(&asked);

        for n in 1..=2 {
            let reservation = waiting
                .reserve("t", "a", SignedDuration::from_mins(5))
                .expect("room");
            assert_eq!(reservation.taken_by.lock, SignedDuration::from_secs(30));
            assert!(reservation.hand(handed_task(&format!("i:{n}"))).is_none());
        }

        assert!(waiting.reserve("t", "a", HOUR_LOCK).is_none(), "full");
        for n in 1..=2 {
            match handed.try_recv() {
                Ok(Handed::Task(task)) => assert_eq!(task.id, format!("i:{n}")),
                _ => panic!("task {n} was handed"),
            }
        }
    }

    #[test]
    fn a_reservation_that_did_not_commit_tells_its_poll_to_look_again() {
        let waiting = Waiting::default();
        let (_, mut handed) = waiting.enter(&poll(&["a"], 1));

        drop(
            waiting
                .reserve("t", "a", HOUR_LOCK)
                .expect("a waiting poll"),
        );

        assert!(matches!(handed.try_recv(), Ok(Handed::LookAgain)));
    }

    #[test]
    fn a_task_for_a_poll_that_went_away_comes_back_to_be_released() {
        let waiting = Waiting::default();
        let (entered, handed) = waiting.enter(&poll(&["a"], 2));
        let reservation = waiting
            .reserve("t", "a", HOUR_LOCK)
            .expect("a waiting poll");
        drop(handed);
        waiting.remove(entered.id);

        let back = reservation
            .hand(handed_task("i:1"))
            .expect("nobody listens");

        assert_eq!(back.id, "i:1");
        assert!(waiting.reserve("t", "a", HOUR_LOCK).is_none(), "gone");
    }
}

//! The hand-off of a task a step arms to whoever takes it as it is armed: the completing worker
//! that asked for its next task ([`Take`], decision 0038), else the oldest poll waiting on this
//! replica for its topics (decision 0039). The takers are chosen before the step's commit, which
//! locks each task for its taker; once the group committed, each waiting poll is handed its task,
//! and a task whose poll went away meanwhile is handed back ([`release_unheard`]).

use std::sync::Arc;

use jiff::SignedDuration;
use sutra_core::snapshot::{ParkId, ParkKind};
use sutra_core::step::{Effect, Step};
use sutra_store::{LockedTask, TakenBy};
use tracing::warn;

use crate::config::EngineConfig;
use crate::history_log;
use crate::shared::Shared;
use crate::waiting::{Reservation, Waiting};

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

/// Whether the effect puts a task in front of pollers, who long-poll for exactly that.
pub(crate) fn arms_a_task(effect: &Effect) -> bool {
    matches!(effect, Effect::Arm { park, .. } if matches!(park.kind, ParkKind::Task { .. }))
}

/// Who the tasks a step arms are locked for as they are armed, each lock the taker's or the
/// task's own: the completing worker that asked, for the first task of its topics — one task,
/// for the slot its completion frees (decision 0038) — then the polls waiting on this replica,
/// oldest first (decision 0039). The rest are armed available, for the polls to come. Each lock
/// is granted up to `sutra.tasks.max-lock` (decision 0078).
#[derive(Default)]
pub(crate) struct Takers {
    pub take: Option<ParkId>,
    pub handoffs: Vec<(ParkId, Reservation)>,
    pub locks: Vec<(ParkId, TakenBy)>,
}

pub(crate) fn takers(
    step: &Step,
    take: Option<&Take>,
    waiting: &Waiting,
    config: &EngineConfig,
) -> Takers {
    let tenant = &step.snapshot.instance.tenant;
    let mut takers = Takers::default();
    for effect in &step.effects {
        let Effect::Arm { park, .. } = effect else {
            continue;
        };
        let ParkKind::Task { topic, lock, .. } = &park.kind else {
            continue;
        };
        let lock = config.granted_lock(*lock);
        let asked = take.filter(|take| takers.take.is_none() && take.topics.contains(topic));
        if let Some(take) = asked {
            takers.take = Some(park.id);
            let by = TakenBy {
                worker: take.worker.clone(),
                lock: config.granted_lock(take.lock.unwrap_or(lock)),
            };
            takers.locks.push((park.id, by));
        } else if let Some(reservation) = waiting.reserve(tenant, topic, lock) {
            takers.locks.push((park.id, reservation.taken_by.clone()));
            takers.handoffs.push((park.id, reservation));
        }
    }
    takers
}

/// The task of `instance`'s `park` among `taken`, removed from it.
pub(crate) fn take_out(
    taken: &mut Vec<LockedTask>,
    instance: &str,
    park: ParkId,
) -> Option<LockedTask> {
    let id = sutra_store::task_id(instance, park);
    let at = taken.iter().position(|task| task.id == id)?;
    Some(taken.swap_remove(at))
}

/// Hands each task `step` armed and its group committed to the waiting poll reserved for it;
/// a task whose poll went away meanwhile is handed back.
pub(crate) fn hand_over(
    shared: &Shared,
    step: &Step,
    taken: &mut Vec<LockedTask>,
    handoffs: Vec<(ParkId, Reservation)>,
) {
    let instance = &step.snapshot.instance.id;
    for (park, reservation) in handoffs {
        // A reservation whose task was not armed after all is dropped: its poll looks again.
        let Some(task) = take_out(taken, instance, park) else {
            continue;
        };
        if let Some(task) = reservation.hand(task) {
            let tenant = &step.snapshot.instance.tenant;
            release_unheard(shared, tenant, task);
        }
    }
}

/// A task locked for a worker that will never hear of it (its poll went away between the
/// reservation and the hand-over) is handed back at once, as the worker would have, rather than
/// held until its lock lapses.
pub(crate) fn release_unheard(shared: &Shared, tenant: &str, task: LockedTask) {
    let store = Arc::clone(&shared.store);
    let tasks = Arc::clone(&shared.tasks);
    let (replica, tenant) = (shared.config.replica_id.clone(), tenant.to_owned());
    tokio::spawn(async move {
        match store
            .release_task(&tenant, &task.id, &task.lock_token)
            .await
        {
            Ok(()) => {
                history_log::task_unheard(&replica, &tenant, &task.id, &task.lock_token);
                tasks.announce();
            }
            Err(error) => {
                warn!(task = %task.id, %error, "a task locked for a poll that went away could not be handed back; it is taken again when its lock lapses")
            }
        }
    });
}

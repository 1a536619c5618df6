//! A step written in its group and not yet committed ([`Written`]), and what it does once the
//! group committed: it lands — hands the tasks it armed to their takers, answers its callers and
//! wakes whoever acts next — or, when the group did not commit, lets its held callers go.

use sutra_core::snapshot::ParkId;
use sutra_core::step::{Effect, HistoryKind, Step};
use sutra_store::{DeliveryId, LockedTask};

use crate::handoff::{self, take_out};
use crate::request::StepOutcome;
use crate::settle::Hold;
use crate::shared::Shared;
use crate::waiting::Reservation;
use crate::{fault, history_log, metrics};

/// A step written in its group and not yet committed: what to do once it is.
pub(crate) struct Written {
    pub step: Step,
    pub due_now: Vec<DeliveryId>,
    /// The tasks the step armed locked for a worker: the completing worker's, and the waiting
    /// polls'.
    pub taken: Vec<LockedTask>,
    /// The park whose task the completing worker takes.
    pub take: Option<ParkId>,
    /// The waiting polls that take the tasks of these parks.
    pub handoffs: Vec<(ParkId, Reservation)>,
    /// Whether it armed a task nobody took, which the waiting polls are told of.
    pub untaken_tasks: bool,
    pub hold: Option<Hold>,
    pub is_start: bool,
    pub started: std::time::Instant,
    /// What the history log records once the group committed; `None` when it records nothing.
    pub(crate) record: Option<history_log::Commit>,
}

impl Written {
    /// The group committed: the step is durable. Tells whoever acts next and answers the caller.
    pub(crate) fn land(self, shared: &Shared) -> StepOutcome {
        fault::point(if self.is_start {
            "after-start-commit"
        } else {
            "after-commit"
        });
        if (self.step.history.iter()).any(|event| event.kind == HistoryKind::Compensated) {
            fault::point("after-compensated");
        }
        let Written {
            step,
            due_now,
            mut taken,
            handoffs,
            untaken_tasks,
            hold,
            started,
            ..
        } = self;
        let instance = step.snapshot.instance.id.clone();
        handoff::hand_over(shared, &step, &mut taken, handoffs);
        let took = shared.clock.elapsed(started);
        shared.step_ended(&step.snapshot.instance, metrics::COMMITTED, took);
        if (step.history.iter()).any(|event| event.kind == HistoryKind::Failed) {
            shared.pulse.instance_failed(&step.snapshot.instance.tenant);
        }
        if let Some(reply) = &step.reply {
            shared.settle.settle(&instance, reply);
        }
        if !due_now.is_empty() {
            shared.deliveries_due.notify_one();
        }
        if step
            .effects
            .iter()
            .any(|effect| matches!(effect, Effect::Emit { .. }))
        {
            shared.outbox_due.notify_one();
        }
        if untaken_tasks {
            shared.tasks.announce();
        }
        StepOutcome {
            instance,
            status: step.snapshot.status,
            reply: step.reply,
            hold,
        }
    }

    /// The task the step armed locked for its completion's worker, if it did: to be answered
    /// once the group committed.
    pub(crate) fn take_task(&mut self) -> Option<LockedTask> {
        let park = self.take?;
        take_out(&mut self.taken, &self.step.snapshot.instance.id, park)
    }

    /// The step, timed from `started`.
    pub(crate) fn since(mut self, started: std::time::Instant) -> Written {
        self.started = started;
        self
    }
}

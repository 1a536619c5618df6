//! A group's plain settles, written together at its end (decision 0059).
//!
//! Most members of a busy group are *plain settles*: a claim's fenced update of the instance
//! row, with its history, the parks it clears and the tasks it arms — a worker's completion
//! resuming its instance, a timer's or a delivery's step that arms nothing else. Each is one
//! statement when written on its own, and a statement's cost is mostly its round trip and the
//! executor's fixed cost, not its rows (docs/design/throughput.md §0). So a group that may defer
//! keeps them and writes them all at once, as one statement per row kind on a backend that can
//! ([`StepStatements::write_settles`]), each member still guarded by its own fence.
//!
//! Nothing a later statement reads changes: the group writes what it kept before any statement
//! that might read it (one on a kept settle's instance, or a look at the waits a kept settle
//! clears), so every statement sees what a member before it wrote, as when each wrote at once.
//! Members kept together are distinct instances, and a plain settle reads nothing another writes.
//!
//! A member whose fence no longer holds writes nothing of any kind (every row joins its own
//! fenced update); it was answered already, though, as if written, so the group must not
//! commit: it fails with [`Error::ClaimLost`], and the engine runs each member alone, where the
//! member is refused and answered as such. Under the row lock its claim took in the same
//! transaction, a fence does not move: this is the guard, not a path.

use jiff::Timestamp;
use sutra_core::snapshot::{ParkId, ParkSort};
use sutra_store::{Arm, Committed, Error, Result, StepCommit};

use crate::commit::{ArmLock, StepStatements, locked_task, step_rows, task_arms, task_locks};

/// A settle kept for the group's end: the step, and the locks of the tasks it arms taken by a
/// worker, drawn when it was kept (its worker is handed them with the group's answer).
pub(crate) struct Deferred {
    step: StepCommit,
    locks: Vec<Option<ArmLock>>,
}

impl Deferred {
    pub(crate) fn instance(&self) -> &str {
        &self.step.snapshot.instance.id
    }

    /// Whether the settle clears a receive's park, whose correlation alias (`waits`) another
    /// step may look at.
    pub(crate) fn clears_a_receive(&self) -> bool {
        (self.step.disarms)
            .iter()
            .any(|disarm| disarm.sort == ParkSort::Receive)
    }
}

/// Whether writing `step` looks at correlation aliases: those its waits take, or, for a start,
/// whether an instance waits on its message's key.
pub(crate) fn reads_waits(step: &StepCommit) -> bool {
    let arms_a_wait = step.arms.iter().any(|arm| matches!(arm, Arm::Wait { .. }));
    let starts_on_a_message = step.claim.is_none() && step.inbox.is_some();
    arms_a_wait || starts_on_a_message
}

/// Whether `step` is a plain settle: a claim's, arming nothing but tasks, cancelling no task a
/// worker may hold (only `resolved`, which the group completed already), and with no message,
/// outbox rows, taken delivery, children, `Call` park or report — each of those is a statement
/// of its own, or reads what another transaction may race for.
pub(crate) fn deferrable(step: &StepCommit, resolved: Option<ParkId>) -> bool {
    let cancels = step.disarms.iter().any(|disarm| match disarm.sort {
        ParkSort::Task => Some(disarm.park) != resolved,
        ParkSort::Call => true,
        _ => false,
    });
    step.claim.is_some()
        && !cancels
        && step.arms.iter().all(|arm| matches!(arm, Arm::Task { .. }))
        && step.inbox.is_none()
        && step.outbox.is_empty()
        && step.taken.is_none()
        && step.children.is_empty()
        && step.report.is_none()
}

/// Keeps a plain settle for the group's end; answers it as its write will: nothing due now,
/// and the tasks it arms locked for their workers.
pub(crate) fn defer(step: &StepCommit, now: Timestamp) -> (Deferred, Committed) {
    let locks = task_locks(&step.arms, now);
    let taken = task_arms(&step.snapshot.instance, &step.arms, &locks)
        .iter()
        .filter_map(locked_task)
        .collect();
    let deferred = Deferred {
        step: step.clone(),
        locks,
    };
    (
        deferred,
        Committed {
            due_now: Vec::new(),
            taken,
        },
    )
}

/// Writes the settles kept, all at once; fails the group with [`Error::ClaimLost`] when one of
/// them found its fence gone (it wrote nothing).
pub(crate) async fn write_deferred<T: StepStatements>(
    tx: &mut T,
    deferred: &[Deferred],
) -> Result<()> {
    let tasks: Vec<_> = deferred
        .iter()
        .map(|kept| task_arms(&kept.step.snapshot.instance, &kept.step.arms, &kept.locks))
        .collect();
    let rows: Vec<_> = deferred
        .iter()
        .zip(&tasks)
        .map(|(kept, tasks)| step_rows(&kept.step, tasks, &[]))
        .collect();
    let landed = tx.write_settles(&rows).await?;
    if landed < rows.len() {
        return Err(Error::ClaimLost);
    }
    Ok(())
}

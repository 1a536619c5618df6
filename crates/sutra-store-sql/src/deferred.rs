//! A group's plain steps, written together at its end (decision 0059).
//!
//! Most members of a busy group are *plain*: a *settle*, a claim's fenced update of the
//! instance row with its history, the parks it clears and the tasks it arms (a worker's
//! completion resuming its instance, the step that ends it), or a *start*, a message's inbox
//! row leading its new instance's insert with its history and tasks. Each is one statement when
//! written on its own, and a statement's cost is mostly its round trip and the executor's fixed
//! cost, not its rows (docs/design/throughput.md §0). So a group that may defer keeps them and
//! writes them at once, as one statement per kind on a backend that can
//! ([`StepStatements::write_plain`]), each member still on its own terms: its fence, or its
//! message not consumed nor awaited.
//!
//! Nothing a later statement reads changes: the group writes what it kept before any statement
//! that might read it (one on a kept step's instance, or a look at the waits a kept settle
//! clears), so every statement sees what a member before it wrote, as when each wrote at once.
//! Kept settles are written before kept starts, and a start is not kept beside a settle that
//! clears a receive (nor such a settle beside a start): a start's look at the waits sees what it
//! would have seen in the members' order. Members kept together are distinct instances.
//!
//! A member that does not land writes nothing of any kind (every row joins its own instance's);
//! it was answered already, though, as if written, so the group must not commit: it fails, and
//! the engine runs each member alone, where the member is answered with its own refusal (a lost
//! claim, a duplicate, a relay). Under the row lock its claim took in the same transaction a
//! settle's fence does not move; a start's message is consumed meanwhile only by a duplicate
//! send racing it.

use jiff::Timestamp;
use sutra_core::snapshot::{ParkId, ParkSort};
use sutra_store::{Arm, Committed, Error, Result, StepCommit};

use crate::commit::{ArmLock, StepStatements, locked_task, step_rows, task_arms, task_locks};

/// A plain step kept for the group's end: the step, and the locks of the tasks it arms taken by
/// a worker, drawn when it was kept (its worker is handed them with the group's answer).
pub(crate) struct Deferred {
    step: StepCommit,
    locks: Vec<Option<ArmLock>>,
}

impl Deferred {
    pub(crate) fn instance(&self) -> &str {
        &self.step.snapshot.instance.id
    }

    fn is_start(&self) -> bool {
        self.step.claim.is_none()
    }

    /// Whether the settle clears a receive's park, whose correlation alias (`waits`) another
    /// step may look at.
    pub(crate) fn clears_a_receive(&self) -> bool {
        clears_a_receive(&self.step)
    }
}

fn clears_a_receive(step: &StepCommit) -> bool {
    (step.disarms)
        .iter()
        .any(|disarm| disarm.sort == ParkSort::Receive)
}

/// Whether keeping `step` beside `kept` would let a kept start see the waits otherwise than in
/// the members' order: a start beside a settle that clears a receive, or the other way round
/// (kept settles are written first).
pub(crate) fn must_write_kept_first(kept: &[Deferred], step: &StepCommit) -> bool {
    if step.claim.is_none() {
        kept.iter().any(Deferred::clears_a_receive)
    } else {
        clears_a_receive(step) && kept.iter().any(Deferred::is_start)
    }
}

/// Whether writing `step` looks at correlation aliases: those its waits take, or, for a start,
/// whether an instance waits on its message's key.
pub(crate) fn reads_waits(step: &StepCommit) -> bool {
    let arms_a_wait = step.arms.iter().any(|arm| matches!(arm, Arm::Wait { .. }));
    let starts_on_a_message = step.claim.is_none() && step.inbox.is_some();
    arms_a_wait || starts_on_a_message
}

/// Whether `step` is plain: a claim's settle that cancels no task a worker may hold (only
/// `resolved`, which the group completed already), or a start led by its message; arming
/// nothing but tasks, and with no outbox rows, taken delivery, child, `Call` park or report —
/// each of those is a statement of its own, or reads what another transaction may race for. A
/// settle consuming a message (a relay's) is not plain: the plain settles write no inbox row.
pub(crate) fn deferrable(step: &StepCommit, resolved: Option<ParkId>) -> bool {
    let cancels = step.disarms.iter().any(|disarm| match disarm.sort {
        ParkSort::Task => Some(disarm.park) != resolved,
        ParkSort::Call => true,
        _ => false,
    });
    let settle = step.claim.is_some() && step.inbox.is_none();
    let start = step.claim.is_none() && step.inbox.is_some() && step.disarms.is_empty();
    (settle || start)
        && !cancels
        && step.arms.iter().all(|arm| matches!(arm, Arm::Task { .. }))
        && step.outbox.is_empty()
        && step.taken.is_none()
        && step.children.is_empty()
        && step.report.is_none()
}

/// Keeps a plain step for the group's end; answers it as its write will: nothing due now, and
/// the tasks it arms locked for their workers.
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

/// Writes the steps kept, the settles first, then the starts, one call each; fails the group
/// when one of them did not land (it wrote nothing): with [`Error::ClaimLost`] for a settle,
/// and for a start with [`Error::Unavailable`] — its message was consumed or is awaited, which
/// the member alone answers as a duplicate or a relay.
pub(crate) async fn write_deferred<T: StepStatements>(
    tx: &mut T,
    deferred: &[Deferred],
) -> Result<()> {
    let (starts, settles): (Vec<&Deferred>, Vec<&Deferred>) =
        deferred.iter().partition(|kept| kept.is_start());
    if write_kind(tx, &settles).await? < settles.len() {
        return Err(Error::ClaimLost);
    }
    if write_kind(tx, &starts).await? < starts.len() {
        return Err(Error::Unavailable(
            "a start kept for its group's end found its message consumed or awaited; the \
             group's members run alone"
                .to_owned(),
        ));
    }
    Ok(())
}

/// Writes `kept` (all of one kind) in one call; how many landed.
async fn write_kind<T: StepStatements>(tx: &mut T, kept: &[&Deferred]) -> Result<usize> {
    if kept.is_empty() {
        return Ok(0);
    }
    let tasks: Vec<_> = kept
        .iter()
        .map(|kept| task_arms(&kept.step.snapshot.instance, &kept.step.arms, &kept.locks))
        .collect();
    let rows: Vec<_> = kept
        .iter()
        .zip(&tasks)
        .map(|(kept, tasks)| step_rows(&kept.step, tasks, &[]))
        .collect();
    tx.write_plain(&rows).await
}

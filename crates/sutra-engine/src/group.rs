//! Group commit (decision 0024): the steps a lane has queued run as members of one transaction,
//! each claimed, guarded and written on its own, and all of them committed at once.
//!
//! A lane takes its next request and whatever else is already queued behind it, up to
//! `sutra.engine.group.max`, and runs them here, one member after the other ([`Stepper`]). A
//! member refused, stale or failing is undone alone and answered with its own outcome; the
//! others are kept. Every member is answered only after the group's `COMMIT` returned, so
//! *reply implies committed* holds for each. When the group's transaction fails as a whole (a
//! database error, a deadlock broken by the database, a lost connection), each member is run
//! again alone, so that one member's error fails only that member. A group of one is what an
//! idle lane commits: natural batching adds no wait when there is nothing to batch.

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use sutra_store::Group;
use tokio::sync::oneshot;
use tracing::warn;

use crate::error::Error;
use crate::fault;
use crate::runner::{Completion, StepOutcome, StepRequest, Stepper, Written};

/// One member of a group, and where its answer goes.
pub(crate) enum Member {
    Step(
        Box<StepRequest>,
        oneshot::Sender<Result<StepOutcome, Error>>,
    ),
    Complete(Box<Completion>, oneshot::Sender<Result<(), Error>>),
}

/// What a member did inside the group, before the group committed.
enum Ran {
    Step(Result<Written, Error>),
    /// `None`: the completion was recorded without resuming its instance.
    Complete(Result<Option<Written>, Error>),
}

impl Member {
    fn tenant(&self) -> &str {
        match self {
            Member::Step(request, _) => &request.key.tenant,
            Member::Complete(completion, _) => &completion.tenant,
        }
    }

    async fn run(&self, stepper: &Stepper<'_>, group: &mut dyn Group) -> Ran {
        match self {
            Member::Step(request, _) => Ran::Step(
                AssertUnwindSafe(stepper.step(group, request))
                    .catch_unwind()
                    .await
                    .unwrap_or(Err(Error::Panicked)),
            ),
            Member::Complete(completion, _) => Ran::Complete(
                AssertUnwindSafe(stepper.complete(group, completion))
                    .catch_unwind()
                    .await
                    .unwrap_or(Err(Error::Panicked)),
            ),
        }
    }

    /// The group committed: lands what the member wrote and answers its caller.
    fn answer(self, ran: Ran, stepper: &Stepper<'_>) {
        let shared = stepper.shared;
        match (self, ran) {
            (Member::Step(_, answer), Ran::Step(result)) => {
                let _ = answer.send(result.map(|written| written.land(shared)));
            }
            (Member::Complete(_, answer), Ran::Complete(result)) => {
                let result = result.map(|resumed| {
                    match resumed {
                        Some(written) => drop(written.land(shared)),
                        // Its delivery is due now: the dispatcher takes it.
                        None => shared.deliveries_due.notify_one(),
                    }
                    fault::point("after-task-complete");
                });
                let _ = answer.send(result);
            }
            // `Member::run` answers a member with its own kind.
            (member, _) => member.fail(Error::Panicked),
        }
    }

    fn fail(self, error: Error) {
        match self {
            Member::Step(_, answer) => drop(answer.send(Err(error))),
            Member::Complete(_, answer) => drop(answer.send(Err(error))),
        }
    }
}

impl Ran {
    /// Whether the member failed on its own (its writes undone): retrying it alone changes
    /// nothing about that.
    fn failed(&self) -> bool {
        matches!(self, Ran::Step(Err(_)) | Ran::Complete(Err(_)))
    }

    fn abandon(self, stepper: &Stepper<'_>) {
        match self {
            Ran::Step(Ok(written)) | Ran::Complete(Ok(Some(written))) => {
                written.abandon(stepper.shared)
            }
            _ => {}
        }
    }
}

/// Runs `members` as one group, or, when the group fails as a whole, each alone.
pub(crate) async fn run(stepper: &Stepper<'_>, members: Vec<Member>) {
    if members.len() == 1 {
        for member in members {
            alone(stepper, member).await;
        }
        return;
    }
    match together(stepper, &members).await {
        Ok(ran) => {
            for (member, ran) in members.into_iter().zip(ran) {
                member.answer(ran, stepper);
            }
        }
        Err(error) => {
            warn!(%error, members = members.len(), "a group commit failed; its members run alone");
            for member in members {
                alone(stepper, member).await;
            }
        }
    }
}

/// Runs one request as a group of one and returns its answer.
pub(crate) async fn one(stepper: &Stepper<'_>, request: StepRequest) -> Result<StepOutcome, Error> {
    let (answer, outcome) = oneshot::channel();
    alone(stepper, Member::Step(Box::new(request), answer)).await;
    outcome.await.map_err(|_| Error::Closed)?
}

async fn alone(stepper: &Stepper<'_>, member: Member) {
    match together(stepper, std::slice::from_ref(&member)).await {
        Ok(mut ran) => member.answer(ran.remove(0), stepper),
        Err(error) => member.fail(error),
    }
}

/// The group's transaction: every member in order, then the commit. On an error of the group
/// itself nothing is durable, and nobody waits on any member's account.
async fn together(stepper: &Stepper<'_>, members: &[Member]) -> Result<Vec<Ran>, Error> {
    let mut group = stepper.shared.store.group().await?;
    let mut ran: Vec<Ran> = Vec::with_capacity(members.len());
    let mut written = write_members(stepper, &mut *group, members, &mut ran).await;
    // The crash tests' points around a commit of several members; a group of one is any step's.
    let several = members.len() > 1;
    if written.is_ok() {
        if several {
            fault::point("before-group-commit");
        }
        written = group.commit().await;
    }
    if written.is_ok() && several {
        fault::point("after-group-commit");
    }
    match written {
        Ok(()) => Ok(ran),
        Err(error) => {
            for result in ran {
                result.abandon(stepper);
            }
            Err(error.into())
        }
    }
}

/// Each member inside its own mark; one that failed is undone before the next begins.
async fn write_members(
    stepper: &Stepper<'_>,
    group: &mut dyn Group,
    members: &[Member],
    ran: &mut Vec<Ran>,
) -> sutra_store::Result<()> {
    for member in members {
        group.member(member.tenant()).await?;
        let result = member.run(stepper, group).await;
        let failed = result.failed();
        ran.push(result);
        if failed {
            group.undo().await?;
        }
    }
    Ok(())
}

//! Group commit (decision 0024): the steps a lane has queued run as members of one transaction,
//! each claimed, guarded and written on its own, and all of them committed at once.
//!
//! A lane takes its next request and whatever else is already queued behind it, up to
//! `sutra.engine.group.max`, and runs them here, one member after the other ([`Stepper`]). A
//! member refused, stale or rejected has written nothing (its claim is the row lock) and is
//! answered with its own outcome; the others are kept. Every member is answered only after the
//! group's `COMMIT` returned, so *reply implies committed* holds for each. When a member fails
//! in a way that may have left it half written (a database error, a panic), or the group's
//! transaction fails as a whole (a deadlock broken by the database, a lost connection, a kept
//! step that did not land: decision 0059), nothing of the group is committed and each member
//! is run again alone, so that one member's error fails only that member. A group of one is what an idle lane commits: natural batching adds no
//! wait when there is nothing to batch.

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use sutra_core::codes;
use sutra_core::snapshot::Failure;
use sutra_store::{ClaimAhead, Group, LockedTask};
use tokio::sync::oneshot;
use tracing::{debug, warn};

use crate::error::Error;
use crate::history_log::Landed;
use crate::request::{Completion, StepOutcome, StepRequest, Work};
use crate::runner::{Stepper, fails_clean};
use crate::shared::Shared;
use crate::written::Written;
use crate::{fault, history_log, metrics, test_switches};

/// One member of a group, and where its answer goes.
pub(crate) enum Member {
    Step(
        Box<StepRequest>,
        oneshot::Sender<Result<StepOutcome, Error>>,
    ),
    Complete(
        Box<Completion>,
        oneshot::Sender<Result<Option<LockedTask>, Error>>,
    ),
}

/// What a member did inside the group, before the group committed.
enum Ran {
    Step(Result<Written, Error>),
    /// `None`: the completion was recorded without resuming its instance.
    Complete(Result<Option<Written>, Error>),
}

impl Member {
    pub(crate) fn tenant(&self) -> &str {
        match self {
            Member::Step(request, _) => &request.key.tenant,
            Member::Complete(completion, _) => &completion.tenant,
        }
    }

    /// The instance the member acts on, if it names one.
    pub(crate) fn instance(&self) -> Option<&str> {
        match self {
            Member::Step(request, _) => Some(&request.key.id),
            Member::Complete(completion, _) => sutra_store::task_instance(&completion.task),
        }
    }

    /// The claim the member will ask for as its first statement, if any: a start inserts its
    /// instance, and a completion not resumed in place claims nothing.
    fn claim(&self) -> Option<ClaimAhead<'_>> {
        match self {
            Member::Step(request, _) => match request.work {
                Work::Start { .. } => None,
                Work::Resume { .. } | Work::Migrate { .. } | Work::Poison { .. } => {
                    Some(ClaimAhead {
                        instance: &request.key.id,
                        completing: None,
                    })
                }
            },
            Member::Complete(completion, _) if completion.in_place => Some(ClaimAhead {
                instance: sutra_store::task_instance(&completion.task)?,
                completing: Some((&completion.task, &completion.lock_token)),
            }),
            Member::Complete(..) => None,
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
                // A caller gone meanwhile drops the answer, and its Hold withdraws it.
                let _ = answer.send(result.map(|written| written.land(shared)));
            }
            (Member::Complete(_, answer), Ran::Complete(result)) => {
                let result = result.map(|resumed| {
                    let taken = match resumed {
                        Some(mut written) => {
                            let taken = written.take_task();
                            drop(written.land(shared));
                            taken
                        }
                        // Its delivery is due now: the dispatcher takes it.
                        None => {
                            shared.deliveries_due.notify_one();
                            None
                        }
                    };
                    fault::point("after-task-complete");
                    taken
                });
                let _ = answer.send(result);
            }
            // `Member::run` answers a member with its own kind.
            (member, _) => member.fail(Error::Panicked),
        }
    }

    /// A completion whose resume in place failed half written (a panic, a corrupt row) is run
    /// once more as a delivery of its output: the worker's call succeeds, and the dispatcher
    /// takes the delivery under the delivery ceiling (docs/decisions/0047). Whether it changed
    /// the member: a step, or a completion already delivering, is answered with its error.
    fn deliver_instead(&mut self) -> bool {
        match self {
            Member::Complete(completion, _) if completion.in_place => {
                completion.in_place = false;
                true
            }
            _ => false,
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
    /// What the history log records of the member once its group committed.
    fn record(&self) -> Option<&history_log::Commit> {
        match self {
            Ran::Step(Ok(written)) | Ran::Complete(Ok(Some(written))) => written.record.as_ref(),
            _ => None,
        }
    }

    /// The member's error, if it may have left the member half written.
    fn unclean(&self) -> Option<&Error> {
        match self {
            Ran::Step(Err(error)) | Ran::Complete(Err(error)) if !fails_clean(error) => Some(error),
            _ => None,
        }
    }
}

/// Runs `members` as one group, or, when the group fails as a whole, each alone.
pub(crate) async fn run(stepper: &Stepper<'_>, members: Vec<Member>) {
    metrics::group_members(members.len());
    if test_switches::ack_before_commit() {
        return answered_before_commit(stepper, members).await;
    }
    if members.len() == 1 {
        for member in members {
            alone(stepper, member).await;
        }
        return;
    }
    match together(stepper, &members).await {
        Ok(ran) => {
            for (member, ran) in members.into_iter().zip(ran) {
                settle(member, ran, stepper).await;
            }
        }
        Err(unclean) => {
            let error = match &unclean {
                Unclean::Member(ran) => ran.unclean().map(ToString::to_string),
                Unclean::Group(error) => Some(error.to_string()),
            };
            warn!(
                error,
                members = members.len(),
                "a group did not commit; its members run alone"
            );
            // The failed member's step, dropped, withdraws the caller it registered (its Hold).
            drop(unclean);
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

async fn alone(stepper: &Stepper<'_>, mut member: Member) {
    loop {
        match together(stepper, std::slice::from_ref(&member)).await {
            Ok(mut ran) => return settle(member, ran.remove(0), stepper).await,
            Err(Unclean::Member(ran)) => {
                if member.deliver_instead() {
                    let error = ran.unclean().map(ToString::to_string);
                    warn!(
                        error,
                        "a completion could not resume its instance in place; its output is recorded as a delivery"
                    );
                    continue;
                }
                return member.answer(*ran, stepper);
            }
            Err(Unclean::Group(error)) => return member.fail(error),
        }
    }
}

/// Answers a member once its group ended, having first failed in its row an instance whose
/// snapshot the member's claim could not decode (docs/decisions/0082): such a failure cannot be
/// written in the snapshot. Outside the group's transaction, which held the row, and before the
/// answer, so that whoever is told of it finds the instance failed.
async fn settle(member: Member, ran: Ran, stepper: &Stepper<'_>) {
    if let (Ran::Step(Err(Error::Unreadable(why))), Some(instance)) = (&ran, member.instance()) {
        mark_unreadable(stepper.shared, member.tenant(), instance, why).await;
    }
    member.answer(ran, stepper);
}

/// Fails the instance in its row with `SUTRA.STORE.CORRUPT`, unless its snapshot decodes after
/// all or the row is marked already (the store checks, under the row's lock). A mark that could
/// not be written is tried again by the next step that meets the instance.
async fn mark_unreadable(shared: &Shared, tenant: &str, instance: &str, why: &str) {
    let failure = Failure {
        code: codes::STORE_CORRUPT.code.to_owned(),
        detail: format!(
            "the instance's stored snapshot cannot be decoded ({why}), so it can neither run \
             nor hold its own failure: its row is marked failed, and nothing else of it was \
             changed. Copy the database, repair the `snapshot` column of its row in `instances` \
             (from a backup, or as the version that wrote it reads it), then restore the \
             instance (POST /v1/instances/{instance}/restore)"
        ),
        token: None,
        node: None,
    };
    match shared
        .store
        .mark_unreadable(tenant, instance, &failure)
        .await
    {
        Ok(true) => {
            warn!(tenant, instance, %why, "instance failed in its row: its snapshot cannot be decoded")
        }
        Ok(false) => {}
        Err(error) => {
            warn!(tenant, instance, %error, "could not mark an instance whose snapshot cannot be decoded; the next step that meets it tries again")
        }
    }
}

/// Why a group did not commit.
enum Unclean {
    /// A member failed half written: its own answer. Nothing of the group was committed.
    Member(Box<Ran>),
    /// The group's transaction failed; if its `COMMIT` did, it may have landed all the same.
    Group(Error),
}

/// The group's transaction: every member in order, then the commit. When it does not commit,
/// nothing of it is durable (but for a `COMMIT` whose answer was lost), and nobody waits on any
/// member's account.
async fn together(stepper: &Stepper<'_>, members: &[Member]) -> Result<Vec<Ran>, Unclean> {
    let Some(first) = members.first() else {
        return Ok(Vec::new());
    };
    let mut group = stepper
        .shared
        .store
        .group(first.tenant())
        .await
        .map_err(|error| Unclean::Group(error.into()))?;
    if let Err(error) = claim_ahead(stepper, &mut *group, members).await {
        roll_back(group).await;
        return Err(Unclean::Group(error.into()));
    }
    // Members' plain steps written together (decision 0059). Alone, a member writes at once: a
    // refusal found when kept steps are written fails the whole group, and a member alone must
    // be answered with its own refusal.
    if members.len() > 1 {
        group.defer_plain_steps();
    }
    let mut ran: Vec<Ran> = Vec::with_capacity(members.len());
    let written = write_members(stepper, &mut *group, members, &mut ran).await;
    // The crash tests' points around a commit of several members; a group of one is any step's.
    let several = members.len() > 1;
    let committed = match written {
        Ok(()) => {
            if several {
                fault::point("before-group-commit");
            }
            let commit = group
                .commit()
                .await
                .map_err(|error| Unclean::Group(error.into()));
            let commit = commit.and_then(|()| answer_lost(several));
            if commit.is_err() {
                // It may have landed all the same: the history says so, for what follows to tell.
                record_commits(stepper, &ran, Landed::Unknown);
            }
            commit
        }
        Err(unclean) => {
            roll_back(group).await;
            Err(unclean)
        }
    };
    match committed {
        Ok(()) => {
            // Recorded before any member is answered: an answer's event comes after its commit's.
            record_commits(stepper, &ran, Landed::Yes);
            Ok(ran)
        }
        Err(unclean) => {
            // Nothing committed, or a COMMIT whose answer was lost (each member alone then finds
            // what landed): each step, dropped, withdraws the caller it registered (its Hold),
            // and nobody waits on its account.
            drop(ran);
            Err(unclean)
        }
    }
}

/// Ends a group that will not commit before its members run alone: dropped, its transaction
/// would hold their rows until its connection is next used, and their own claims would be
/// refused as held. One that cannot roll back has lost its connection, and its locks with it.
async fn roll_back(group: Box<dyn Group>) {
    if let Err(error) = group.rollback().await {
        debug!(%error, "a group that did not commit could not roll back; its connection is gone");
    }
}

/// Takes the claims the group's members will ask for in one statement (issue 35), rather than
/// one each as its turn comes: those of the first member's tenant — the one the group acts for
/// until a member declares another — whose instance no other member of the group names, since
/// a second step on one instance must claim what the first wrote. Fewer than two save nothing.
async fn claim_ahead(
    stepper: &Stepper<'_>,
    group: &mut dyn Group,
    members: &[Member],
) -> Result<(), sutra_store::Error> {
    let Some(first) = members.first() else {
        return Ok(());
    };
    let tenant = first.tenant();
    let named: Vec<Option<&str>> = members.iter().map(Member::instance).collect();
    let once = |instance: &str| named.iter().filter(|n| **n == Some(instance)).count() == 1;
    let ahead: Vec<ClaimAhead<'_>> = members
        .iter()
        .filter(|member| member.tenant() == tenant)
        .filter_map(Member::claim)
        .filter(|claim| once(claim.instance))
        .collect();
    if ahead.len() < 2 {
        return Ok(());
    }
    let config = &stepper.shared.config;
    group
        .claim_ahead(tenant, stepper.owner, config.claim_timeout, &ahead)
        .await
}

/// Each member in order, stopping at the first that may have left itself half written.
async fn write_members(
    stepper: &Stepper<'_>,
    group: &mut dyn Group,
    members: &[Member],
    ran: &mut Vec<Ran>,
) -> Result<(), Unclean> {
    for member in members {
        group
            .member(member.tenant())
            .await
            .map_err(|error| Unclean::Group(error.into()))?;
        let result = member.run(stepper, group).await;
        if result.unclean().is_some() {
            return Err(Unclean::Member(Box::new(result)));
        }
        ran.push(result);
    }
    Ok(())
}

/// The crash tests' point after a commit of several members (a group of one is any step's):
/// under `after-group-commit:lose` (test builds), a `COMMIT` that landed is answered as failed,
/// its answer lost with the connection.
fn answer_lost(several: bool) -> Result<(), Unclean> {
    if several && fault::lost("after-group-commit") {
        let lost = "the COMMIT's answer was lost (fault point after-group-commit)";
        return Err(Unclean::Group(
            sutra_store::Error::Unavailable(lost.into()).into(),
        ));
    }
    Ok(())
}

/// Records each member of a group that committed — or may have (`landed`) — in the history log.
fn record_commits(stepper: &Stepper<'_>, ran: &[Ran], landed: Landed) {
    if !history_log::enabled() {
        return;
    }
    let group = history_log::next_group();
    let me = &stepper.shared.config.replica_id;
    for (member, ran) in ran.iter().enumerate() {
        if let Some(record) = ran.record() {
            history_log::commit(me, record, landed, group, member);
        }
    }
}

/// How long the group waits, under `SUTRA_TEST_ACK_BEFORE_COMMIT`, between answering its
/// members and committing: time for the callers to hear first.
const ACK_LEAD: std::time::Duration = std::time::Duration::from_millis(20);

/// The group as `SUTRA_TEST_ACK_BEFORE_COMMIT` runs it ([`test_switches`]): each member is
/// answered as soon as it is written, and the group commits after — *reply implies committed*
/// broken on purpose, for the history checker to find.
async fn answered_before_commit(stepper: &Stepper<'_>, members: Vec<Member>) {
    let Some(first) = members.first() else {
        return;
    };
    let mut group = match stepper.shared.store.group(first.tenant()).await {
        Ok(group) => group,
        Err(_) => return members.into_iter().for_each(|m| m.fail(Error::Closed)),
    };
    let mut ran_all = Vec::new();
    for (index, member) in members.into_iter().enumerate() {
        if group.member(member.tenant()).await.is_err() {
            member.fail(Error::Closed);
            continue;
        }
        let ran = member.run(stepper, &mut *group).await;
        let record = ran.record().cloned();
        member.answer(ran, stepper);
        ran_all.extend(record.map(|record| (index, record)));
    }
    stepper.shared.clock.sleep(ACK_LEAD).await;
    if group.commit().await.is_ok() && history_log::enabled() {
        let number = history_log::next_group();
        let me = &stepper.shared.config.replica_id;
        for (index, record) in ran_all {
            history_log::commit(me, &record, Landed::Yes, number, index);
        }
    }
}

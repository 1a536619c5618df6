//! The rows of a step (SPEC §5.2): what the executor's [`Step`] and the member's bookkeeping
//! ([`PendingCommit`]) become in the store's [`StepCommit`] — arms, disarms, outbox rows, the
//! children a call inserts and the report a child's ending sends its caller.

use sutra_core::codes;
use sutra_core::exec;
use sutra_core::snapshot::{Caller, InstanceInfo, ParkId, Snapshot, Status};
use sutra_core::step::{ChildStart, Disarm, Effect, Message, Step, StepContext};
use sutra_store::{
    Arm, ClaimToken, Claimed, DeliveryId, InboxAnswer, InboxEntry, NewChild, OutboxEntry, Report,
    StepCommit, TakenBy,
};

use crate::config::EngineConfig;
use crate::handoff::Take;
use crate::request::Consumed;
use crate::{arms, settle};

pub(crate) struct PendingCommit {
    /// What the history log calls the step ([`history_log::START`] and its siblings).
    pub(crate) kind: &'static str,
    pub(crate) claim: Option<ClaimToken>,
    /// Who held a caller on the instance before this step, as its claim read it.
    pub(crate) held_by: Option<String>,
    /// The park the step's event answered: a step that runs holds it.
    pub(crate) answered: Option<Disarm>,
    pub(crate) taken: Option<DeliveryId>,
    pub(crate) consumed: Option<Consumed>,
    pub(crate) hold: bool,
    pub(crate) take: Option<Take>,
}

impl PendingCommit {
    /// The commit of an administrator's step on `claimed`: one that answers no park, takes no
    /// delivery, consumes no message and holds no caller.
    pub(crate) fn of_claim(kind: &'static str, claimed: Claimed) -> PendingCommit {
        PendingCommit {
            kind,
            claim: Some(claimed.token),
            held_by: claimed.held_by,
            answered: None,
            taken: None,
            consumed: None,
            hold: false,
            take: None,
        }
    }
}

/// SPEC §7.2: a correlation alias already taken fails the instance that tried to park on it.
/// The step's progress stands; the parks it would have armed are not written.
pub(crate) fn fail_on_taken_alias(step: Step, channel: &str, key: &str, ctx: StepContext) -> Step {
    let detail = format!("another instance already waits on channel `{channel}` with key `{key}`");
    // Only a live instance arms a wait, so the step's snapshot is always live here.
    let Ok(failed) = exec::fail(
        &step.snapshot,
        codes::CORRELATION_ALIAS_TAKEN.code,
        &detail,
        ctx,
    ) else {
        return step;
    };
    // Nor the children it would have called: the failure cancels what it waits for.
    let kept = step
        .effects
        .into_iter()
        .filter(|effect| !matches!(effect, Effect::Arm { .. } | Effect::Call { .. }));
    Step {
        snapshot: failed.snapshot,
        effects: kept.chain(failed.effects).collect(),
        history: step.history.into_iter().chain(failed.history).collect(),
        reply: failed.reply,
    }
}

/// The rows of `step`, committed by the replica `config` runs, its tasks locked as `locks` say
/// and each task's own lock granted up to `sutra.tasks.max-lock` (decision 0078): a poll that
/// asks for no lock takes the task's, so the ceiling is in the row.
pub(crate) fn to_commit(
    step: &Step,
    pending: &PendingCommit,
    config: &EngineConfig,
    locks: &[(ParkId, TakenBy)],
) -> StepCommit {
    let me = config.replica_id.as_str();
    let mut arms = Vec::new();
    let mut disarms: Vec<Disarm> = answered_released(step, pending).into_iter().collect();
    let mut outbox = Vec::new();
    let mut children = Vec::new();
    let mut report = None;
    for effect in &step.effects {
        match effect {
            Effect::Arm { token, park, .. } => arms.extend(arms::of(park, *token, &step.snapshot)),
            Effect::Disarm(disarm) => disarms.push(*disarm),
            Effect::Emit {
                channel,
                data,
                key,
                idempotency_key,
            } => outbox.push(OutboxEntry {
                channel: channel.clone(),
                payload: data.clone(),
                message_key: key.clone(),
                idempotency_key: idempotency_key.clone(),
            }),
            Effect::Call { park, child } => children.push(new_child(&step.snapshot, *park, child)),
            Effect::Answer { to, outcome } => {
                report = Some(Report {
                    parent: to.instance.clone(),
                    park: to.park,
                    child: step.snapshot.instance.id.clone(),
                    outcome: outcome.clone(),
                });
            }
        }
    }
    for arm in &mut arms {
        if let Arm::Task {
            park,
            taken_by,
            lock,
            ..
        } = arm
        {
            *lock = config.granted_lock(*lock);
            *taken_by = locks
                .iter()
                .find(|(locked, _)| locked == park)
                .map(|(_, by)| by.clone());
        }
    }
    let inbox = pending.consumed.as_ref().map(|consumed| InboxEntry {
        channel: consumed.channel.clone(),
        event_id: consumed.event_id.clone(),
        answer: InboxAnswer {
            instance: Some(step.snapshot.instance.id.clone()),
            status: step.snapshot.status.as_str().to_owned(),
        },
        key: consumed.key.clone(),
    });
    StepCommit {
        claim: pending.claim.clone(),
        snapshot: step.snapshot.clone(),
        history: step.history.clone(),
        arms,
        disarms,
        outbox,
        taken: pending.taken,
        inbox,
        held_by: pending
            .hold
            .then(|| settle::holder_after(pending.held_by.as_deref(), me)),
        announce_end: step.reply.is_some()
            && settle::held_elsewhere(pending.held_by.as_deref(), me),
        children,
        report,
    }
}

/// The park the step's event answered, whose rows the commit resolves — unless the step kept
/// the instance waiting on it: a call whose child failed with no `on-error` waits on for the
/// child's repair, and resolving its park would cancel the child being repaired.
fn answered_released(step: &Step, pending: &PendingCommit) -> Option<Disarm> {
    let answered = pending.answered?;
    let kept = step.snapshot.status == Status::Suspended
        && step.snapshot.parks().any(|park| park.id == answered.park);
    (!kept).then_some(answered)
}

/// The instance `parent` calls on `park`: on the caller's deployment and version, in its
/// tenant, started by a message only its start delivery carries.
fn new_child(parent: &Snapshot, park: ParkId, child: &ChildStart) -> NewChild {
    let caller = &parent.instance;
    let info = InstanceInfo {
        id: child.id.clone(),
        tenant: caller.tenant.clone(),
        deployment: caller.deployment.clone(),
        version: caller.version,
        flow: child.flow.clone(),
        parent: Some(Caller {
            instance: caller.id.clone(),
            park,
            node: child.node.clone(),
            depth: child.depth,
        }),
    };
    let start = Message {
        id: format!("call:{}:{park}", caller.id),
        kind: "sutra.call".to_owned(),
        source: format!("/instances/{}", caller.id),
        subject: Some(child.node.clone()),
        time: None,
        data: child.input.clone(),
    };
    NewChild {
        snapshot: Snapshot::new(info),
        park,
        start,
    }
}

//! The claim-guarded step (SPEC §5.2): claim → load → apply one event → commit every write of
//! the step and release the claim in one transaction.
//!
//! Every exit that does not commit releases the claim explicitly: a refusal after the claim, a
//! stale delivery, an invalid state, a store error, and a panic — which is re-raised after the
//! release, so the lane's own handler sees it. A destructor cannot await, so this is a reviewed
//! guarantee rather than a compiler-enforced one; the exits are the arms of one `match` in
//! [`resume`], and the stuck-instance sweep is the backstop when the process itself dies.

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use jiff::Timestamp;
use sutra_core::codes;
use sutra_core::exec;
use sutra_core::snapshot::{InstanceInfo, Park, ParkId, ParkKind, Snapshot, Status};
use sutra_core::step::{Effect, Event, Message, Rejection, Reply, Step, StepContext};
use sutra_store::{
    Arm, ClaimToken, Claimed, DeliveryId, InboxAnswer, InboxEntry, InstanceKey, OutboxEntry, Owner,
    StepCommit,
};
use tracing::{debug, warn};

use crate::error::Error;
use crate::registry::Live;
use crate::settle::Hold;
use crate::shared::Shared;
use crate::{fault, metrics};

/// Work for one instance, handed to its lane.
pub(crate) struct StepRequest {
    pub key: InstanceKey,
    pub work: Work,
    /// Hold the caller until the instance ends (`ack: complete`): registered before the commit.
    pub hold: bool,
}

pub(crate) enum Work {
    Start {
        info: InstanceInfo,
        message: Message,
        channel: String,
    },
    Resume {
        event: Event,
        taken: Option<DeliveryId>,
        consumed: Option<Consumed>,
    },
}

/// The message a step consumes, recorded in the inbox for dedup.
pub(crate) struct Consumed {
    pub channel: String,
    pub event_id: String,
}

/// What the caller learns once the step committed.
#[derive(Debug)]
pub struct StepOutcome {
    pub instance: String,
    pub status: Status,
    pub reply: Option<Reply>,
    pub hold: Option<Hold>,
}

pub(crate) async fn run_step(
    shared: &Shared,
    owner: &Owner,
    live: &Live,
    request: StepRequest,
) -> Result<StepOutcome, Error> {
    let StepRequest { key, work, hold } = request;
    match work {
        Work::Start {
            info,
            message,
            channel,
        } => {
            let consumed = Consumed {
                channel,
                event_id: message.id.clone(),
            };
            let started = std::time::Instant::now();
            let flow = info.flow.clone();
            let result = start(shared, live, info, message, consumed, hold).await;
            metrics::step(&flow, outcome_label(&result), started);
            result
        }
        Work::Resume {
            event,
            taken,
            consumed,
        } => {
            resume(
                shared,
                owner,
                live,
                &key,
                Resumption {
                    event,
                    taken,
                    consumed,
                    hold,
                },
            )
            .await
        }
    }
}

/// The first step of a new instance. There is no claim to take: the instance row does not exist
/// until this commit inserts it, unowned, together with the inbox row that makes the start
/// exactly-once.
async fn start(
    shared: &Shared,
    live: &Live,
    info: InstanceInfo,
    message: Message,
    consumed: Consumed,
    hold: bool,
) -> Result<StepOutcome, Error> {
    let (_, flow) = live
        .pinned(&info)
        .ok_or_else(|| Error::Unpinned(describe(&info)))?;
    let before = Snapshot::new(info);
    let ctx = StepContext::at(Timestamp::now());
    let step = exec::apply(flow, &before, Event::Start { message }, ctx).map_err(rejected)?;
    let pending = PendingCommit {
        claim: None,
        answered: None,
        taken: None,
        consumed: Some(consumed),
        hold,
    };
    commit(shared, step, pending, ctx).await
}

/// An event for an existing instance, and what its step consumes.
pub(crate) struct Resumption {
    pub event: Event,
    pub taken: Option<DeliveryId>,
    pub consumed: Option<Consumed>,
    pub hold: bool,
}

pub(crate) async fn resume(
    shared: &Shared,
    owner: &Owner,
    live: &Live,
    key: &InstanceKey,
    resumption: Resumption,
) -> Result<StepOutcome, Error> {
    let started = std::time::Instant::now();
    let claimed = match shared
        .store
        .claim(&key.tenant, &key.id, owner, shared.config.claim_timeout)
        .await
    {
        Ok(claimed) => claimed,
        Err(sutra_store::Error::ClaimHeld) => return Err(Error::Busy),
        Err(sutra_store::Error::InstanceNotFound(id)) => return Err(Error::NotFound(id)),
        Err(other) => return Err(other.into()),
    };
    fault::point("after-claim");
    let token = claimed.token.clone();
    let flow = claimed.snapshot.instance.flow.clone();
    debug!(instance = %key.id, owner = %owner.0, fence = token.fence, "claimed");
    let advanced = AssertUnwindSafe(advance(shared, live, claimed, resumption))
        .catch_unwind()
        .await;
    let result = match advanced {
        Ok(Ok(outcome)) => Ok(outcome),
        Ok(Err(error)) => {
            release(shared, key, &token).await;
            Err(error)
        }
        Err(panic) => {
            release(shared, key, &token).await;
            metrics::step(&flow, "panicked", started);
            std::panic::resume_unwind(panic)
        }
    };
    metrics::step(&flow, outcome_label(&result), started);
    result
}

/// The `outcome` label of a step that ran: it committed, or why not.
fn outcome_label(result: &Result<StepOutcome, Error>) -> &'static str {
    match result {
        Ok(_) => "committed",
        Err(Error::Stale(_)) => "stale",
        Err(Error::InvalidState(_)) => "rejected",
        Err(Error::Unpinned(_)) => "unpinned",
        Err(_) => "failed",
    }
}

async fn release(shared: &Shared, key: &InstanceKey, token: &ClaimToken) {
    if let Err(error) = shared.store.release(&key.tenant, &key.id, token).await {
        // The sweep clears it after the claim timeout; nothing else can be done from here.
        warn!(instance = %key.id, %error, "could not release a claim; the sweep will clear it");
    }
}

async fn advance(
    shared: &Shared,
    live: &Live,
    claimed: Claimed,
    resumption: Resumption,
) -> Result<StepOutcome, Error> {
    let Resumption {
        event,
        taken,
        consumed,
        hold,
    } = resumption;
    let info = &claimed.snapshot.instance;
    let (_, flow) = live
        .pinned(info)
        .ok_or_else(|| Error::Unpinned(describe(info)))?;
    let answered = event.park();
    let ctx = StepContext::at(Timestamp::now());
    match exec::apply(flow, &claimed.snapshot, event, ctx) {
        Ok(step) => {
            let pending = PendingCommit {
                claim: Some(claimed.token),
                answered,
                taken,
                consumed,
                hold,
            };
            commit(shared, step, pending, ctx).await
        }
        Err(Rejection::Stale(park)) => {
            // A delivery that can never apply is consumed without a step, so that it is not
            // asked again forever.
            if let Some(id) = taken {
                shared.store.discard(id).await?;
            }
            Err(Error::Stale(format!(
                "the instance no longer holds park {park:?}"
            )))
        }
        Err(rejection) => Err(rejected(rejection)),
    }
}

struct PendingCommit {
    claim: Option<ClaimToken>,
    answered: Option<ParkId>,
    taken: Option<DeliveryId>,
    consumed: Option<Consumed>,
    hold: bool,
}

async fn commit(
    shared: &Shared,
    mut step: Step,
    pending: PendingCommit,
    ctx: StepContext,
) -> Result<StepOutcome, Error> {
    let instance = step.snapshot.instance.id.clone();
    let is_start = pending.claim.is_none();
    let hold = pending.hold.then(|| shared.settle.register(&instance));
    fault::point("before-commit");
    let mut result = shared.store.commit(&to_commit(&step, &pending)).await;
    if let Err(sutra_store::Error::AliasTaken { channel, key }) = &result {
        step = fail_on_taken_alias(step, channel, key, ctx);
        result = shared.store.commit(&to_commit(&step, &pending)).await;
    }
    match result {
        Ok(committed) => {
            fault::point(if is_start {
                "after-start-commit"
            } else {
                "after-commit"
            });
            if let Some(reply) = &step.reply {
                shared.settle.settle(&instance, reply);
            }
            if !committed.due_now.is_empty() {
                shared.deliveries_due.notify_one();
            }
            if step
                .effects
                .iter()
                .any(|effect| matches!(effect, Effect::Emit { .. }))
            {
                shared.outbox_due.notify_one();
            }
            if step.effects.iter().any(arms_a_task) {
                shared.tasks_available.notify_waiters();
            }
            Ok(StepOutcome {
                instance,
                status: step.snapshot.status,
                reply: step.reply,
                hold,
            })
        }
        Err(error) => {
            if let Some(hold) = hold {
                shared.settle.deregister(&instance, hold.id);
            }
            Err(error.into())
        }
    }
}

/// SPEC §7.2: a correlation alias already taken fails the instance that tried to park on it.
/// The step's progress stands; the parks it would have armed are not written.
fn fail_on_taken_alias(step: Step, channel: &str, key: &str, ctx: StepContext) -> Step {
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
    let kept = step
        .effects
        .into_iter()
        .filter(|effect| !matches!(effect, Effect::Arm { .. }));
    Step {
        snapshot: failed.snapshot,
        effects: kept.chain(failed.effects).collect(),
        history: step.history.into_iter().chain(failed.history).collect(),
        reply: failed.reply,
    }
}

fn to_commit(step: &Step, pending: &PendingCommit) -> StepCommit {
    let mut arms = Vec::new();
    let mut disarms: Vec<ParkId> = pending.answered.into_iter().collect();
    let mut outbox = Vec::new();
    for effect in &step.effects {
        match effect {
            Effect::Arm { park, .. } => arms.extend(arms_for(park)),
            Effect::Disarm { park } => disarms.push(*park),
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
        }
    }
    let inbox = pending.consumed.as_ref().map(|consumed| InboxEntry {
        channel: consumed.channel.clone(),
        event_id: consumed.event_id.clone(),
        answer: InboxAnswer {
            instance: Some(step.snapshot.instance.id.clone()),
            status: step.snapshot.status.as_str().to_owned(),
        },
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
    }
}

/// Whether the effect puts a task in front of pollers, who long-poll for exactly that.
fn arms_a_task(effect: &Effect) -> bool {
    matches!(effect, Effect::Arm { park, .. } if matches!(park.kind, ParkKind::Task { .. }))
}

/// The durable rows behind a park.
fn arms_for(park: &Park) -> Vec<Arm> {
    let timer = park.kind.due().map(|due| Arm::Timer { park: park.id, due });
    let waiting = match &park.kind {
        ParkKind::Receive { channel, key, .. } => Some(Arm::Wait {
            park: park.id,
            channel: channel.clone(),
            key: key.clone(),
        }),
        ParkKind::Wait { .. } => None,
        ParkKind::Task {
            topic,
            input,
            retries,
            backoff,
            lock,
        } => Some(Arm::Task {
            park: park.id,
            topic: topic.clone(),
            input: input.clone(),
            retries: *retries,
            backoff: *backoff,
            lock: *lock,
        }),
    };
    waiting.into_iter().chain(timer).collect()
}

fn rejected(rejection: Rejection) -> Error {
    match rejection {
        Rejection::Stale(park) => {
            Error::Stale(format!("the instance no longer holds park {park:?}"))
        }
        Rejection::InvalidState { .. } => Error::InvalidState(rejection.to_string()),
    }
}

fn describe(info: &InstanceInfo) -> String {
    format!(
        "{}/{} version {} (flow `{}`)",
        info.tenant, info.deployment, info.version, info.flow
    )
}

//! What a lane or the administrative executor is asked to run — a step on an instance
//! ([`StepRequest`]) or a worker's completion of a task ([`Completion`]) — and what the caller
//! learns once it committed ([`StepOutcome`]).

use std::collections::BTreeMap;

use serde_json::Value;
use sutra_core::codes::Code;
use sutra_core::snapshot::{InstanceInfo, Status};
use sutra_core::step::{Event, Message, Reply};
use sutra_store::{DeliveryId, InstanceKey};

use crate::handoff::Take;
use crate::settle::Hold;

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
        /// The message's correlation key: the start is refused if an instance waits on it.
        key: Option<String>,
    },
    Resume {
        event: Event,
        taken: Option<DeliveryId>,
        consumed: Option<Consumed>,
    },
    /// Moves the instance onto version `to_version` of its deployment (SPEC §7.4), each token's
    /// node mapped by `map` (default: the same id).
    Migrate {
        to_version: u32,
        map: BTreeMap<String, String>,
    },
    /// Fails the instance in place because its steps keep dying or failing: `code` is
    /// `SUTRA.RUNTIME.STEP.POISONED` (SPEC §5.2) or `SUTRA.RUNTIME.DELIVERY.EXHAUSTED`
    /// (docs/decisions/0047); `detail` says how that was seen.
    Poison { code: Code, detail: String },
}

/// The message a step consumes, recorded in the inbox for dedup.
#[derive(Clone)]
pub(crate) struct Consumed {
    pub channel: String,
    pub event_id: String,
    /// A start's correlation key ([`sutra_store::InboxEntry::key`]); `None` for other steps.
    pub key: Option<String>,
}

/// A worker's completion of a task, handed to the lane of the task's instance, where it resumes
/// the instance in the same transaction when the claim is free (SPEC §5.5, decision 0024).
pub(crate) struct Completion {
    pub tenant: String,
    pub task: String,
    pub lock_token: String,
    pub output: Value,
    /// The worker asks for its next task: one the resumed step arms, locked for it in the same
    /// transaction (decision 0038).
    pub take: Option<Take>,
    /// Whether to try resuming the instance in the member. Cleared when that failed half
    /// written: the completion is then recorded as a delivery, whose failures the dispatcher
    /// bounds (docs/decisions/0047), instead of failing the worker's call every time.
    pub in_place: bool,
}

/// What the caller learns once the step committed.
#[derive(Debug)]
pub struct StepOutcome {
    pub instance: String,
    pub status: Status,
    pub reply: Option<Reply>,
    pub hold: Option<Hold>,
}

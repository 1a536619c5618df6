//! The executor's vocabulary: the event a step applies, and what the step returns.
//!
//! A step is a pure function `(flow, snapshot, event, context) -> Step`. It does no I/O: the
//! effects it returns (parks to arm and disarm, outbox rows, a reply, history) are written by the
//! engine in the same transaction as the new snapshot, and that transaction is the step's commit.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::snapshot::{Caller, Park, ParkId, ParkSort, Snapshot, Status, TokenId};

/// Node visits allowed in one step before it fails with `SUTRA.RUNTIME.STEP.BUDGET_EXCEEDED`.
pub const TRANSITIONS_PER_STEP_DEFAULT: u32 = 10_000;

/// Items a `for-each` loops over at most (`sutra.for-each.max-items`) before it fails with
/// `SUTRA.RUNTIME.FOR_EACH.TOO_MANY_ITEMS`.
pub const FOR_EACH_ITEMS_DEFAULT: u32 = 10_000;

/// Calls nested below a root instance at most (`sutra.call.max-depth`) before a call fails with
/// `SUTRA.RUNTIME.CALL.DEPTH_EXCEEDED`.
pub const CALL_DEPTH_DEFAULT: u32 = 16;
/// How many children an instance may wait for at once, unless configured
/// (`sutra.call.max-children`): as many as one `for-each` may have items.
pub const CALL_CHILDREN_DEFAULT: u32 = FOR_EACH_ITEMS_DEFAULT;
/// The largest an instance's variables may grow, in bytes of JSON, unless configured
/// (`sutra.instance.max-vars-bytes`) before the step growing them fails with
/// `SUTRA.RUNTIME.VARS.TOO_LARGE`.
pub const VARS_BYTES_DEFAULT: usize = 4 << 20;

/// An inbound message, as CloudEvents describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// The dedup key, unique per channel.
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub source: String,
    pub subject: Option<String>,
    pub time: Option<String>,
    pub data: Value,
}

impl Message {
    /// The message as CEL sees it: `msg.id`, `msg.type`, …, and at the top level of a channel's
    /// `correlate` expression.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "id": self.id,
            "type": self.kind,
            "source": self.source,
            "subject": self.subject,
            "time": self.time,
            "data": self.data,
        })
    }
}

/// An error reported by a worker for a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskError {
    pub code: String,
    pub message: String,
}

/// How a called flow's instance (a child) ended, as its parent is told: the payload of the
/// `child_ended` delivery its final commit asks of the parent's park. Tagged by `status`, so the
/// stored form reads as the child's own final status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum ChildOutcome {
    /// The child reached an end: `reply` is what it answers its caller with.
    Completed { reply: Value },
    /// The child failed (SPEC §7.2): the parent routes the error or keeps waiting for a repair.
    Failed { code: String, detail: String },
    /// Someone cancelled the child.
    Cancelled,
}

/// What happens to an instance in one step.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The message that starts the instance. Applies only to a [`Status::Created`] snapshot.
    ///
    /// [`Status::Created`]: crate::snapshot::Status::Created
    Start {
        message: Message,
    },
    /// A message correlated to the `receive` parked on `park`.
    Relay {
        park: ParkId,
        message: Message,
    },
    /// The timer of `park` (a `wait`, or a `receive` timeout) is due.
    TimerFired {
        park: ParkId,
    },
    TaskCompleted {
        park: ParkId,
        output: Value,
    },
    /// A business error reported by the worker (`retry: false`): goes to `on-error` at once.
    TaskFailed {
        park: ParkId,
        error: TaskError,
    },
    /// The task failed past its retry budget (`SUTRA.TASK.RETRIES.EXHAUSTED`).
    TaskExhausted {
        park: ParkId,
        error: TaskError,
    },
    /// Administrative cancel: the instance becomes `cancelled`, and every park is resolved.
    Cancel {
        reason: Option<String>,
    },
    /// Administrative restore of a `failed` instance (SPEC §7.2).
    Restore,
    /// The called instance `child` the `call` parked on `park` waits for has ended.
    ChildEnded {
        park: ParkId,
        child: String,
        outcome: ChildOutcome,
    },
}

impl Event {
    /// The park this event answers, if it answers one.
    pub fn park(&self) -> Option<ParkId> {
        match self {
            Event::Relay { park, .. }
            | Event::TimerFired { park }
            | Event::TaskCompleted { park, .. }
            | Event::TaskFailed { park, .. }
            | Event::TaskExhausted { park, .. }
            | Event::ChildEnded { park, .. } => Some(*park),
            Event::Start { .. } | Event::Cancel { .. } | Event::Restore => None,
        }
    }
}

/// Inputs of a step that come from outside the instance.
#[derive(Debug, Clone, Copy)]
pub struct StepContext {
    /// The time of the step. The same inputs always give the same outputs.
    pub now: Timestamp,
    pub transitions_max: u32,
    pub items_max: u32,
    pub call_depth_max: u32,
    pub call_children_max: u32,
    /// Instances the instance's tenant may still start (`sutra.tenants.max-live-instances`, less
    /// its live ones as the engine last counted them): a `call` past it fails with
    /// `SUTRA.TENANT.LIVE_INSTANCES.EXCEEDED`.
    pub instances_room: u64,
    /// Units the step's expressions may spend together (`sutra.expressions.max-cost`).
    pub expression_cost_max: u64,
    /// The largest value one expression may produce, in bytes of JSON.
    pub expression_value_bytes_max: usize,
    /// The largest the instance's variables may grow, in bytes of JSON.
    pub vars_bytes_max: usize,
    /// Randomness for the ids of the instances the step calls, drawn by the engine per step, so
    /// that the step stays a function of its inputs.
    pub id_seed: u128,
}

impl StepContext {
    pub fn at(now: Timestamp) -> StepContext {
        StepContext {
            now,
            transitions_max: TRANSITIONS_PER_STEP_DEFAULT,
            items_max: FOR_EACH_ITEMS_DEFAULT,
            call_depth_max: CALL_DEPTH_DEFAULT,
            call_children_max: CALL_CHILDREN_DEFAULT,
            instances_room: u64::MAX,
            expression_cost_max: crate::expr::EXPRESSION_COST_DEFAULT,
            expression_value_bytes_max: crate::expr::EXPRESSION_VALUE_BYTES_DEFAULT,
            vars_bytes_max: VARS_BYTES_DEFAULT,
            id_seed: 0,
        }
    }
}

/// A side effect of a step, to be written in the step's transaction.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Create the durable rows behind a park: a correlation wait, a timer, a task.
    Arm {
        token: TokenId,
        node: String,
        park: Park,
    },
    /// Resolve the rows behind a park that existed before this step. Never emitted for the park
    /// the step's event answered: the delivery consumes that park's rows itself, all of them (a
    /// `receive`'s correlation wait and its timeout timer are one park, answered by either).
    Disarm(Disarm),
    /// An outbox row, sent after the commit (SPEC §5.4).
    Emit {
        channel: String,
        data: Value,
        /// The message key (`emit.key`), if the node declares one.
        key: Option<String>,
        /// `{instance}:{audit seq}:{node}`: stable across retries of the send.
        idempotency_key: String,
    },
    /// Insert the called instance `child` waiting on `park`, with its start due at once. Comes
    /// beside the `Arm` of the `Call` park.
    Call { park: ParkId, child: ChildStart },
    /// Tell the instance's caller how it ended: the step ended an instance that has a parent.
    Answer { to: Caller, outcome: ChildOutcome },
}

/// An instance a step calls.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildStart {
    pub id: String,
    pub flow: String,
    /// Its `vars.input`.
    pub input: Value,
    /// The calling node.
    pub node: String,
    /// Calls between the root and the child.
    pub depth: u32,
}

/// A park whose rows are resolved, and which rows those are: only a task's has a task a worker
/// may still hold, to cancel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Disarm {
    pub park: ParkId,
    pub sort: ParkSort,
}

impl Disarm {
    pub fn of(park: &Park) -> Disarm {
        Disarm {
            park: park.id,
            sort: park.kind.sort(),
        }
    }
}

/// The answer for a caller held by `ack: complete`, produced when the instance stops for good
/// or fails.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Completed(Value),
    Failed { code: String, detail: String },
    Cancelled,
}

impl Reply {
    /// The reply the step that ended the instance gave, rebuilt from the snapshot it left:
    /// `None` while the instance runs.
    pub fn of_ended(snapshot: &Snapshot) -> Option<Reply> {
        match snapshot.status {
            Status::Completed => Some(Reply::Completed(snapshot.reply.clone())),
            Status::Cancelled => Some(Reply::Cancelled),
            Status::Failed => snapshot.failure.as_ref().map(|failure| Reply::Failed {
                code: failure.code.clone(),
                detail: failure.detail.clone(),
            }),
            Status::Created | Status::Suspended => None,
        }
    }
}

/// One audit record. `seq` continues the instance's audit sequence without gaps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEvent {
    pub seq: u64,
    pub at: Timestamp,
    pub kind: HistoryKind,
    pub node: Option<String>,
    pub token: Option<TokenId>,
    pub detail: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HistoryKind {
    Started,
    MessageReceived,
    TimerFired,
    TaskCompleted,
    TaskFailed,
    Parked,
    VariablesSet,
    Emitted,
    ChoiceTaken,
    Forked,
    Joined,
    Completed,
    Failed,
    Cancelled,
    Restored,
    /// Moved onto another version of its flow (SPEC §7.4): `{from, to, map}`.
    Migrated,
    /// A race's arm fired first: `{arm, next}`; the other arms were disarmed.
    RaceWon,
    /// A node's deadline fired before its wait ended: `{next}`.
    DeadlineFired,
    /// A node's reminder fired while it waited: `{fired}`, counting from 1.
    Reminded,
    /// A `for-each` started looping: `{items, concurrency}`.
    LoopStarted,
    /// A `for-each` ended: every body's result is in its `output`, `{items}`.
    LoopEnded,
    /// A `call` started a child: `{park, child, flow}`.
    Called,
    /// A called child ended: `{park, child, status}`, and `{code, detail}` when it failed.
    ChildEnded,
    /// A failure inside a `scope` went to its `on-error`, every token inside torn down:
    /// `{node, code, message}`, at the scope's node.
    ErrorCaught,
    /// A `compensate` node started undoing `{completions}` (inside `{scope}`, when named).
    CompensationStarted,
    /// A compensation handler completed: `{entry, undoes}`, at the handler's node.
    Compensated,
}

/// The result of applying one event.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub snapshot: Snapshot,
    pub effects: Vec<Effect>,
    pub history: Vec<HistoryEvent>,
    /// Set when this step ended the instance, or failed it.
    pub reply: Option<Reply>,
}

/// Why an event was not applied. The snapshot is unchanged and nothing must be written, except
/// that a delivery answered with `Stale` can be consumed: it can never apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// The event answers a park the instance no longer holds (already answered, torn down by a
    /// failure or a cancel, or never existed), or the instance has ended.
    #[error("the instance holds no park {0:?} (it was already answered or resolved)")]
    Stale(Option<ParkId>),
    /// The event does not apply in the instance's status (`SUTRA.ADMIN.STATE.INVALID`), such as
    /// restoring an instance that has not failed.
    #[error("cannot {event} an instance that is {status}")]
    InvalidState {
        event: &'static str,
        status: &'static str,
    },
    /// A migration whose map or target version does not fit the instance
    /// (`SUTRA.ADMIN.MIGRATE.INVALID`); the message says which token or entry, and what to do.
    #[error("{0}")]
    Unmigratable(String),
}

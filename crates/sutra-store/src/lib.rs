//! The store seam: every durable operation the engine performs, as one trait.
//!
//! The trait is shaped around the engine's operations — claim an instance, commit a step,
//! release, sweep, ask and take deliveries — not around tables, so that each implementation can
//! make each operation one transaction (or one statement) in its own dialect, and so that the
//! guarantees of SPEC §5 live in one place per backend:
//!
//! - [`Store::claim`] is a compare-and-set that refuses ([`Error::ClaimHeld`]) instead of
//!   waiting, increments the fence on every claim, and is re-entrant for the same owner.
//! - [`Store::commit`] writes every row of a step in one transaction whose first statement is
//!   conditional on owner and fence and clears the owner: *committed* and *unowned again* are one
//!   fact. A lost claim ([`Error::ClaimLost`]) rolls everything back.
//! - [`Store::sweep`] clears claims by age alone; it never parses owner ids.
//!
//! Times are kept to the microsecond (the resolution both SQLite and PostgreSQL store as a
//! 64-bit integer or `timestamptz`): what is read back is what was written, truncated.
//!
//! This is an internal seam, not a public extension point: every implementation must pass
//! [`conformance`] (enable the `conformance` feature in its tests).

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use sutra_core::snapshot::{ParkId, Snapshot, Status};
use sutra_core::step::{HistoryEvent, Message, TaskError};

pub mod codec;
#[cfg(feature = "conformance")]
pub mod conformance;
mod outbox;
mod tasks;

pub use outbox::{OutboxId, OutboxRecord, OutboxRetry, OutboxRow, SendError, Sender};
pub use tasks::{
    LockedTask, Polled, TaskFailure, TaskFilter, TaskLock, TaskPoll, after_failure, lock_expired,
    retry_backoff,
};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// Another owner holds a live claim on the instance. Nothing was read or written.
    #[error("the instance is claimed by another owner")]
    ClaimHeld,
    /// The claim this commit or release relied on was swept and possibly taken by another owner;
    /// nothing of the step is visible.
    #[error("the claim was lost (swept after the claim timeout); the step was rolled back")]
    ClaimLost,
    #[error("no instance {0}")]
    InstanceNotFound(String),
    /// Another instance already waits on this channel and key.
    #[error("another instance already waits on channel `{channel}` with key `{key}`")]
    AliasTaken { channel: String, key: String },
    /// The start's inbox row already existed: another delivery of the same message started (or
    /// is starting) the instance. Answer as the first delivery was answered.
    #[error("the message was already consumed")]
    Duplicate(InboxAnswer),
    /// The database could not be reached, or refused the transaction. Retry-safe: nothing was
    /// half-written.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A row could not be decoded, or a write broke one of the schema's constraints (a repeated
    /// history sequence, a repeated outbox key): a bug or a manual edit, never a retryable
    /// condition.
    #[error("corrupt store data: {0}")]
    Corrupt(String),
    #[error("no task {0}")]
    TaskNotFound(String),
    /// The worker's lock token does not hold the task (wrong, expired, or the task moved on).
    /// Nothing was written.
    #[error("{0}")]
    LockLost(String),
}

/// Who holds a claim. Opaque to the store: compared for equality, never parsed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner(pub String);

/// Proof of a claim, required to commit or release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimToken {
    pub owner: Owner,
    pub fence: i64,
}

/// What a successful claim returns: the fence and everything needed to rehydrate the instance.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    pub token: ClaimToken,
    pub snapshot: Snapshot,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeploymentRecord {
    pub tenant: String,
    pub name: String,
    pub version: u32,
    pub status: DeploymentStatus,
    pub source: String,
    pub created_at: Timestamp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeploymentStatus {
    Active,
    Draining,
    Retired,
}

impl DeploymentStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DeploymentStatus::Active => "active",
            DeploymentStatus::Draining => "draining",
            DeploymentStatus::Retired => "retired",
        }
    }

    pub fn parse(text: &str) -> Option<DeploymentStatus> {
        [
            DeploymentStatus::Active,
            DeploymentStatus::Draining,
            DeploymentStatus::Retired,
        ]
        .into_iter()
        .find(|status| status.as_str() == text)
    }
}

/// How a consumed message was answered, kept so that a redelivery is answered the same way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxAnswer {
    pub instance: Option<String>,
    pub status: String,
}

impl InboxAnswer {
    /// The answer recorded for a message kept by [`Store::buffer`]: no instance has it yet.
    pub fn buffered() -> InboxAnswer {
        InboxAnswer {
            instance: None,
            status: "buffered".to_owned(),
        }
    }
}

/// The inbox row a step writes for the message it consumed: `(tenant, channel, event id)`.
#[derive(Debug, Clone, PartialEq)]
pub struct InboxEntry {
    pub channel: String,
    pub event_id: String,
    pub answer: InboxAnswer,
}

/// A durable row behind a park (SPEC §5.6: what was asked).
#[derive(Debug, Clone, PartialEq)]
pub enum Arm {
    /// A correlation alias `(tenant, channel, key)` → `(instance, park)`, unique.
    Wait {
        park: ParkId,
        channel: String,
        key: String,
    },
    /// A timer: a delivery of kind [`DeliveryKind::Timer`] due at `due`.
    Timer { park: ParkId, due: Timestamp },
    /// An external task for pull workers.
    Task {
        park: ParkId,
        topic: String,
        input: Value,
        retries: u32,
        backoff: SignedDuration,
        lock: SignedDuration,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct OutboxEntry {
    pub channel: String,
    pub payload: Value,
    pub message_key: Option<String>,
    /// `{instance}:{audit seq}:{node}`, unique.
    pub idempotency_key: String,
}

/// Everything one step writes, committed atomically.
#[derive(Debug, Clone, PartialEq)]
pub struct StepCommit {
    /// `None` for the step that starts an instance: the instance row is inserted, unowned.
    pub claim: Option<ClaimToken>,
    pub snapshot: Snapshot,
    pub history: Vec<HistoryEvent>,
    pub arms: Vec<Arm>,
    /// Parks whose rows (wait, timer, task, pending deliveries) are resolved: those the step
    /// disarmed and the one its event answered.
    pub disarms: Vec<ParkId>,
    pub outbox: Vec<OutboxEntry>,
    /// The delivery this step consumed ("taken").
    pub taken: Option<DeliveryId>,
    /// The message this step consumed, for dedup. For a start it is inserted
    /// `ON CONFLICT DO NOTHING`, and a conflict fails the commit with [`Error::Duplicate`]. For
    /// any other step it is written whatever was there (the row a buffered message left, whose
    /// answer had no instance yet).
    pub inbox: Option<InboxEntry>,
}

/// What a commit produced beyond its rows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Committed {
    /// Deliveries that became due at once inside the commit: buffered early messages matched by
    /// a park of this step. The caller should dispatch them now instead of waiting for a poll.
    pub due_now: Vec<DeliveryId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeliveryId(pub i64);

/// An internal delivery: durable before anyone tries to claim its instance, deleted by the
/// step that takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    pub id: DeliveryId,
    pub tenant: String,
    pub instance: String,
    pub park: ParkId,
    pub kind: DeliveryKind,
    pub due_at: Timestamp,
    /// How many times a claimant was refused while trying to take it.
    pub attempts: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryKind {
    Timer,
    Relay { message: Message },
    TaskCompleted { output: Value },
    TaskFailed { code: String, message: String },
    TaskExhausted { code: String, message: String },
}

impl DeliveryKind {
    /// The persisted form, `(kind, payload)`, shared by every backend so that a delivery written
    /// by one build is read by the next whatever the database.
    pub fn encode(&self) -> (&'static str, Value) {
        let error =
            |code: &str, message: &str| serde_json::json!({ "code": code, "message": message });
        match self {
            DeliveryKind::Timer => ("timer", Value::Null),
            DeliveryKind::Relay { message } => ("relay", message.to_json()),
            DeliveryKind::TaskCompleted { output } => ("task_completed", output.clone()),
            DeliveryKind::TaskFailed { code, message } => ("task_failed", error(code, message)),
            DeliveryKind::TaskExhausted { code, message } => {
                ("task_exhausted", error(code, message))
            }
        }
    }

    /// Reads what [`DeliveryKind::encode`] wrote.
    pub fn decode(kind: &str, payload: Value) -> Result<DeliveryKind> {
        let corrupt = |e: serde_json::Error| Error::Corrupt(format!("a `{kind}` delivery: {e}"));
        let error = |payload: Value| serde_json::from_value::<TaskError>(payload).map_err(corrupt);
        Ok(match kind {
            "timer" => DeliveryKind::Timer,
            "relay" => DeliveryKind::Relay {
                message: serde_json::from_value(payload).map_err(corrupt)?,
            },
            "task_completed" => DeliveryKind::TaskCompleted { output: payload },
            "task_failed" => {
                let TaskError { code, message } = error(payload)?;
                DeliveryKind::TaskFailed { code, message }
            }
            "task_exhausted" => {
                let TaskError { code, message } = error(payload)?;
                DeliveryKind::TaskExhausted { code, message }
            }
            other => return Err(Error::Corrupt(format!("unknown delivery kind `{other}`"))),
        })
    }
}

/// A delivery to record.
#[derive(Debug, Clone, PartialEq)]
pub struct NewDelivery {
    pub tenant: String,
    pub instance: String,
    pub park: ParkId,
    pub kind: DeliveryKind,
    pub due_at: Timestamp,
}

/// A correlation alias found for a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitTarget {
    pub instance: String,
    pub park: ParkId,
}

/// What a sweep did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SweepOutcome {
    /// Claims cleared because they were older than the claim timeout.
    pub cleared: u64,
    /// Instances cleared `max_recoveries` sweeps in a row: their steps keep dying. The engine
    /// fails them with `SUTRA.RUNTIME.STEP.POISONED`.
    pub poisoned: Vec<InstanceKey>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InstanceKey {
    pub tenant: String,
    pub id: String,
}

/// An instance as listed and shown by the API.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceRecord {
    pub snapshot: Snapshot,
    pub owner: Option<String>,
    pub fence: i64,
    pub recoveries: u32,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstanceFilter {
    pub status: Option<Status>,
    pub flow: Option<String>,
    /// Keyset cursor: ids sort by creation (UUIDv7), so `id > after` pages forward.
    pub after: Option<String>,
    /// At most this many, in id order; `0` means no limit.
    pub limit: u32,
}

/// An external task row (SPEC §5.5), as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRecord {
    /// `{instance}:{park}`: a park has at most one task.
    pub id: String,
    pub instance: String,
    pub park: ParkId,
    pub topic: String,
    pub input: Value,
    pub state: TaskState,
    /// The attempt the task is on while locked, or the one its next lock will be; from 1.
    pub attempt: u32,
    pub retries: u32,
    /// Who took the last lock.
    pub worker: Option<String>,
    /// When the lock expires, while the task is locked.
    pub locked_until: Option<Timestamp>,
    /// When a poll may take it (later than its creation while a retry backs off).
    pub available_at: Timestamp,
    pub created_at: Timestamp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// Waiting for a worker to poll it.
    Available,
    /// Polled; the lock expires at `locked_until`.
    Locked,
    Completed,
    /// A business error reported by the worker.
    Failed,
    /// Failed past its retry budget.
    Terminal,
    /// Its park was resolved (disarmed) while the task was still available or locked.
    Cancelled,
}

impl TaskState {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Available => "available",
            TaskState::Locked => "locked",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Terminal => "terminal",
            TaskState::Cancelled => "cancelled",
        }
    }

    pub fn parse(text: &str) -> Option<TaskState> {
        [
            TaskState::Available,
            TaskState::Locked,
            TaskState::Completed,
            TaskState::Failed,
            TaskState::Terminal,
            TaskState::Cancelled,
        ]
        .into_iter()
        .find(|state| state.as_str() == text)
    }
}

/// A lease row (SPEC §6): who leads `role` until `expires_at`, by the store's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub role: String,
    pub holder: String,
    pub expires_at: Timestamp,
    /// Grows by one whenever the holder changes, never otherwise: a holder's work can be fenced
    /// with it, since a later holder always has a larger epoch.
    pub epoch: i64,
}

/// What one [`Store::purge`] deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    /// Terminal instances, each with every row that hangs off it.
    pub instances: u64,
    /// Buffered messages past their expiry.
    pub buffered: u64,
    /// Outbox rows sent longer ago than the retention.
    pub outbox: u64,
}

impl Purged {
    /// Whether any kind of row filled its batch: more may be waiting.
    pub fn filled(&self, batch: u32) -> bool {
        [self.instances, self.buffered, self.outbox]
            .into_iter()
            .any(|deleted| deleted >= u64::from(batch))
    }
}

/// A message kept for a `receive` that has not parked yet (channel `buffer`).
#[derive(Debug, Clone, PartialEq)]
pub struct BufferedMessage {
    pub channel: String,
    pub key: String,
    pub message: Message,
    pub expires_at: Timestamp,
}

#[async_trait::async_trait]
pub trait Store: Send + Sync + 'static {
    // Deployments.

    /// Stores `source` as version n+1 of `name`; the previously active version becomes draining.
    async fn deploy(&self, tenant: &str, name: &str, source: &str) -> Result<DeploymentRecord>;
    /// Every version of every deployment of the tenant (all tenants when `None`), oldest first.
    async fn deployments(&self, tenant: Option<&str>) -> Result<Vec<DeploymentRecord>>;
    /// How many deployment versions are stored, of every tenant. Versions are never deleted (a
    /// retired one keeps its row), so this grows with every deploy: a process whose count
    /// differs from the one it last loaded has versions to load.
    async fn deployment_revision(&self) -> Result<u64>;
    /// Waits until another process may have stored a deployment version, so that this one loads
    /// it at once rather than at its next look at [`Store::deployment_revision`]. It also returns
    /// when it starts (or starts again) to listen, since what was stored before was announced to
    /// no one here. A store that cannot tell never returns. An error means a notice may have been
    /// missed: look at the revision anyway, and wait a while before asking again.
    async fn deployment_notice(&self) -> Result<()> {
        std::future::pending().await
    }

    // The claim (SPEC §5.2).

    /// Takes the instance's claim for `owner` if it is free, already `owner`'s, or older than
    /// `claim_timeout`; increments the fence. Refuses with [`Error::ClaimHeld`] otherwise,
    /// having written nothing.
    async fn claim(
        &self,
        tenant: &str,
        instance: &str,
        owner: &Owner,
        claim_timeout: SignedDuration,
    ) -> Result<Claimed>;
    /// Gives the claim back without committing. A no-op if the claim was already lost.
    async fn release(&self, tenant: &str, instance: &str, token: &ClaimToken) -> Result<()>;
    /// Writes a step and releases its claim in one transaction.
    async fn commit(&self, step: &StepCommit) -> Result<Committed>;
    /// Clears every claim older than `claim_timeout`, by age alone, and reports instances
    /// cleared `max_recoveries` times in a row.
    async fn sweep(
        &self,
        claim_timeout: SignedDuration,
        max_recoveries: u32,
    ) -> Result<SweepOutcome>;

    // Intake.

    async fn find_wait(&self, tenant: &str, channel: &str, key: &str)
    -> Result<Option<WaitTarget>>;
    async fn inbox_answer(
        &self,
        tenant: &str,
        channel: &str,
        event_id: &str,
    ) -> Result<Option<InboxAnswer>>;
    /// Keeps an uncorrelated message until a `receive` parks on its key or it expires. Also
    /// records its inbox row; returns the earlier answer if the message was already consumed.
    /// If a wait on the key was armed since the caller looked for one, the message becomes a
    /// relay delivery for that park instead, due now: early messages are never lost to a race
    /// with the park, whichever of the two transactions comes first.
    async fn buffer(&self, tenant: &str, message: &BufferedMessage) -> Result<Option<InboxAnswer>>;

    // Deliveries (SPEC §5.6).

    /// Records a delivery; durable when this returns.
    async fn ask(&self, delivery: &NewDelivery) -> Result<DeliveryId>;
    /// Deliveries due at or before now, oldest due first.
    async fn due_deliveries(&self, limit: u32) -> Result<Vec<Delivery>>;
    async fn delivery(&self, id: DeliveryId) -> Result<Option<Delivery>>;
    /// Schedules the next attempt of a delivery whose claimant was refused.
    async fn defer(&self, id: DeliveryId, until: Timestamp) -> Result<()>;
    /// Deletes a delivery that can never apply (its park is gone, its instance ended).
    async fn discard(&self, id: DeliveryId) -> Result<()>;
    /// When the earliest pending delivery is due, if any.
    async fn next_due(&self) -> Result<Option<Timestamp>>;

    // The outbox (SPEC §5.4).

    /// Claims up to `batch` rows due for sending, oldest due first, in one transaction: rows
    /// neither sent nor poisoned whose next attempt has come, and which are unclaimed or whose
    /// claim is older than `stale_after` (their sender died). Stamps their claim, so that no
    /// other sender takes them until it goes stale. Rows of every tenant.
    async fn claim_outbox(&self, batch: u32, stale_after: SignedDuration)
    -> Result<Vec<OutboxRow>>;
    /// Marks a row sent, counts the attempt, clears its claim and its last error; never claimed
    /// again.
    async fn outbox_sent(&self, id: OutboxId) -> Result<()>;
    /// Records a failed send: counts the attempt, keeps `error`, clears the claim, and either
    /// schedules the next attempt or poisons the row.
    async fn outbox_failed(&self, id: OutboxId, error: &str, retry: OutboxRetry) -> Result<()>;

    // External tasks (SPEC §5.5).

    /// Locks up to `poll.max` tasks of `poll.topics` for `poll.worker` in one transaction,
    /// oldest available first: available tasks whose `available_at` has come, and locked tasks
    /// whose lock expired — an expired lock is a failed attempt, so the task is handed out as its
    /// next attempt. An expired task already at its last attempt is not handed out: it turns
    /// terminal with a [`DeliveryKind::TaskExhausted`] delivery ([`lock_expired`]) due now. Each
    /// lock gets a fresh random token.
    async fn poll_tasks(&self, poll: &TaskPoll) -> Result<Polled>;
    /// When a task of `topics` next becomes available to a poll (a retry's backoff ends, a lock
    /// expires), if any will. A time already past means one is available now.
    async fn next_task_at(&self, tenant: &str, topics: &[String]) -> Result<Option<Timestamp>>;
    /// Completes a task `lock_token` holds ([`TaskLock::check`], else [`Error::LockLost`]) and
    /// records a [`DeliveryKind::TaskCompleted`] delivery due now, in one transaction.
    async fn complete_task(
        &self,
        tenant: &str,
        id: &str,
        lock_token: &str,
        output: &Value,
    ) -> Result<()>;
    /// Records a failed attempt of a task `lock_token` holds and returns where it left the task
    /// ([`after_failure`]): available again after [`retry_backoff`], or failed or terminal with a
    /// [`DeliveryKind::TaskFailed`] or [`DeliveryKind::TaskExhausted`] delivery due now, written
    /// in the same transaction.
    async fn fail_task(
        &self,
        tenant: &str,
        id: &str,
        lock_token: &str,
        failure: &TaskFailure,
    ) -> Result<TaskState>;
    /// Moves the deadline of a lock `lock_token` holds to `lock` from now; returns it.
    async fn extend_task(
        &self,
        tenant: &str,
        id: &str,
        lock_token: &str,
        lock: SignedDuration,
    ) -> Result<Timestamp>;

    // Leases (SPEC §6) and the history purger.

    /// Whether this store is the one database of a fleet of replicas, whose singleton roles must
    /// then be led by one replica at a time, elected with [`Store::acquire_lease`]. The embedded
    /// store belongs to one `sutra serve`: each process on it leads every role (SPEC §6).
    fn shared_by_replicas(&self) -> bool;
    /// Takes `role` for `holder` until `ttl` from now by the store's clock, if the lease is free,
    /// expired, or already `holder`'s (a renewal); the epoch grows by one when the holder
    /// changes. `None`: another holder's lease is live, and nothing was written.
    async fn acquire_lease(
        &self,
        role: &str,
        holder: &str,
        ttl: SignedDuration,
    ) -> Result<Option<Lease>>;
    /// Lets `holder`'s lease on `role` expire now, so that another holder takes it at once; the
    /// row and its epoch stay. A no-op unless `holder` holds it.
    async fn release_lease(&self, role: &str, holder: &str) -> Result<()>;
    /// Every lease row, live or expired, by role.
    async fn leases(&self) -> Result<Vec<Lease>>;
    /// Deletes, in one transaction, up to `batch` each of: terminal instances (`completed`,
    /// `cancelled` — never `failed`) not updated for `retention`, with their waits, deliveries,
    /// tasks, history and inbox rows; buffered messages past their expiry, with the inbox rows
    /// that recorded only their buffering; outbox rows sent longer than `retention` ago. Ages are
    /// by the store's clock.
    async fn purge(&self, retention: SignedDuration, batch: u32) -> Result<Purged>;

    // Reads.

    async fn instance(&self, tenant: &str, id: &str) -> Result<Option<InstanceRecord>>;
    async fn instances(&self, tenant: &str, filter: &InstanceFilter)
    -> Result<Vec<InstanceRecord>>;
    async fn history(&self, tenant: &str, id: &str) -> Result<Vec<HistoryEvent>>;
    /// The instance's task rows, by park.
    async fn tasks(&self, tenant: &str, instance: &str) -> Result<Vec<TaskRecord>>;
    /// The tenant's tasks matching `filter`, in id order.
    async fn list_tasks(&self, tenant: &str, filter: &TaskFilter) -> Result<Vec<TaskRecord>>;
    /// The outbox rows the instance wrote, oldest first.
    async fn outbox(&self, tenant: &str, instance: &str) -> Result<Vec<OutboxRecord>>;
    /// The store accepts a commit (readiness).
    async fn ping(&self) -> Result<()>;
}

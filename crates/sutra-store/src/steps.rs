//! The step commit (SPEC §5.2): everything one step writes, in one transaction whose first
//! statement is conditional on owner and fence and clears the owner — *committed* and *unowned
//! again* are one fact. A lost claim ([`crate::Error::ClaimLost`]) rolls everything back.

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use sutra_core::snapshot::{ParkId, Snapshot};
use sutra_core::step::{ChildOutcome, Disarm, HistoryEvent, Message};

use crate::{ClaimToken, DeliveryId, InboxEntry, LockedTask, Result};

/// Everything one step writes, committed atomically.
#[derive(Debug, Clone, PartialEq)]
pub struct StepCommit {
    /// `None` for the step that starts an instance: the instance row is inserted, unowned.
    pub claim: Option<ClaimToken>,
    pub snapshot: Snapshot,
    pub history: Vec<HistoryEvent>,
    pub arms: Vec<Arm>,
    /// Parks whose rows (wait, timer, task, pending deliveries) are resolved: those the step
    /// disarmed and the one its event answered, each with its kind, so that only a task park's
    /// task is cancelled.
    pub disarms: Vec<Disarm>,
    pub outbox: Vec<OutboxEntry>,
    /// The delivery this step consumed ("taken").
    pub taken: Option<DeliveryId>,
    /// The message this step consumed, for dedup. For a start it is inserted `ON CONFLICT DO
    /// NOTHING`, and a conflict fails the commit with [`crate::Error::Duplicate`]. For any other
    /// step it is written whatever was there (the row a buffered message left, whose answer had no
    /// instance yet).
    pub inbox: Option<InboxEntry>,
    /// Who holds a caller until the instance ends (`ack: complete`), when this step registered
    /// one: recorded on the instance, and read back by the next claim ([`crate::Claimed`]).
    /// `None` leaves what was recorded. Opaque to the store, like an [`crate::Owner`].
    pub held_by: Option<String>,
    /// The step ends an instance whose caller another process holds: once the commit lands, the
    /// store tells every process listening ([`Steps::end_notice`]). A group tells them once for
    /// all its members. A store that cannot tell ignores it: there is no other process to tell.
    pub announce_end: bool,
    /// The instances this step calls (docs/design/composition.md §5.3 A): each is inserted
    /// `created`, naming this instance and the park waiting for it, with a `start` delivery due
    /// at once ([`Committed::due_now`]). Written in this transaction, so a parent never waits on
    /// a child that does not exist, nor a child runs for a parent whose step was lost. A disarm
    /// of sort [`sutra_core::snapshot::ParkSort::Call`] in [`StepCommit::disarms`] asks a
    /// `cancel` of the live children of that park, in this transaction as well.
    pub children: Vec<NewChild>,
    /// This step ends a child: the `child_ended` delivery its parent's park is asked, written
    /// with the ending so that the parent hears of it exactly when it happened — and not at all
    /// when the parent has ended or was purged.
    pub report: Option<Report>,
}

/// A called flow's instance, as its parent's step inserts it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewChild {
    /// Its first snapshot (`created`): its instance info names its id and flow, and the same
    /// tenant, deployment and version as the parent (a call runs on the parent's version).
    pub snapshot: Snapshot,
    /// The parent's park that waits for it: recorded on the child's row (`parent_park`), so
    /// that disarming that park finds the child to cancel.
    pub park: ParkId,
    /// What its `start` delivery carries ([`crate::DeliveryKind::Start`]).
    pub start: Message,
}

/// How a child ended, for its parent's park that waits for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The parent's id, in the child's tenant.
    pub parent: String,
    /// The parent's park that waits for this child.
    pub park: ParkId,
    /// The ending child's id.
    pub child: String,
    pub outcome: ChildOutcome,
}

/// A durable row behind a park (SPEC §5.6: what was asked).
#[derive(Debug, Clone, PartialEq)]
pub enum Arm {
    /// A correlation alias `(tenant, channel, key)` → `(instance, park)`, unique.
    Wait {
        park: ParkId,
        channel: String,
        key: String,
        /// The race this wait is an arm of (its racing token's id), if any. A buffered message
        /// is taken for at most one wait of a group in a commit: the first match wins the race,
        /// and the other arms' messages stay buffered, as uncorrelated ones do.
        group: Option<u64>,
    },
    /// A timer: a delivery of kind [`crate::DeliveryKind::Timer`] due at `due`.
    Timer { park: ParkId, due: Timestamp },
    /// An external task for pull workers.
    Task {
        park: ParkId,
        topic: String,
        input: Value,
        retries: u32,
        backoff: SignedDuration,
        lock: SignedDuration,
        /// `Some`: the task is armed already locked for this worker, on its first attempt, and
        /// answered in [`Committed::taken`] — its taker was known as the step ran: the worker
        /// whose completion the step consumed asked for its next task (decision 0038), or a poll
        /// of its topics was waiting (decision 0039). `None`: armed available.
        taken_by: Option<TakenBy>,
    },
}

/// Who a task is locked for the moment it is armed, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakenBy {
    pub worker: String,
    pub lock: SignedDuration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct OutboxEntry {
    pub channel: String,
    pub payload: Value,
    pub message_key: Option<String>,
    /// `{instance}:{audit seq}:{node}`, unique.
    pub idempotency_key: String,
}

/// What a commit produced beyond its rows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Committed {
    /// Deliveries that became due at once inside the commit: buffered early messages matched by
    /// a park of this step, the `start` of each child it called, the `cancel` of each live child
    /// of a `Call` park it disarmed, and its report to its parent. The caller should dispatch
    /// them now instead of waiting for a poll.
    pub due_now: Vec<DeliveryId>,
    /// The tasks this commit armed locked (an [`Arm::Task`] `taken_by` a worker), for the caller to hand to
    /// their worker: no poll will find them while the lock holds.
    pub taken: Vec<LockedTask>,
}

/// What [`Steps::end_notice`] heard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndNotice {
    /// These instances ended in commits of other processes that announced them
    /// ([`StepCommit::announce_end`]).
    Ended(Vec<String>),
    /// The listener (re)started: ends announced before it listened reached no one here, so look
    /// at every instance a caller waits for.
    Listening,
}

/// Committing a step, and hearing of the steps other processes committed that ended instances.
#[async_trait::async_trait]
pub trait Steps: Send + Sync {
    /// Writes a step and releases its claim in one transaction.
    async fn commit(&self, step: &StepCommit) -> Result<Committed>;

    /// Waits for the next announcement of ended instances ([`StepCommit::announce_end`]), or
    /// for the listener to (re)start. A store no other process shares never returns. An error
    /// means an announcement may have been missed: wait a while, then ask again, which reports
    /// [`EndNotice::Listening`].
    async fn end_notice(&self) -> Result<EndNotice> {
        std::future::pending().await
    }
}

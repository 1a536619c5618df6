//! The store seam: every durable operation the engine performs, cut by area.
//!
//! The seam is shaped around the engine's operations — claim an instance, commit a step,
//! release, sweep, ask and take deliveries — not around tables, so that each implementation can
//! make each operation one transaction (or one statement) in its own dialect, and so that the
//! guarantees of SPEC §5 live in one place per backend. Each area is a module with its records
//! and its part of the seam as a trait of its own; [`Store`] is all of them at once:
//!
//! - [`Claims::claim`] is a compare-and-set that refuses ([`Error::ClaimHeld`]) instead of
//!   waiting, increments the fence on every claim, and is re-entrant for the same owner.
//! - [`Steps::commit`] writes every row of a step in one transaction whose first statement is
//!   conditional on owner and fence and clears the owner: *committed* and *unowned again* are one
//!   fact. A lost claim ([`Error::ClaimLost`]) rolls everything back.
//! - [`Claims::sweep`] clears claims by age alone; it never parses owner ids.
//! - [`Groups::group`] begins a transaction that many lane steps share, each claimed inside it
//!   and written on its own predicate (group commit, decision 0024).
//!
//! Times are kept to the microsecond (the resolution both SQLite and PostgreSQL store as a
//! 64-bit integer or `timestamptz`): what is read back is what was written, truncated.
//!
//! This is an internal seam, not a public extension point: every implementation must pass
//! [`conformance`] (enable the `conformance` feature in its tests). Callers of a concrete store
//! bring the area traits into scope with `use sutra_store::prelude::*`.

mod claim;
mod clock;
pub mod codec;
#[cfg(feature = "conformance")]
pub mod conformance;
mod deliveries;
mod deployments;
mod error;
mod group;
mod intake;
mod leases;
mod outbox;
mod purge;
mod reads;
mod scaling;
mod schedules;
mod steps;
mod tasks;

pub use claim::{ClaimKind, ClaimToken, Claimed, Claims, InstanceKey, Owner, SweepOutcome};
pub use clock::{Clock, Elapsed, ManualClock};
pub use deliveries::{
    CANCEL_PARK, Deliveries, Delivery, DeliveryId, DeliveryKind, NewDelivery, RESTORE_PARK,
    START_PARK,
};
pub use deployments::{DeploymentRecord, DeploymentStatus, Deployments, Retirement};
pub use error::{Error, Result};
pub use group::{ClaimAhead, CompletingClaim, Group, Groups, HeldTask};
pub use intake::{BufferedMessage, InboxAnswer, InboxEntry, Intake, Lookup, WaitTarget};
pub use leases::{Lease, Leases};
pub use outbox::{Outbox, OutboxId, OutboxRecord, OutboxRetry, OutboxRow, SendError, Sender};
pub use purge::{Purge, Purged};
pub use reads::{InstanceFilter, InstanceRecord, InstanceSummary, Reads, WithinBudget};
pub use scaling::{Available, Backlog, Scaling};
pub use schedules::{Advance, NewSchedule, ScheduleKey, ScheduleRecord, Schedules};
pub use steps::{
    Arm, Committed, EndNotice, NewChild, OutboxEntry, Report, StepCommit, Steps, TakenBy,
};
pub use tasks::{
    LockedTask, Polled, TaskFailure, TaskFilter, TaskLock, TaskPoll, TaskRecord, TaskState, Tasks,
    after_failure, lock_expired, retry_backoff, task_id, task_instance,
};

/// The area traits, for callers of a concrete store (`use sutra_store::prelude::*`).
pub mod prelude {
    pub use crate::{
        Claims, Deliveries, Deployments, Groups, Intake, Leases, Outbox, Purge, Reads, Scaling,
        Schedules, Steps, Store, Tasks,
    };
}

/// Every area of the seam at once: what the engine holds as `Arc<dyn Store>`. Implemented for
/// every type that implements each area.
pub trait Store:
    Claims
    + Steps
    + Groups
    + Intake
    + Deliveries
    + Tasks
    + Outbox
    + Leases
    + Deployments
    + Reads
    + Purge
    + Scaling
    + Schedules
    + 'static
{
}

impl<T> Store for T where
    T: Claims
        + Steps
        + Groups
        + Intake
        + Deliveries
        + Tasks
        + Outbox
        + Leases
        + Deployments
        + Reads
        + Purge
        + Scaling
        + Schedules
        + 'static
{
}

//! Sutra's SQL store, written once: [`SqlStore`] implements every area of the store seam over a
//! backend's small statement layer, which each backend implements on its unit of work, in its
//! own dialect. Each area's scripts are in a module named after it, beside the trait of the
//! statements they run ([`ClaimStatements`] in `claim`, …): the claim (`claim`), the order of a
//! step's writes (`commit`), intake and `buffer` (`intake`), the deliveries, the task poll,
//! complete, fail and extend (`tasks`), the outbox, the leases, the deploy (`deployments`), the
//! reads, the purge, the scaling counts and the schedule rows (`schedules`). [`statements`]
//! holds what every area shares: the [`Backend`], and the unit of work's own statements
//! ([`Statements`]). Beside them: the row structs and their decoding into the store's records
//! ([`rows`]) and the API's listings ([`listings`]). Each backend binds a statement's parameters
//! next to its SQL; what both derive alike from a record is a function here ([`settle_fence`],
//! [`next_attempt`], [`TaskArm::state`]).
//!
//! A new operation is a script and its trait method in the area's module here, and one statement
//! per backend in that backend's file of the same area.
//!
//! A script decides which statements run, in what order, and what is checked between them; a
//! statement is the backend's SQL. A reason that holds for every backend (why a park's task is
//! cancelled before its deliveries are deleted) is written on the script; a reason that holds for
//! one (READ COMMITTED, advisory locks, SQLite's single writer) on that backend's statement.

/// The columns of a [`rows::TaskRow`], for every statement that reads one.
#[macro_export]
macro_rules! task_columns {
    () => {
        "id, instance, park, topic, input, state, attempt, retries, worker, locked_until,
         available_at, created_at"
    };
}

/// The columns of a [`rows::ScheduleRow`], for every statement that reads one.
#[macro_export]
macro_rules! schedule_columns {
    () => {
        "tenant, deployment, flow, version, expression, zone, next_at, last_at, last_instance,
         paused"
    };
}

mod claim;
mod commit;
mod deferred;
mod deliveries;
mod deployments;
mod error;
mod group;
mod intake;
mod leases;
pub mod listings;
mod outbox;
mod purge;
mod reads;
pub mod rows;
pub mod scaling;
mod schedules;
pub mod statements;
mod store;
mod tasks;
mod waits;

pub use claim::{ClaimStatements, Mark, NewClaim};
pub use commit::{StepRows, StepStatements, TakenTask, TaskArm, Wrote, settle_fence, write_each};
pub use deliveries::{ANCESTORS_MAX, DeliveryStatements};
pub use deployments::{DeploymentStatements, NewVersion};
pub use error::driver_error;
pub use intake::IntakeStatements;
pub use leases::{LeaseStatements, NewLease};
pub use outbox::{OutboxStatements, next_attempt};
pub use purge::PurgeStatements;
pub use reads::ReadStatements;
pub use scaling::ScalingStatements;
pub use schedules::{ScheduleStatements, ScheduleSync};
pub use statements::{Backend, Correlation, InboxKey, LockOn, NewDeliveryRow, Scope, Statements};
pub use store::SqlStore;
pub use tasks::TaskStatements;
pub use waits::{ArmedWait, WaitArm};

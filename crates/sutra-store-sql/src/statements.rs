//! The core of the statement layer that every area shares: the [`Backend`], its unit of work
//! ([`Backend::Tx`]) and the statements more than one area runs ([`Statements`]). Each area's
//! own statements are a trait in that area's module, beside the script that runs them
//! ([`crate::ClaimStatements`] in `claim`, …). Each method is one statement (or, where a dialect
//! needs several, one step of a script), its SQL text and its parameters' binding the backend's.
//! A backend implements these traits once, on its unit of work; the scripts of this crate decide
//! the order the statements run in and check what each returns, so that order and those checks
//! exist once. How a statement
//! runs is the backend's: on PostgreSQL every unit of work is a transaction scoped to its tenant;
//! on SQLite a statement that writes begins the write transaction, and one atomic on its own (a
//! claim, a read) runs alone unless the write transaction is already begun.
//!
//! What differs between dialects stays behind a method: placeholders, how a list is bound
//! (`json_each` on SQLite, arrays and `unnest` on PostgreSQL), whose clock "now" is (the
//! process's on SQLite, read once when the transaction begins; `sutra_now()` on PostgreSQL), and
//! how transactions are ordered with each other (SQLite's single writer orders every write
//! transaction already; PostgreSQL takes advisory locks, see [`Statements::serialize`]).
//!
//! Statements that write a step's rows take the step's whole set of them (its history, its
//! outbox rows), so that a backend may write each set in one statement; a commit of many steps
//! at once changes the scripts, not this shape.

use std::future::Future;

use jiff::Timestamp;
use sutra_core::snapshot::ParkId;
use sutra_store::{
    Clock, DeliveryId, DeliveryKind, EndNotice, InboxAnswer, InboxEntry, Lookup, NewDelivery,
    Result, WaitTarget,
};

use crate::claim::ClaimStatements;
use crate::commit::StepStatements;
use crate::deliveries::DeliveryStatements;
use crate::deployments::DeploymentStatements;
use crate::intake::IntakeStatements;
use crate::leases::LeaseStatements;
use crate::outbox::OutboxStatements;
use crate::purge::PurgeStatements;
use crate::reads::ReadStatements;
use crate::scaling::ScalingStatements;
use crate::schedules::ScheduleStatements;
use crate::tasks::TaskStatements;

/// Whose rows a transaction may touch. SQLite keeps no tenants apart by itself and ignores it;
/// PostgreSQL's row-level security shows a transaction only the rows of its scope.
#[derive(Debug, Clone, Copy)]
pub enum Scope<'a> {
    /// One tenant's rows: everything a request on behalf of a tenant does.
    Tenant(&'a str),
    /// Every tenant's rows, to read, update and delete, never to insert: the store's own
    /// cross-tenant work (sweep, due deliveries, outbox sending), whose trait methods name no
    /// tenant.
    System,
}

/// What a transaction must be ordered with: the other transactions naming the same thing run
/// before or after it, never interleaved with it.
#[derive(Debug, Clone, Copy)]
pub enum LockOn<'a> {
    /// `buffer` and a park's commit on the same correlation key: whichever goes second sees
    /// what the first wrote (docs/decisions/0015).
    Correlation(Correlation<'a>),
    /// Deploys of one deployment name: version n+1 is computed from version n.
    Deployment { tenant: &'a str, name: &'a str },
}

/// A correlation key: what a wait parks on and an early message is buffered under.
#[derive(Debug, Clone, Copy)]
pub struct Correlation<'a> {
    pub tenant: &'a str,
    pub channel: &'a str,
    pub key: &'a str,
}

/// A message's key in the inbox.
#[derive(Debug, Clone, Copy)]
pub struct InboxKey<'a> {
    pub tenant: &'a str,
    pub channel: &'a str,
    pub event_id: &'a str,
}

/// A delivery to write: due at `due_at`, or at once by the store's clock when `None`.
pub struct NewDeliveryRow<'a> {
    pub tenant: &'a str,
    pub instance: &'a str,
    pub park: ParkId,
    pub kind: &'a DeliveryKind,
    pub due_at: Option<Timestamp>,
}

impl<'a> From<&'a NewDelivery> for NewDeliveryRow<'a> {
    /// An asked delivery, due at its own time.
    fn from(delivery: &'a NewDelivery) -> NewDeliveryRow<'a> {
        NewDeliveryRow {
            tenant: &delivery.tenant,
            instance: &delivery.instance,
            park: delivery.park,
            kind: &delivery.kind,
            due_at: Some(delivery.due_at),
        }
    }
}

/// A backend the scripts can begin transactions on, and what the store does on it that is not
/// a statement.
pub trait Backend: Send + Sync + 'static {
    type Tx: ClaimStatements
        + StepStatements
        + DeliveryStatements
        + TaskStatements
        + IntakeStatements
        + OutboxStatements
        + LeaseStatements
        + DeploymentStatements
        + ReadStatements
        + PurgeStatements
        + ScalingStatements
        + ScheduleStatements
        + 'static;

    /// Begins a unit of work scoped to `scope`: a transaction, or (where a backend need not
    /// open one for a statement atomic on its own) whatever its statements begin when they run.
    fn begin(&self, scope: Scope<'_>) -> impl Future<Output = Result<Self::Tx>> + Send;

    /// [`Backend::begin`], for work whose commit may be lost with a crash of the database
    /// because losing it only means doing it again (a poll's locks: see
    /// [`sutra_store::Tasks::poll_tasks`]); a backend may answer its commit before it is
    /// flushed. By default it is any other unit of work.
    fn begin_redoable(&self, scope: Scope<'_>) -> impl Future<Output = Result<Self::Tx>> + Send {
        self.begin(scope)
    }

    /// [`sutra_store::Leases::shared_by_replicas`].
    fn shared_by_replicas(&self) -> bool;

    /// The process's clock, for the times a script reads itself rather than the database's: the
    /// lock expiry a worker is told of a task armed locked for it. The system's unless the
    /// backend was opened with another.
    fn clock(&self) -> Clock {
        Clock::system()
    }

    /// [`sutra_store::Deployments::deployment_notice`]: a backend that cannot tell never
    /// returns.
    fn deployment_notice(&self) -> impl Future<Output = Result<()>> + Send {
        std::future::pending()
    }

    /// [`sutra_store::Steps::end_notice`]: a backend that cannot tell never returns.
    fn end_notice(&self) -> impl Future<Output = Result<EndNotice>> + Send {
        std::future::pending()
    }

    /// [`sutra_store::Intake::look_up`], in a unit of work of its own acting for the message's
    /// tenant: by default a transaction running [`IntakeStatements::look_up`]. A backend whose
    /// round trips cost more than its statements may read it in one.
    fn look_up(
        &self,
        inbox: InboxKey<'_>,
        key: Option<&str>,
    ) -> impl Future<Output = Result<Lookup>> + Send {
        async move {
            let mut tx = self.begin(Scope::Tenant(inbox.tenant)).await?;
            let found = tx.look_up(inbox, key).await?;
            tx.commit().await?;
            Ok(found)
        }
    }
}

/// The statements more than one script runs, and the transaction's end.
pub trait Statements: Send + Sized {
    /// Commits; dropping the transaction instead rolls it back, once its connection is used
    /// again.
    fn commit(self) -> impl Future<Output = Result<()>> + Send;

    /// Rolls back, its locks released before it returns.
    fn rollback(self) -> impl Future<Output = Result<()>> + Send;

    /// Opens the next member of a group (`sutra_store::Group::member`): from here on the
    /// transaction acts for `tenant`, and holds whatever lock its statements need to.
    fn begin_member(&mut self, tenant: &str) -> impl Future<Output = Result<()>> + Send;

    /// Orders this transaction with every other that names any of `on`, until it ends.
    fn serialize(&mut self, on: &[LockOn<'_>]) -> impl Future<Output = Result<()>> + Send;

    fn insert_delivery(
        &mut self,
        delivery: NewDeliveryRow<'_>,
    ) -> impl Future<Output = Result<DeliveryId>> + Send;

    /// Inserts a message's inbox row unless one exists; whether this insert made it.
    fn insert_inbox(
        &mut self,
        tenant: &str,
        entry: &InboxEntry,
    ) -> impl Future<Output = Result<bool>> + Send;

    fn inbox_answer(
        &mut self,
        key: InboxKey<'_>,
    ) -> impl Future<Output = Result<Option<InboxAnswer>>> + Send;

    fn find_wait(
        &mut self,
        on: Correlation<'_>,
    ) -> impl Future<Output = Result<Option<WaitTarget>>> + Send;
}

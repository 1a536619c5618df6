//! Reads for the API: instances, their history, tasks and outbox rows as listed and shown, and
//! the readiness probe. None of them writes.

use jiff::Timestamp;
use sutra_core::snapshot::{Failure, Snapshot, Status, Token};
use sutra_core::step::HistoryEvent;

use crate::{OutboxRecord, Result, TaskFilter, TaskRecord};

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

/// An instance as a listing shows it: its row's columns, and its failure when it failed — not
/// its variables, which a snapshot may hold megabytes of (decision 0081).
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceSummary {
    pub id: String,
    pub tenant: String,
    pub deployment: String,
    pub version: u32,
    pub flow: String,
    pub status: Status,
    /// The instance that called this one.
    pub parent: Option<String>,
    pub failure: Option<Failure>,
    /// Its live tokens, read only when the listing asks for them (to match what they are
    /// parked on); `None` otherwise.
    pub tokens: Option<Vec<Token>>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// Whole instances, read up to a budget of their variables' bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct WithinBudget {
    pub records: Vec<InstanceRecord>,
    /// Reading stopped because the variables read reached the budget, so rows matching the
    /// filter may be left after the last record.
    pub spent: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstanceFilter {
    pub status: Option<Status>,
    pub flow: Option<String>,
    /// Only instances pinned to this version of their deployment.
    pub version: Option<u32>,
    /// Only the instances this instance called (its children), whatever their status.
    pub parent: Option<String>,
    /// Only instances created before, or at or after, this instant.
    pub created_before: Option<Timestamp>,
    pub created_after: Option<Timestamp>,
    /// Keyset cursor: ids sort by creation (UUIDv7), so `id > after` pages forward.
    pub after: Option<String>,
    /// At most this many, in id order; `0` means no limit.
    pub limit: u32,
}

/// What the API reads.
#[async_trait::async_trait]
pub trait Reads: Send + Sync {
    async fn instance(&self, tenant: &str, id: &str) -> Result<Option<InstanceRecord>>;

    /// The summaries of the tenant's instances matching `filter`, in id order, read from their
    /// rows' columns; with their tokens when `tokens`.
    async fn instance_summaries(
        &self,
        tenant: &str,
        filter: &InstanceFilter,
        tokens: bool,
    ) -> Result<Vec<InstanceSummary>>;

    /// The tenant's whole instances matching `filter`, in id order, stopping after the one whose
    /// variables (counted as JSON) bring those read to `budget` bytes: the first is read whatever
    /// its size, so that a page always moves on.
    async fn instances(
        &self,
        tenant: &str,
        filter: &InstanceFilter,
        budget: usize,
    ) -> Result<WithinBudget>;

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

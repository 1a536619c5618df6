//! Reads for the API: instances, their history, tasks and outbox rows as listed and shown, and
//! the readiness probe. None of them writes.

use jiff::Timestamp;
use sutra_core::snapshot::{Snapshot, Status};
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

//! The scaling signal (SPEC §8, seed 002): what waits for the fleet, counted in the database —
//! the same figures from every replica, and the ones a KEDA `ScaledObject` reads.

use sutra_core::snapshot::Status;

use crate::Result;

/// What waits, across every tenant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backlog {
    /// Messages kept for a `receive` that has not parked yet (the inbox's backlog).
    pub inbox: u64,
    /// Outbox rows neither sent nor poisoned.
    pub outbox: u64,
    /// Tasks waiting for a worker, by topic.
    pub tasks_available: Vec<(String, u64)>,
    /// Tasks a worker holds now: work in flight outside the engine.
    pub tasks_locked: u64,
    /// Instances by status.
    pub instances: Vec<(Status, u64)>,
}

#[async_trait::async_trait]
pub trait Scaling: Send + Sync {
    async fn backlog(&self) -> Result<Backlog>;
}

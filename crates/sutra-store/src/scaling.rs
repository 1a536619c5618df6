//! The scaling signal (SPEC §8, seed 002): what waits, counted in the database — the same
//! figures from every replica, and the ones a KEDA `ScaledObject` reads. Counted for every tenant
//! (the fleet's, what an operator scales on) or for one (what its administrator may see,
//! decision 0076).

use std::collections::BTreeMap;

use sutra_core::snapshot::Status;

use crate::Result;

/// What waits: every tenant's, or one tenant's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backlog {
    /// Messages kept for a `receive` that has not parked yet (the inbox's backlog).
    pub inbox: u64,
    /// Outbox rows neither sent nor poisoned.
    pub outbox: u64,
    /// Tasks waiting for a worker, by tenant and topic: a topic is a tenant's name for its work,
    /// so two tenants' topics of one name are two queues.
    pub tasks_available: Vec<Available>,
    /// Tasks a worker holds now: work in flight outside the engine.
    pub tasks_locked: u64,
    /// Instances by status.
    pub instances: Vec<(Status, u64)>,
}

/// The tasks of one tenant's topic waiting for a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Available {
    pub tenant: String,
    pub topic: String,
    pub tasks: u64,
}

impl Backlog {
    /// The available tasks by topic, whatever tenant's.
    pub fn available_by_topic(&self) -> BTreeMap<String, u64> {
        let mut by_topic = BTreeMap::new();
        for available in &self.tasks_available {
            *by_topic.entry(available.topic.clone()).or_default() += available.tasks;
        }
        by_topic
    }

    /// Every available task, whatever its topic.
    pub fn available(&self) -> u64 {
        self.tasks_available.iter().map(|a| a.tasks).sum()
    }
}

#[async_trait::async_trait]
pub trait Scaling: Send + Sync {
    /// What waits: `tenant`'s alone, counted as that tenant (its rows selected by the statements
    /// themselves, and on PostgreSQL by row-level security too), or every tenant's when `None`.
    async fn backlog(&self, tenant: Option<&str>) -> Result<Backlog>;

    /// Every tenant's live instances (`created` or `suspended`), for each tenant that has any:
    /// what `sutra.tenants.max-live-instances` bounds (issue 48).
    async fn live_by_tenant(&self) -> Result<Vec<(String, u64)>>;
}

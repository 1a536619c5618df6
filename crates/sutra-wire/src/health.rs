//! `GET /healthz` and `GET /readyz`: open probes, carrying no tenant's data.

use serde::{Deserialize, Serialize};

/// Liveness: `{"status": "ok"}` whenever the process answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Health {
    pub status: String,
}

/// Readiness: `{"status": "ready", "lanes": [...]}`; a replica that is not ready answers a
/// problem instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Readiness {
    pub status: String,
    /// How many requests wait in each lane's queue, by lane index.
    pub lanes: Vec<usize>,
}

/// `GET /v1/scaling`: the scaling signal (SPEC §8) for tools that do not read Prometheus — what
/// waits, counted in the database, and the steps in progress on the replica that answered: the
/// fleet's, or one tenant's alone when its administrator asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Scaling {
    /// Whose figures these are: the tenant's, for its administrator; null for every tenant's.
    pub tenant: Option<String>,
    /// Messages kept for a `receive` that has not parked yet.
    pub inbox_backlog: u64,
    /// Outbox rows neither sent nor poisoned.
    pub outbox_backlog: u64,
    /// Tasks waiting for a worker, by topic.
    pub tasks_available: std::collections::BTreeMap<String, u64>,
    /// Tasks a worker holds now.
    pub tasks_locked: u64,
    /// Instances by status.
    pub instances: std::collections::BTreeMap<String, u64>,
    /// Steps in progress on the replica that answered (for a tenant, those of its instances).
    pub claims_in_flight: u64,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: crate::Extra,
}

//! `GET /v1/system/history`: what the answering replica's steps did over the last fifteen
//! minutes, one sample every ten seconds, with the fleet's backlog beside them — what the
//! console's System page draws (docs/decisions/0061). A tenant's administrator sees its own
//! tenant's steps alone, without the backlog (decision 0076).

use serde::{Deserialize, Serialize};

/// The samples the answering replica keeps in memory, oldest first. A replica that started less
/// than `window` ago has fewer; another replica keeps its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SystemHistory {
    /// The replica that answered: the steps, their latency and the failures are its own.
    pub replica: String,
    /// Whose steps these are: the tenant's, for its administrator (and then no sample has a
    /// backlog); null for every tenant's.
    pub tenant: Option<String>,
    /// When it started sampling (RFC 3339): it has no sample from before.
    pub since: String,
    /// How often a sample is taken (ISO 8601 duration).
    pub interval: String,
    /// How far back the samples go at most (ISO 8601 duration).
    pub window: String,
    pub samples: Vec<SystemSample>,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: crate::Extra,
}

/// One interval on the answering replica, ending at `at`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SystemSample {
    /// When the interval ended (RFC 3339).
    pub at: String,
    /// How long it was, in seconds, as measured: about `interval`.
    pub seconds: f64,
    /// Steps that committed (`sutra_steps_total{outcome="committed"}`).
    pub steps: u64,
    /// Steps that ended without committing (the other outcomes of `sutra_steps_total`).
    pub steps_failed: u64,
    /// Instances a step failed in place.
    pub instances_failed: u64,
    /// The median step latency in seconds, estimated from the buckets of
    /// `sutra_step_duration_seconds` as `histogram_quantile` does; null when no step ended.
    pub latency_p50: Option<f64>,
    /// The 99th percentile step latency in seconds, estimated likewise.
    pub latency_p99: Option<f64>,
    /// Messages kept for a `receive` that has not parked yet, fleet-wide, counted in the
    /// database at `at`; null when it could not be counted in time, and in a tenant's samples
    /// (so are the next two).
    pub inbox_backlog: Option<u64>,
    /// Outbox rows neither sent nor poisoned, fleet-wide.
    pub outbox_backlog: Option<u64>,
    /// Tasks waiting for a worker, every topic, fleet-wide.
    pub tasks_available: Option<u64>,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: crate::Extra,
}

//! `GET /healthz` and `GET /readyz`: open probes, carrying no tenant's data.

use serde::{Deserialize, Serialize};

/// Liveness: `{"status": "ok"}` whenever the process answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    pub status: String,
}

/// Readiness: `{"status": "ready", "lanes": [...]}`; a replica that is not ready answers a
/// problem instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Readiness {
    pub status: String,
    /// How many requests wait in each lane's queue, by lane index.
    pub lanes: Vec<usize>,
}

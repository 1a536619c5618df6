//! `GET /v1/leases` (SPEC §6): who leads which singleton role.

use serde::{Deserialize, Serialize};

use crate::Extra;

/// The fleet's lease rows, and what the answering replica itself believes it leads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Leases {
    /// The lease rows the fleet shares, by role; empty where every replica leads every role
    /// (the embedded SQLite store).
    pub items: Vec<Lease>,
    /// Always `None`: the roles fit one page.
    pub next: Option<String>,
    /// The replica that answered.
    pub replica: String,
    /// The roles the answering replica leads now, as it sees it.
    pub leading: Vec<String>,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

/// One role's lease. Expired leases stay listed (a released one expires at its release): the
/// role is free for the next replica that polls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Lease {
    pub role: String,
    /// The replica id that holds, or last held, the lease.
    pub holder: String,
    pub expires_at: String,
    /// Grows by one whenever the holder changes.
    pub epoch: i64,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

//! Schedules (issue 34, decision 0056): the scheduled flows of the tenant's active deployment
//! versions, when each fires next and what it fired last.

use serde::{Deserialize, Serialize};

use crate::Extra;

/// The tenant's schedules, by deployment and flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Schedules {
    pub items: Vec<Schedule>,
    /// Always `None`: the schedules fit one page.
    pub next: Option<String>,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

/// One scheduled flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Schedule {
    pub deployment: String,
    pub flow: String,
    /// The deployment version whose flow it starts: the active one.
    pub version: u32,
    /// As written: `cron 0 2 * * *` or `every PT15M`.
    pub expression: String,
    /// The IANA time zone the expression is read in.
    pub timezone: String,
    /// The next tick (RFC 3339); `None` when the schedule never fires again.
    pub next_at: Option<String>,
    /// The last tick fired, and the instance it started.
    pub last_at: Option<String>,
    pub last_instance: Option<String>,
    /// Paused by an operator: no tick fires until it is resumed.
    pub paused: bool,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

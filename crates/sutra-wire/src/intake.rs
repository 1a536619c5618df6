//! What `POST /v1/channels/{channel}/messages` answers when it does not hold the caller for a
//! reply (SPEC §5.3). A held caller gets the `end` node's reply itself, which is the flow's JSON
//! and has no shape of Sutra's.

use serde::{Deserialize, Serialize};

use crate::Extra;

/// The intake answer (`202`): `{"instance", "status", "dedup"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Accepted {
    /// `None` when the message was buffered for a receive that has not parked yet (and on a
    /// duplicate of such a message).
    pub instance: Option<String>,
    /// The instance's status after the step, or `buffered`.
    pub status: String,
    /// The event id was seen before; this is the first delivery's answer and nothing happened.
    pub dedup: bool,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

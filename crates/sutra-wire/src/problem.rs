//! The error body every refusal carries: `application/problem+json` (RFC 9457) with Sutra's
//! members (SPEC §4, §10).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::Extra;

/// An `application/problem+json` body. The server fills every member; a reader defaults the
/// RFC's optional ones, so that a proxy's sparse problem still decodes. The schema marks them
/// required, as the server writes them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Problem {
    /// `urn:sutra:error:{code}`.
    #[serde(rename = "type", default)]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub type_uri: String,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub title: String,
    pub status: u16,
    /// `SUTRA.{AREA}.{OPERATION}.{REASON}`, or a flow's own failure code.
    pub code: String,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub detail: String,
    /// Whether the same request may succeed if sent again unchanged (after `Retry-After`, when
    /// the answer carries one).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub retryable: bool,
    /// Members such as `violations`, `diagnostics` or `instance`.
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extensions: Extra,
}

impl Problem {
    /// The body for `code`, with the `type` URI derived from it and no extensions.
    pub fn new(
        code: impl Into<String>,
        title: impl Into<String>,
        status: u16,
        detail: impl Into<String>,
        retryable: bool,
    ) -> Problem {
        let code = code.into();
        Problem {
            type_uri: format!("urn:sutra:error:{code}"),
            title: title.into(),
            status,
            code,
            detail: detail.into(),
            retryable,
            extensions: Extra::new(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.detail)
    }
}

/// One reason a message failed its channel's schema (`SUTRA.INTAKE.VALIDATION`'s
/// `violations`), at a JSON pointer into the message's data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Violation {
    pub pointer: String,
    pub message: String,
}

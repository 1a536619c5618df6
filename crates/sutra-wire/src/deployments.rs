//! `POST /v1/deployments`, `GET /v1/deployments` and `GET /v1/deployments/{name}/{version}`.

use serde::{Deserialize, Serialize};

use crate::Extra;

/// A stored deployment version. The three routes share it: a deploy adds `warnings`, the
/// single read adds `source`, the listing has neither.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deployment {
    pub name: String,
    pub tenant: String,
    pub version: u32,
    /// `active`, `draining` or `retired`.
    pub status: String,
    pub created_at: String,
    /// What the checker warned about (a deploy's answer only); a deployment with errors is
    /// refused instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnings: Option<Vec<Diagnostic>>,
    /// The YAML as deployed (`GET /v1/deployments/{name}/{version}` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One located checker message, as `sutra check --json` prints it; also the `diagnostics` of a
/// `SUTRA.DEPLOY.INVALID` problem.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// The file the position is in: the deploy's `Sutra-File` header, or `deployment.yaml`.
    pub file: String,
    pub line: u32,
    pub column: u32,
    /// How many characters the underline covers.
    pub length: u32,
    /// `error` or `warning`.
    pub severity: String,
    /// The stable rule id, such as `unreachable-node`.
    pub rule: String,
    pub message: String,
    pub hint: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

//! `POST /v1/deployments`, `GET /v1/deployments` and `GET /v1/deployments/{name}/{version}`.

use serde::{Deserialize, Serialize};

use crate::Extra;

/// A stored deployment version. The three routes share it: a deploy adds `warnings`, the
/// single read adds `source`, the listing has neither.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// What keeps a draining version from retiring (`GET /v1/deployments/{name}/{version}` of a
    /// draining version only), counted in the database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retirement: Option<Retirement>,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

/// The three legs of the retirement gate (SPEC §7.3): a draining version retires when all are 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Retirement {
    /// Pinned instances that have not ended: suspended or failed.
    pub instances: u64,
    /// Outbox rows it minted, neither sent nor poisoned.
    pub outbox: u64,
    /// Tasks of its instances still available or locked.
    pub tasks: u64,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

/// One located checker message, as `sutra check --json` prints it; also the `diagnostics` of a
/// `SUTRA.DEPLOY.INVALID` problem.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

/// A deployment version's flows as graphs (`GET /v1/deployments/{name}/{version}/graph`): what
/// the console draws an instance's position on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeploymentGraph {
    pub name: String,
    pub version: u32,
    /// In name order.
    pub flows: Vec<FlowGraph>,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

/// One flow: its nodes in document order, each with where control can go from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FlowGraph {
    pub name: String,
    /// The channel it starts on; `null` for a flow a schedule starts or only other flows `call`.
    pub start: Option<String>,
    /// The schedule that starts it, as written (`cron 0 2 * * *`, `every PT15M`, with its zone);
    /// absent unless a schedule does (decision 0056).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// The first node; `None` for a flow with no nodes.
    pub entry: Option<String>,
    pub nodes: Vec<GraphNode>,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

/// A node of a flow graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GraphNode {
    pub id: String,
    /// The YAML key of its kind: `set`, `task`, `emit`, `receive`, `wait`, `choice`,
    /// `parallel`, `race`, `for-each`, `end` or `fail`.
    pub kind: String,
    /// A word on what it does: a task's topic, a channel, a failure code.
    pub detail: Option<String>,
    /// The `parallel` node whose branch holds it, and that branch's index (or the `scope` node
    /// whose block holds it, branch 0); `None` at the top level.
    pub branch_of: Option<String>,
    pub branch: Option<u32>,
    pub edges: Vec<GraphEdge>,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

/// Where control can go from a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GraphEdge {
    /// The node it goes to; `None` for the end of the node's list: the instance completes at
    /// the top level, a branch ends and joins its `parallel` node otherwise.
    pub to: Option<String>,
    /// `next`, `branch`, `when …`, `otherwise`, `on-error`, `on-timeout`, `join`,
    /// `arm N: receive <channel>` / `arm N: wait <duration>` (a race's arms),
    /// `deadline <duration>` or `remind <duration>` (to the reminder's first node).
    pub label: String,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

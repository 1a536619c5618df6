//! The HTTP API's vocabulary (SPEC §4): the body of every request and answer, as plain data.
//!
//! The server builds every answer from these types and the client decodes into them, so the
//! contract is written once and cannot drift between the two; `tests/samples.rs` pins each type
//! to a sample of its wire form. Nothing here knows the engine or the store: the server converts
//! its records into these types, and `sutra-client` — a public boundary — depends on this crate
//! alone.
//!
//! Times stay RFC 3339 strings and statuses stay strings: this crate passes the server's values
//! through rather than pinning a date library or an enum that a newer server could outgrow.
//! Every answer type keeps the members a reader does not know in `extra`, so re-serializing one
//! (as `sutra … --json` does) loses nothing a newer server added (SPEC §4: "more fields may be
//! added, none renamed"). Request bodies have no `extra`: a server reads what it knows.
//!
//! With the `openapi` feature each type also derives its OpenAPI schema (utoipa), which the
//! server's document at `GET /openapi.json` is made of (decision 0033); only the server turns it
//! on. An answer's `extra` is left out of its schema, which then admits members it does not
//! name, as a reader must.

mod deployments;
mod health;
mod instances;
mod intake;
mod leases;
mod problem;
#[cfg(feature = "openapi")]
pub mod rules;
mod schedules;
mod system;
mod tasks;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use deployments::{
    Deployment, DeploymentGraph, Diagnostic, FlowGraph, GraphEdge, GraphNode, Retirement,
};
pub use health::{Health, Readiness, Scaling};
pub use instances::{
    BulkAnswer, BulkBody, BulkFilter, BulkResult, Failure, HistoryEvent, Instance, InstanceParent,
    InstanceQuery, InstanceSummary, ListedInstance, MigrateBody, OutboxMessage, StatusChange,
    Token,
};
pub use intake::Accepted;
pub use leases::{Lease, Leases};
pub use problem::{Problem, Violation};
pub use schedules::{Schedule, Schedules};
pub use system::{SystemHistory, SystemSample};
pub use tasks::{
    COMPLETE_BATCH_MAX, CompleteBody, CompleteItem, CompletedBatch, ExtendBody, FailBody,
    ItemResult, LockExtended, LockedTask, PollBody, ReleaseBody, Take, TaskFailure, TaskQuery,
    TaskState, TaskSummary,
};

/// Members of an answer that this version of the vocabulary does not know.
pub type Extra = Map<String, Value>;

/// One page of a keyset-paginated list; pass `next` as `after` to get the following page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: Option<String>,
}

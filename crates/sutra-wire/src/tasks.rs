//! The pull surface (SPEC §4, §5.5): `POST /v1/tasks/poll`, `…/complete`, `…/fail`,
//! `…/extend`, the batched `POST /v1/tasks/complete`, and `GET /v1/tasks`.
//!
//! A request body's defaults are the server's: what a worker leaves out means what these say.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Extra, Problem};

/// The most items one `POST /v1/tasks/complete` may carry: as many as one poll can lock, so
/// that a worker can complete a poll's worth in one call. A larger batch is refused whole.
pub const COMPLETE_BATCH_MAX: usize = 100;

/// `POST /v1/tasks/poll`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PollBody {
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::rules::worker))]
    pub worker: String,
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::rules::topics))]
    pub topics: Vec<String>,
    /// At most this many tasks; one unless asked. More than 100 locks 100.
    #[serde(default = "one")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub max: u32,
    /// How long each returned task stays locked (ISO-8601), or the task's own lock.
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::rules::lock))]
    pub lock: Option<String>,
    /// How long the server may hold the request open waiting for a task (ISO-8601), or not at
    /// all.
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::rules::wait))]
    pub wait: Option<String>,
}

fn one() -> u32 {
    1
}

/// `POST /v1/tasks/{id}/complete`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CompleteBody {
    pub lock_token: String,
    #[serde(default)]
    pub output: Value,
}

/// One item of `POST /v1/tasks/complete`, whose body is a JSON array of them: a single
/// completion's body with the task's id, which the single one has in its path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CompleteItem {
    pub id: String,
    pub lock_token: String,
    #[serde(default)]
    pub output: Value,
    /// Asks for this worker's next task with the completion (eager dispatch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub take: Option<Take>,
}

/// A completing worker's ask for its next task (eager dispatch): when the step the completion
/// resumes arms a task of one of `topics`, that task is locked for `worker` in the same
/// transaction and answered as the item's `taken`, instead of waiting for a poll. At most one
/// task per item: the slot the completion frees. A worker that asks must run what it is given,
/// as it would a polled task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Take {
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::rules::worker))]
    pub worker: String,
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::rules::topics))]
    pub topics: Vec<String>,
    /// How long the task stays locked (ISO-8601), or the task's own lock.
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::rules::lock))]
    pub lock: Option<String>,
}

/// The answer of `POST /v1/tasks/complete`: one result per item, in the request's order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CompletedBatch {
    pub items: Vec<ItemResult>,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

/// How one item of a batched completion ended: `state` is `completed` as a single completion
/// answers it, or `error` is the problem a single completion would have answered instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ItemResult {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Problem>,
    /// The task locked for the worker with this completion, when the item asked (`take`) and
    /// the resumed step armed one of its topics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taken: Option<LockedTask>,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

/// `POST /v1/tasks/{id}/fail`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FailBody {
    pub lock_token: String,
    pub error: TaskFailure,
    /// `true` makes the task available again after its backoff (or terminal once out of
    /// retries); `false` is a business error the flow handles at once. A worker that says
    /// nothing is reporting a technical failure, worth a retry.
    #[serde(default = "yes")]
    pub retry: bool,
}

fn yes() -> bool {
    true
}

/// The error a worker reports when it fails a task; `on-error` routes on its `code`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskFailure {
    /// What `on-error` routes on: not empty.
    #[cfg_attr(feature = "openapi", schema(min_length = 1))]
    pub code: String,
    #[serde(default)]
    pub message: String,
}

/// `POST /v1/tasks/{id}/release`: hands the task back without spending its attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReleaseBody {
    pub lock_token: String,
}

/// `POST /v1/tasks/{id}/extend`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExtendBody {
    pub lock_token: String,
    /// The lock's new length from now (ISO-8601).
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::rules::extension))]
    pub lock: String,
}

/// A task locked for the polling worker (`POST /v1/tasks/poll` answers a JSON array of them,
/// empty when none came within `wait`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockedTask {
    pub id: String,
    pub topic: String,
    pub instance: String,
    pub input: Value,
    /// Which attempt this is, from 1.
    pub attempt: u32,
    /// Proves this worker holds the lock; every complete, fail and extend must carry it.
    pub lock_token: String,
    /// When the lock ends: the lock asked for (else the task's own) from when it was taken, at
    /// most the server's ceiling (`sutra.tasks.max-lock`).
    pub lock_expires_at: String,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

/// A task's state after a complete or a fail: `completed`, or after a fail `available` (it will
/// be retried), `failed` (a business error, handed to the flow) or `terminal` (out of retries).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskState {
    pub id: String,
    pub state: String,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

/// A lock's new expiry after an extend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockExtended {
    pub id: String,
    /// When the lock now ends: the lock asked for from now, at most the server's ceiling
    /// (`sutra.tasks.max-lock`).
    pub lock_expires_at: String,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

/// The query of `GET /v1/tasks`; `None` means any.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(utoipa::IntoParams),
    into_params(parameter_in = Query)
)]
pub struct TaskQuery {
    pub topic: Option<String>,
    /// `available`, `locked`, `completed`, `failed`, `terminal` or `cancelled`.
    #[cfg_attr(feature = "openapi", param(schema_with = crate::rules::task_state))]
    pub state: Option<String>,
    /// At most this many (default 100; more than 500 is 500).
    pub limit: Option<u32>,
    /// The `next` cursor of the previous page.
    #[cfg_attr(feature = "openapi", param(schema_with = crate::rules::task_cursor))]
    pub after: Option<String>,
}

/// A task row, as `GET /v1/tasks` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskSummary {
    pub id: String,
    pub topic: String,
    pub instance: String,
    pub state: String,
    pub attempt: u32,
    pub retries: u32,
    /// The worker holding the lock, if any.
    pub worker: Option<String>,
    pub lock_expires_at: Option<String>,
    pub created_at: String,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

//! The API's wire shapes (SPEC §4) as plain data.
//!
//! Times stay RFC 3339 strings and statuses stay strings: this crate passes the server's values
//! through rather than pinning a date library or an enum that a newer server could outgrow.
//! Every answer type keeps the members this client version does not know in `extra`, so
//! re-serializing one (as `sutra … --json` does) loses nothing a newer server added (SPEC §4:
//! "more fields may be added, none renamed").

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Members of an answer that this client version does not know.
pub type Extra = Map<String, Value>;

/// One page of a keyset-paginated list; pass `next` as `after` to get the following page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: Option<String>,
}

/// A stored deployment version, as `POST /v1/deployments` answers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deployment {
    pub name: String,
    pub tenant: String,
    pub version: u32,
    /// `active`, `draining` or `retired`.
    pub status: String,
    pub created_at: String,
    /// What the checker warned about; a deployment with errors is refused instead.
    #[serde(default)]
    pub warnings: Vec<Diagnostic>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One located checker message, as `sutra check --json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnostic {
    pub line: u32,
    pub column: u32,
    /// `error` or `warning`.
    pub severity: String,
    /// The stable rule id, such as `unreachable-node`.
    pub rule: String,
    pub message: String,
    pub hint: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A CloudEvents 1.0 event to send on an `http` channel. `id` is the deduplication key.
#[derive(Debug, Clone, PartialEq)]
pub struct CloudEvent {
    pub id: String,
    /// The CloudEvents `type` attribute.
    pub kind: String,
    pub source: String,
    pub subject: Option<String>,
    pub data: Value,
}

impl CloudEvent {
    pub fn new(
        id: impl Into<String>,
        kind: impl Into<String>,
        source: impl Into<String>,
        data: Value,
    ) -> CloudEvent {
        CloudEvent {
            id: id.into(),
            kind: kind.into(),
            source: source.into(),
            subject: None,
            data,
        }
    }

    /// The structured-mode JSON body.
    pub(crate) fn to_json(&self) -> Value {
        let mut event = json!({
            "specversion": "1.0",
            "id": self.id,
            "type": self.kind,
            "source": self.source,
            "data": self.data,
        });
        if let Some(subject) = &self.subject {
            event["subject"] = json!(subject);
        }
        event
    }
}

/// How the server answered a message (SPEC §5.3).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Sent {
    /// The step that consumed the message committed (`ack: commit`, or `ack: complete` past its
    /// `ack-timeout`).
    Accepted(Accepted),
    /// `ack: complete`: the instance completed, and this is its `end` node's reply.
    Replied {
        instance: Option<String>,
        reply: Value,
    },
}

/// The intake answer: `{"instance", "status", "dedup"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Accepted {
    pub instance: String,
    pub status: String,
    /// The event id was seen before; this is the first delivery's answer and nothing happened.
    pub dedup: bool,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Filters for listing instances; `None` means any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstanceQuery {
    /// `suspended`, `completed`, `cancelled` or `failed`.
    pub status: Option<String>,
    pub flow: Option<String>,
    pub limit: Option<u32>,
    /// The `next` cursor of the previous page.
    pub after: Option<String>,
}

/// An instance snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    pub id: String,
    pub tenant: String,
    pub flow: String,
    /// The deployment's name.
    pub deployment: String,
    /// The deployment version the instance is pinned to.
    pub version: u32,
    /// `running`, `suspended`, `completed`, `cancelled` or `failed`.
    pub status: String,
    pub vars: Value,
    pub tokens: Vec<Token>,
    pub failure: Option<Failure>,
    pub created_at: String,
    pub updated_at: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A position in the flow graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Token {
    pub id: u64,
    pub node: String,
    /// `ready`, `parked` or `joining`.
    #[serde(default)]
    pub state: Option<String>,
    /// What the token waits for: an object whose `kind` is `task`, `receive` or `wait`, or the
    /// pending branches of a join.
    pub park: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Why an instance failed (SPEC §7.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub code: String,
    pub detail: String,
    #[serde(default)]
    pub node: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One audit event of an instance; `seq` starts at 1 and has no gaps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEvent {
    pub seq: u64,
    pub at: String,
    pub kind: String,
    pub node: Option<String>,
    pub token: Option<u64>,
    pub detail: Value,
    #[serde(flatten)]
    pub extra: Extra,
}

/// The answer to an administrative operation: the instance's status after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusChange {
    pub instance: String,
    pub status: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Filters for listing tasks; `None` means any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskQuery {
    pub topic: Option<String>,
    /// `available`, `locked`, `completed`, `failed`, `terminal` or `cancelled`.
    pub state: Option<String>,
    pub limit: Option<u32>,
    /// The `next` cursor of the previous page.
    pub after: Option<String>,
}

/// A task row, as listed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    pub extra: Extra,
}

/// Who leads which singleton role (`GET /v1/leases`, SPEC §6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Leases {
    /// The lease rows the fleet shares, by role; empty where every replica leads every role
    /// (the embedded SQLite store).
    pub items: Vec<Lease>,
    pub next: Option<String>,
    /// The replica that answered.
    pub replica: String,
    /// The roles the answering replica leads now, as it sees it.
    pub leading: Vec<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One role's lease. Expired leases stay listed (a released one expires at its release): the
/// role is free for the next replica that polls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    pub role: String,
    /// The replica id that holds, or last held, the lease.
    pub holder: String,
    pub expires_at: String,
    /// Grows by one whenever the holder changes.
    pub epoch: i64,
    #[serde(flatten)]
    pub extra: Extra,
}

/// What a worker asks for in one poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollRequest {
    pub worker: String,
    pub topics: Vec<String>,
    /// At most this many tasks.
    pub max: u32,
    /// How long each returned task stays locked for this worker.
    pub lock: Duration,
    /// How long the server may hold the request open waiting for a task (it caps this at 60 s).
    pub wait: Duration,
}

impl PollRequest {
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "worker": self.worker,
            "topics": self.topics,
            "max": self.max,
            "lock": crate::duration::iso8601(self.lock),
            "wait": crate::duration::iso8601(self.wait),
        })
    }
}

/// A task locked for this worker by a poll.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockedTask {
    pub id: String,
    pub topic: String,
    pub instance: String,
    pub input: Value,
    /// Which attempt this is, from 1.
    pub attempt: u32,
    /// Proves this worker holds the lock; every complete, fail and extend must carry it.
    pub lock_token: String,
    pub lock_expires_at: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// The error a worker reports when it fails a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskFailure {
    pub code: String,
    pub message: String,
}

/// A task's state after a complete or a fail: `completed`, or after a fail `available` (it will
/// be retried), `failed` (a business error, handed to the flow) or `terminal` (out of retries).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskState {
    pub id: String,
    pub state: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A lock's new expiry after an extend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockExtended {
    pub id: String,
    pub lock_expires_at: String,
    #[serde(flatten)]
    pub extra: Extra,
}

//! The client's own request types, and the wire vocabulary it decodes into.
//!
//! The answers are `sutra-wire`'s types, re-exported as this crate's (so that the server that
//! writes them and this client that reads them share one definition). What stays here is what
//! only a client has: a CloudEvent to send, how an intake call ended, and a poll in durations
//! rather than ISO-8601 text.

use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
pub use sutra_wire::{
    Accepted, BulkAnswer, BulkBody, BulkFilter, BulkResult, COMPLETE_BATCH_MAX, CompleteItem,
    Deployment, Diagnostic, Extra, Failure, HistoryEvent, Instance, InstanceQuery, InstanceSummary,
    ItemResult, Lease, Leases, LockExtended, LockedTask, OutboxMessage, Page, Problem, Readiness,
    Retirement, Schedule, Schedules, StatusChange, Take, TaskFailure, TaskQuery, TaskState,
    TaskSummary, Token, Violation,
};

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
    pub(crate) fn to_body(&self) -> sutra_wire::PollBody {
        sutra_wire::PollBody {
            worker: self.worker.clone(),
            topics: self.topics.clone(),
            max: self.max,
            lock: Some(crate::duration::iso8601(self.lock)),
            wait: Some(crate::duration::iso8601(self.wait)),
        }
    }
}

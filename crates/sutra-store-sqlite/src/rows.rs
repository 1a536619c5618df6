//! Rows as SQLite returns them, and their decoding into the store's records. Each `SELECT` in
//! this crate names the columns of one of these structs, in any order (`FromRow` reads by name).

use sutra_core::snapshot::TokenId;
use sutra_core::step::HistoryEvent;
use sutra_store::{
    Delivery, DeliveryId, DeliveryKind, DeploymentRecord, DeploymentStatus, InboxAnswer,
    InstanceRecord, Lease, OutboxEntry, OutboxId, OutboxRecord, Result, TaskRecord, TaskState,
    WaitTarget,
};

use crate::codec::{self, corrupt, json, park_id, timestamp, unsigned};

#[derive(sqlx::FromRow)]
pub struct DeploymentRow {
    tenant: String,
    name: String,
    version: i64,
    status: String,
    source: String,
    created_at: i64,
}

impl DeploymentRow {
    pub fn decode(self) -> Result<DeploymentRecord> {
        Ok(DeploymentRecord {
            status: DeploymentStatus::parse(&self.status)
                .ok_or_else(|| corrupt("a deployment status", &self.status))?,
            tenant: self.tenant,
            name: self.name,
            version: unsigned(self.version, "a deployment version")?,
            source: self.source,
            created_at: timestamp(self.created_at)?,
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct InstanceRow {
    snapshot: String,
    owner: Option<String>,
    fence: i64,
    recoveries: i64,
    created_at: i64,
    updated_at: i64,
}

impl InstanceRow {
    pub fn decode(self) -> Result<InstanceRecord> {
        Ok(InstanceRecord {
            snapshot: codec::snapshot(&self.snapshot)?,
            owner: self.owner,
            fence: self.fence,
            recoveries: unsigned(self.recoveries, "a recovery count")?,
            created_at: timestamp(self.created_at)?,
            updated_at: timestamp(self.updated_at)?,
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct WaitRow {
    instance: String,
    park: i64,
}

impl WaitRow {
    pub fn decode(self) -> Result<WaitTarget> {
        Ok(WaitTarget {
            instance: self.instance,
            park: park_id(self.park)?,
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct InboxRow {
    instance: Option<String>,
    status: String,
}

impl InboxRow {
    pub fn decode(self) -> InboxAnswer {
        InboxAnswer {
            instance: self.instance,
            status: self.status,
        }
    }
}

#[derive(sqlx::FromRow)]
pub struct DeliveryRow {
    id: i64,
    tenant: String,
    instance: String,
    park: i64,
    kind: String,
    payload: String,
    due_at: i64,
    attempts: i64,
}

impl DeliveryRow {
    pub fn decode(self) -> Result<Delivery> {
        Ok(Delivery {
            id: DeliveryId(self.id),
            kind: DeliveryKind::decode(&self.kind, json(&self.payload)?)?,
            tenant: self.tenant,
            instance: self.instance,
            park: park_id(self.park)?,
            due_at: timestamp(self.due_at)?,
            attempts: unsigned(self.attempts, "a delivery's attempts")?,
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct HistoryRow {
    seq: i64,
    at: i64,
    kind: String,
    node: Option<String>,
    token: Option<i64>,
    detail: String,
}

impl HistoryRow {
    pub fn decode(self) -> Result<HistoryEvent> {
        Ok(HistoryEvent {
            seq: unsigned(self.seq, "a history sequence")?,
            at: timestamp(self.at)?,
            kind: codec::parse_history_kind(&self.kind)?,
            node: self.node,
            token: self
                .token
                .map(|token| unsigned(token, "a token id").map(TokenId))
                .transpose()?,
            detail: json(&self.detail)?,
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct TaskRow {
    id: String,
    instance: String,
    park: i64,
    topic: String,
    input: String,
    state: String,
    attempt: i64,
    retries: i64,
    worker: Option<String>,
    locked_until: Option<i64>,
    available_at: i64,
    created_at: i64,
}

impl TaskRow {
    pub fn decode(self) -> Result<TaskRecord> {
        Ok(TaskRecord {
            state: TaskState::parse(&self.state)
                .ok_or_else(|| corrupt("a task state", &self.state))?,
            id: self.id,
            instance: self.instance,
            park: park_id(self.park)?,
            topic: self.topic,
            input: json(&self.input)?,
            attempt: unsigned(self.attempt, "a task attempt")?,
            retries: unsigned(self.retries, "a task's retries")?,
            worker: self.worker,
            locked_until: self.locked_until.map(timestamp).transpose()?,
            available_at: timestamp(self.available_at)?,
            created_at: timestamp(self.created_at)?,
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct OutboxRow {
    channel: String,
    payload: String,
    message_key: Option<String>,
    idempotency_key: String,
    instance: String,
    deployment: String,
    version: i64,
    attempts: i64,
    sent_at: Option<i64>,
    poisoned: bool,
    last_error: Option<String>,
    next_attempt_at: i64,
}

impl OutboxRow {
    pub fn decode(self) -> Result<OutboxRecord> {
        Ok(OutboxRecord {
            entry: OutboxEntry {
                channel: self.channel,
                payload: json(&self.payload)?,
                message_key: self.message_key,
                idempotency_key: self.idempotency_key,
            },
            instance: self.instance,
            deployment: self.deployment,
            version: unsigned(self.version, "a deployment version")?,
            attempts: unsigned(self.attempts, "an outbox row's attempts")?,
            sent_at: self.sent_at.map(timestamp).transpose()?,
            poisoned: self.poisoned,
            last_error: self.last_error,
            next_attempt_at: timestamp(self.next_attempt_at)?,
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct ClaimedOutboxRow {
    id: i64,
    tenant: String,
    instance: String,
    deployment: String,
    version: i64,
    channel: String,
    payload: String,
    message_key: Option<String>,
    idempotency_key: String,
    attempts: i64,
    next_attempt_at: i64,
}

impl ClaimedOutboxRow {
    pub fn decode(self) -> Result<sutra_store::OutboxRow> {
        Ok(sutra_store::OutboxRow {
            id: OutboxId(self.id),
            tenant: self.tenant,
            instance: self.instance,
            deployment: self.deployment,
            version: unsigned(self.version, "a deployment version")?,
            entry: OutboxEntry {
                channel: self.channel,
                payload: json(&self.payload)?,
                message_key: self.message_key,
                idempotency_key: self.idempotency_key,
            },
            attempts: unsigned(self.attempts, "an outbox row's attempts")?,
        })
    }

    /// Oldest due first, rows due at the same microsecond in the order they were written: the
    /// order a batch is handed out in (`RETURNING` keeps none).
    pub fn order(&self) -> (i64, i64) {
        (self.next_attempt_at, self.id)
    }
}

#[derive(sqlx::FromRow)]
pub struct LeaseRow {
    role: String,
    holder: String,
    expires_at: i64,
    epoch: i64,
}

impl LeaseRow {
    pub fn decode(self) -> Result<Lease> {
        Ok(Lease {
            role: self.role,
            holder: self.holder,
            expires_at: timestamp(self.expires_at)?,
            epoch: self.epoch,
        })
    }
}

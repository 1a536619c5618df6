//! Rows as the SQL backends return them, and their decoding into the store's records, written
//! once for both. Each `SELECT` or `RETURNING` names the columns of one of these structs, in any
//! order (`FromRow` reads by name, and is generic over the backend's row type). JSON columns are
//! [`Json`]: TEXT on SQLite — the compact text `serde_json` writes, as it always was — and JSONB on
//! PostgreSQL.

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use sqlx::types::Json;
use sutra_core::snapshot::{Failure, ParkId, Snapshot, Status, TokenId};
use sutra_core::step::HistoryEvent;
use sutra_core::storable::json_bytes;
use sutra_store::codec::{corrupt, park_id, parse_history_kind, timestamp, unsigned};
use sutra_store::{
    ClaimKind, ClaimToken, Claimed, Delivery, DeliveryId, DeliveryKind, DeploymentRecord,
    DeploymentStatus, Error, InboxAnswer, InstanceKey, InstanceRecord, InstanceSummary, Lease,
    OutboxEntry, OutboxId, OutboxRecord, Owner, Result, ScheduleRecord, SweepOutcome, TaskLock,
    TaskRecord, TaskState, WaitTarget,
};

pub fn snapshot(json: Value) -> Result<Snapshot> {
    Snapshot::from_json(json).map_err(|e| corrupt("a snapshot", e))
}

/// What a successful claim's `UPDATE … RETURNING fence, snapshot, held_by, unreadable` returns.
#[derive(sqlx::FromRow)]
pub struct ClaimedRow {
    fence: i64,
    snapshot: Json<Value>,
    held_by: Option<String>,
    /// The failure the engine wrote in the row when it could not read the snapshot
    /// ([`sutra_store::Claims::mark_unreadable`]).
    unreadable: Option<String>,
}

impl ClaimedRow {
    /// The claim, unless the row is marked unreadable: a marked row is refused as one whose
    /// snapshot does not decode is, even once repaired, until a restore clears the mark — so
    /// that nothing runs it while it is listed as failed.
    pub fn decode(self, owner: &Owner, kind: ClaimKind) -> Result<Claimed> {
        if self.unreadable.is_some() {
            return Err(Error::Corrupt(
                "its row is marked failed since its snapshot could not be decoded".to_owned(),
            ));
        }
        Ok(Claimed {
            token: ClaimToken {
                owner: owner.clone(),
                fence: self.fence,
                kind,
            },
            snapshot: snapshot(self.snapshot.0)?,
            held_by: self.held_by,
        })
    }
}

/// An instance's snapshot as text, and its mark, read under the row's lock to mark or clear it
/// (`SELECT snapshot, unreadable`): text, so that a snapshot that is not even JSON is read too.
#[derive(sqlx::FromRow)]
pub struct SnapshotTextRow {
    snapshot: String,
    unreadable: Option<String>,
}

impl SnapshotTextRow {
    pub fn marked(&self) -> bool {
        self.unreadable.is_some()
    }

    /// The snapshot, or why it cannot be decoded.
    pub fn decode(&self) -> Result<Snapshot> {
        let json = serde_json::from_str(&self.snapshot).map_err(|e| corrupt("a snapshot", e))?;
        snapshot(json)
    }
}

/// An instance whose claim a sweep cleared: `RETURNING tenant, id, recoveries`.
#[derive(sqlx::FromRow)]
pub struct SweptRow {
    tenant: String,
    id: String,
    recoveries: i64,
}

impl SweptRow {
    /// What the sweep did: every cleared claim counts, and the instances cleared
    /// `max_recoveries` times in a row are poisoned.
    pub fn outcome(swept: Vec<SweptRow>, max_recoveries: u32) -> SweepOutcome {
        let cleared = swept.len() as u64;
        let poisoned = swept
            .into_iter()
            .filter(|row| row.recoveries >= i64::from(max_recoveries))
            .map(|row| InstanceKey {
                tenant: row.tenant,
                id: row.id,
            })
            .collect();
        SweepOutcome { cleared, poisoned }
    }
}

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
    snapshot: Json<Value>,
    owner: Option<String>,
    fence: i64,
    recoveries: i64,
    created_at: i64,
    updated_at: i64,
    unreadable: Option<String>,
}

impl InstanceRow {
    /// The length of the instance's variables written as JSON.
    pub fn vars_bytes(&self) -> usize {
        json_bytes(&self.snapshot.0["vars"])
    }

    /// The record; a row marked unreadable reads as failed with its mark's failure, as the
    /// listings show it, or, while its snapshot still does not decode, as that failure's detail
    /// (what did not decode, and what to do).
    pub fn decode(self) -> Result<InstanceRecord> {
        let decoded = snapshot(self.snapshot.0);
        let snapshot = match self.unreadable {
            Some(mark) => failed_in_row(decoded, &mark)?,
            None => decoded?,
        };
        Ok(InstanceRecord {
            snapshot,
            owner: self.owner,
            fence: self.fence,
            recoveries: unsigned(self.recoveries, "a recovery count")?,
            created_at: timestamp(self.created_at)?,
            updated_at: timestamp(self.updated_at)?,
        })
    }
}

/// A snapshot as the mark on its row shows it: failed with the mark's failure.
fn failed_in_row(decoded: Result<Snapshot>, mark: &str) -> Result<Snapshot> {
    let failure: Failure = serde_json::from_str(mark).map_err(|e| corrupt("a failure", e))?;
    let mut snapshot = decoded.map_err(|_| Error::Corrupt(failure.detail.clone()))?;
    snapshot.status = Status::Failed;
    snapshot.failure = Some(failure);
    Ok(snapshot)
}

/// The columns of [`crate::listings::summaries`]: `failure` and `tokens` are those members of the
/// snapshot as JSON text, `NULL` when not read.
#[derive(sqlx::FromRow)]
pub struct InstanceSummaryRow {
    id: String,
    tenant: String,
    deployment: String,
    version: i64,
    flow: String,
    status: String,
    parent: Option<String>,
    failure: Option<String>,
    tokens: Option<String>,
    created_at: i64,
    updated_at: i64,
}

impl InstanceSummaryRow {
    pub fn decode(self) -> Result<InstanceSummary> {
        let failure = self
            .failure
            .as_deref()
            .map(serde_json::from_str)
            .transpose();
        let tokens = self.tokens.as_deref().map(serde_json::from_str).transpose();
        Ok(InstanceSummary {
            status: Status::parse(&self.status)
                .ok_or_else(|| corrupt("an instance status", &self.status))?,
            version: unsigned(self.version, "a deployment version")?,
            failure: failure.map_err(|e| corrupt("a failure", e))?,
            tokens: tokens.map_err(|e| corrupt("an instance's tokens", e))?,
            created_at: timestamp(self.created_at)?,
            updated_at: timestamp(self.updated_at)?,
            id: self.id,
            tenant: self.tenant,
            deployment: self.deployment,
            flow: self.flow,
            parent: self.parent,
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

    /// The wait a statement's outer join found, if it found one: its `instance` and `park`
    /// columns, both null when no wait matched.
    pub fn joined(instance: Option<String>, park: Option<i64>) -> Result<Option<WaitTarget>> {
        match (instance, park) {
            (Some(instance), Some(park)) => WaitRow { instance, park }.decode().map(Some),
            _ => Ok(None),
        }
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
    payload: Json<Value>,
    due_at: i64,
    attempts: i64,
    dispatches: i64,
    failures: i64,
    last_error: Option<String>,
}

impl DeliveryRow {
    pub fn decode(self) -> Result<Delivery> {
        Ok(Delivery {
            id: DeliveryId(self.id),
            kind: DeliveryKind::decode(&self.kind, self.payload.0)?,
            tenant: self.tenant,
            instance: self.instance,
            park: park_id(self.park)?,
            due_at: timestamp(self.due_at)?,
            attempts: unsigned(self.attempts, "a delivery's attempts")?,
            dispatches: unsigned(self.dispatches, "a delivery's dispatches")?,
            failures: unsigned(self.failures, "a delivery's failures")?,
            last_error: self.last_error,
        })
    }

    /// The row's id, for a backend that marks a batch it read.
    pub fn id(&self) -> i64 {
        self.id
    }
}

#[derive(sqlx::FromRow)]
pub struct HistoryRow {
    seq: i64,
    at: i64,
    kind: String,
    node: Option<String>,
    token: Option<i64>,
    detail: Json<Value>,
}

impl HistoryRow {
    pub fn decode(self) -> Result<HistoryEvent> {
        Ok(HistoryEvent {
            seq: unsigned(self.seq, "a history sequence")?,
            at: timestamp(self.at)?,
            kind: parse_history_kind(&self.kind)?,
            node: self.node,
            token: self
                .token
                .map(|token| unsigned(token, "a token id").map(TokenId))
                .transpose()?,
            detail: self.detail.0,
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct TaskRow {
    id: String,
    instance: String,
    park: i64,
    topic: String,
    input: Json<Value>,
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
            input: self.input.0,
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
    payload: Json<Value>,
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
                payload: self.payload.0,
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
    payload: Json<Value>,
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
                payload: self.payload.0,
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

/// A schedule row, as every statement of the `schedules` table returns it.
#[derive(sqlx::FromRow)]
pub struct ScheduleRow {
    tenant: String,
    deployment: String,
    flow: String,
    version: i64,
    expression: String,
    zone: String,
    next_at: i64,
    last_at: Option<i64>,
    last_instance: Option<String>,
    paused: bool,
}

impl ScheduleRow {
    pub fn decode(self) -> Result<ScheduleRecord> {
        Ok(ScheduleRecord {
            tenant: self.tenant,
            deployment: self.deployment,
            flow: self.flow,
            version: unsigned(self.version, "a schedule's version")?,
            expression: self.expression,
            zone: self.zone,
            next_at: timestamp(self.next_at)?,
            last_at: self.last_at.map(timestamp).transpose()?,
            last_instance: self.last_instance,
            paused: self.paused,
        })
    }
}

/// A task row as a worker's answer reads it, to check the worker's lock token against.
#[derive(sqlx::FromRow)]
pub struct HeldRow {
    instance: String,
    park: i64,
    state: String,
    lock_token: Option<String>,
    locked_until: Option<i64>,
    attempt: i64,
    retries: i64,
    backoff_us: i64,
}

/// A task whose lock a worker's token holds.
pub struct Held {
    pub instance: String,
    pub park: ParkId,
    pub attempt: u32,
    pub retries: u32,
    pub backoff: SignedDuration,
}

impl HeldRow {
    /// The task, if `presented` holds its lock at `now` ([`TaskLock::check`]).
    pub fn check(self, id: &str, presented: &str, now: Timestamp) -> Result<Held> {
        let lock = TaskLock {
            state: TaskState::parse(&self.state)
                .ok_or_else(|| corrupt("a task state", &self.state))?,
            token: self.lock_token.as_deref(),
            until: self.locked_until.map(timestamp).transpose()?,
        };
        lock.check(id, presented, now)?;
        Ok(Held {
            park: park_id(self.park)?,
            attempt: unsigned(self.attempt, "a task attempt")?,
            retries: unsigned(self.retries, "a task's retries")?,
            backoff: SignedDuration::from_micros(self.backoff_us),
            instance: self.instance,
        })
    }
}

/// One claim taken ahead for a group ([`crate::ClaimStatements::lock_claimables`]): the
/// instance's row if it was claimed, its task's park if a completion's task was completed under
/// the claim, and whether the instance exists at all (a refusal's reason).
#[derive(sqlx::FromRow)]
pub struct AheadRow {
    pub instance: String,
    fence: Option<i64>,
    snapshot: Option<Json<Value>>,
    held_by: Option<String>,
    unreadable: Option<String>,
    park: Option<i64>,
    pub present: bool,
}

impl AheadRow {
    /// The claimed row, if the claim was taken.
    pub fn claimed(&mut self) -> Option<ClaimedRow> {
        Some(ClaimedRow {
            fence: self.fence?,
            snapshot: self.snapshot.take()?,
            held_by: self.held_by.take(),
            unreadable: self.unreadable.take(),
        })
    }

    /// The completed task, if a completion's task was completed under the claim.
    pub fn completed(&self) -> Option<CompletedRow> {
        Some(CompletedRow {
            instance: self.instance.clone(),
            park: self.park?,
        })
    }
}

/// A task a worker's completion ended: `RETURNING instance, park`.
#[derive(sqlx::FromRow)]
pub struct CompletedRow {
    pub instance: String,
    pub park: i64,
}

/// A task a poll turned terminal because its last attempt's lock expired:
/// `RETURNING instance, park, worker, attempt`.
#[derive(sqlx::FromRow)]
pub struct ExpiredRow {
    pub instance: String,
    pub park: i64,
    pub worker: Option<String>,
    pub attempt: i64,
}

//! The pull surface (SPEC §5.5) on PostgreSQL: polls, completions, failures and extensions of
//! external tasks, and their listings. Steps write and cancel the task rows (see
//! [`crate::commit`]).
//!
//! Workers poll every replica at once. A poll picks its tasks `FOR UPDATE SKIP LOCKED`: a task
//! another poll is taking right now is skipped rather than waited for, and one it took and
//! committed no longer matches (a locked row is re-checked against its latest version), so no
//! task is handed to two pollers. A worker's answer reads its task `FOR UPDATE` — ordered with a
//! poll retaking an expired lock and with a step cancelling the task — judges it by the rules
//! `sutra_store` gives every backend ([`TaskLock::check`], [`after_failure`], [`retry_backoff`])
//! against the database's clock, and writes the task and the delivery carrying its outcome in
//! one transaction. Lock deadlines and backoffs are `sutra_after(span)`: the database's clock
//! too, so workers on different replicas are judged by one clock.

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool, Postgres, QueryBuilder};
use sutra_core::snapshot::ParkId;
use sutra_core::step::TaskError;
use sutra_store::{
    DeliveryId, DeliveryKind, Error, LockedTask, Polled, Result, TaskFailure, TaskFilter, TaskLock,
    TaskPoll, TaskRecord, TaskState, after_failure, lock_expired, retry_backoff,
};

use crate::codec::{corrupt, db, duration_micros, park_id, timestamp, unsigned};
use crate::rows::TaskRow;
use crate::scope::{Scope, begin};
use crate::statements::{NewDeliveryRow, insert_delivery};

/// The columns of a [`TaskRow`].
macro_rules! task_columns {
    () => {
        "id, instance, park, topic, input, state, attempt, retries, worker, locked_until,
         available_at, created_at"
    };
}

pub async fn poll(pool: &PgPool, poll: &TaskPoll) -> Result<Polled> {
    let mut tx = begin(pool, Scope::Tenant(&poll.tenant)).await?;
    // First, so that what remains expired is within its budget and may be handed out.
    let due_now = exhaust_expired(&mut tx, &poll.tenant, &poll.topics).await?;
    // An expired lock was a failed attempt: the lock taken now is the next one. The outer ORDER
    // BY gives the batch the order it was picked in, which `RETURNING` alone would not.
    let locked: Vec<LockedRow> = sqlx::query_as(
        "WITH picked AS (
             SELECT id, state = $4 AS expired,
                    CASE state WHEN $4 THEN locked_until ELSE available_at END AS since
             FROM tasks
             WHERE tenant = $1 AND topic = ANY($2)
               AND ((state = $3 AND available_at <= sutra_now())
                    OR (state = $4 AND locked_until <= sutra_now()))
             ORDER BY since, id
             LIMIT $5
             FOR UPDATE SKIP LOCKED),
         locked AS (
             UPDATE tasks
             SET state = $4, lock_token = gen_random_uuid()::text,
                 locked_until = sutra_after(COALESCE($6, lock_us)), worker = $7,
                 attempt = attempt + picked.expired::int, updated_at = sutra_now()
             FROM picked WHERE tasks.id = picked.id
             RETURNING tasks.id, instance, topic, input, attempt, lock_token, locked_until,
                       picked.since)
         SELECT * FROM locked ORDER BY since, id",
    )
    .bind(&poll.tenant)
    .bind(&poll.topics)
    .bind(TaskState::Available.as_str())
    .bind(TaskState::Locked.as_str())
    .bind(i64::from(poll.max))
    .bind(poll.lock.map(duration_micros))
    .bind(&poll.worker)
    .fetch_all(&mut *tx)
    .await
    .map_err(db)?;
    tx.commit().await.map_err(db)?;
    let tasks = locked
        .into_iter()
        .map(LockedRow::decode)
        .collect::<Result<_>>()?;
    Ok(Polled { tasks, due_now })
}

/// A task as a poll locked it.
#[derive(sqlx::FromRow)]
struct LockedRow {
    id: String,
    instance: String,
    topic: String,
    input: Json<Value>,
    attempt: i64,
    lock_token: String,
    locked_until: i64,
}

impl LockedRow {
    fn decode(self) -> Result<LockedTask> {
        Ok(LockedTask {
            id: self.id,
            instance: self.instance,
            topic: self.topic,
            input: self.input.0,
            attempt: unsigned(self.attempt, "a task attempt")?,
            lock_token: self.lock_token,
            lock_expires_at: timestamp(self.locked_until)?,
        })
    }
}

/// Turns terminal every task of the topics whose last attempt's lock expired, recording the
/// exhausted delivery of each: a worker that keeps dying must not keep a task alive forever. A
/// task another poll is exhausting right now is skipped: that poll records its delivery.
async fn exhaust_expired(
    conn: &mut PgConnection,
    tenant: &str,
    topics: &[String],
) -> Result<Vec<DeliveryId>> {
    let expired: Vec<(String, i64, Option<String>, i64)> = sqlx::query_as(
        "WITH expired AS (
             SELECT id FROM tasks
             WHERE tenant = $1 AND topic = ANY($2)
               AND state = $4 AND locked_until <= sutra_now() AND attempt > retries
             FOR UPDATE SKIP LOCKED)
         UPDATE tasks
         SET state = $3, lock_token = NULL, locked_until = NULL, updated_at = sutra_now()
         FROM expired WHERE tasks.id = expired.id
         RETURNING instance, park, worker, attempt",
    )
    .bind(tenant)
    .bind(topics)
    .bind(TaskState::Terminal.as_str())
    .bind(TaskState::Locked.as_str())
    .fetch_all(&mut *conn)
    .await
    .map_err(db)?;
    let mut due_now = Vec::with_capacity(expired.len());
    for (instance, park, worker, attempt) in expired {
        let TaskError { code, message } =
            lock_expired(worker.as_deref(), unsigned(attempt, "a task attempt")?);
        let target = Target {
            tenant,
            instance: &instance,
            park: park_id(park)?,
        };
        let exhausted = DeliveryKind::TaskExhausted { code, message };
        due_now.push(target.deliver(conn, &exhausted).await?);
    }
    Ok(due_now)
}

pub async fn next_at(pool: &PgPool, tenant: &str, topics: &[String]) -> Result<Option<Timestamp>> {
    let mut tx = begin(pool, Scope::Tenant(tenant)).await?;
    let earliest: Option<i64> = sqlx::query_scalar(
        "SELECT MIN(CASE state WHEN $4 THEN locked_until ELSE available_at END) FROM tasks
         WHERE tenant = $1 AND topic = ANY($2) AND state IN ($3, $4)",
    )
    .bind(tenant)
    .bind(topics)
    .bind(TaskState::Available.as_str())
    .bind(TaskState::Locked.as_str())
    .fetch_one(&mut *tx)
    .await
    .map_err(db)?;
    tx.commit().await.map_err(db)?;
    earliest.map(timestamp).transpose()
}

pub async fn complete(
    pool: &PgPool,
    tenant: &str,
    id: &str,
    lock_token: &str,
    output: &Value,
) -> Result<()> {
    let mut tx = begin(pool, Scope::Tenant(tenant)).await?;
    let held = held(&mut tx, tenant, id, lock_token).await?;
    unlock(&mut tx, id, TaskState::Completed).await?;
    let completed = DeliveryKind::TaskCompleted {
        output: output.clone(),
    };
    held.target(tenant).deliver(&mut tx, &completed).await?;
    tx.commit().await.map_err(db)
}

pub async fn fail(
    pool: &PgPool,
    tenant: &str,
    id: &str,
    lock_token: &str,
    failure: &TaskFailure,
) -> Result<TaskState> {
    let mut tx = begin(pool, Scope::Tenant(tenant)).await?;
    let held = held(&mut tx, tenant, id, lock_token).await?;
    let state = after_failure(held.attempt, held.retries, failure.retry);
    let TaskError { code, message } = failure.error.clone();
    let outcome = match state {
        TaskState::Available => None,
        TaskState::Failed => Some(DeliveryKind::TaskFailed { code, message }),
        _ => Some(DeliveryKind::TaskExhausted { code, message }),
    };
    match outcome {
        None => {
            let backoff = retry_backoff(held.backoff, held.attempt);
            retry_after(&mut tx, id, backoff).await?;
        }
        Some(outcome) => {
            unlock(&mut tx, id, state).await?;
            held.target(tenant).deliver(&mut tx, &outcome).await?;
        }
    }
    tx.commit().await.map_err(db)?;
    Ok(state)
}

pub async fn extend(
    pool: &PgPool,
    tenant: &str,
    id: &str,
    lock_token: &str,
    lock: SignedDuration,
) -> Result<Timestamp> {
    let mut tx = begin(pool, Scope::Tenant(tenant)).await?;
    held(&mut tx, tenant, id, lock_token).await?;
    let until: i64 = sqlx::query_scalar(
        "UPDATE tasks SET locked_until = sutra_after($2), updated_at = sutra_now() WHERE id = $1
         RETURNING locked_until",
    )
    .bind(id)
    .bind(duration_micros(lock))
    .fetch_one(&mut *tx)
    .await
    .map_err(db)?;
    tx.commit().await.map_err(db)?;
    timestamp(until)
}

pub async fn of_instance(pool: &PgPool, tenant: &str, instance: &str) -> Result<Vec<TaskRecord>> {
    let mut tx = begin(pool, Scope::Tenant(tenant)).await?;
    let rows: Vec<TaskRow> = sqlx::query_as(concat!(
        "SELECT ",
        task_columns!(),
        " FROM tasks WHERE tenant = $1 AND instance = $2 ORDER BY park"
    ))
    .bind(tenant)
    .bind(instance)
    .fetch_all(&mut *tx)
    .await
    .map_err(db)?;
    tx.commit().await.map_err(db)?;
    rows.into_iter().map(TaskRow::decode).collect()
}

pub async fn list(pool: &PgPool, tenant: &str, filter: &TaskFilter) -> Result<Vec<TaskRecord>> {
    // Only the filters given appear in the SQL, so that each combination gets a plan (and a
    // cached statement) that uses its index.
    let mut sql = QueryBuilder::<Postgres>::new(concat!(
        "SELECT ",
        task_columns!(),
        " FROM tasks WHERE tenant = "
    ));
    sql.push_bind(tenant.to_owned());
    if let Some(topic) = &filter.topic {
        sql.push(" AND topic = ").push_bind(topic.clone());
    }
    if let Some(state) = filter.state {
        sql.push(" AND state = ").push_bind(state.as_str());
    }
    if let Some(after) = &filter.after {
        sql.push(" AND id > ").push_bind(after.clone());
    }
    sql.push(" ORDER BY id");
    if filter.limit > 0 {
        sql.push(" LIMIT ").push_bind(i64::from(filter.limit));
    }
    let mut tx = begin(pool, Scope::Tenant(tenant)).await?;
    let rows: Vec<TaskRow> = sql.build_query_as().fetch_all(&mut *tx).await.map_err(db)?;
    tx.commit().await.map_err(db)?;
    rows.into_iter().map(TaskRow::decode).collect()
}

/// A task whose lock a worker's token holds.
struct Held {
    instance: String,
    park: ParkId,
    attempt: u32,
    retries: u32,
    backoff: SignedDuration,
}

impl Held {
    fn target<'a>(&'a self, tenant: &'a str) -> Target<'a> {
        Target {
            tenant,
            instance: &self.instance,
            park: self.park,
        }
    }
}

#[derive(sqlx::FromRow)]
struct HeldRow {
    instance: String,
    park: i64,
    state: String,
    lock_token: Option<String>,
    locked_until: Option<i64>,
    attempt: i64,
    retries: i64,
    backoff_us: i64,
    now: i64,
}

/// Reads and locks the task inside the transaction and checks that `lock_token` holds it now, by
/// the database's clock. A refusal returns before anything is written.
async fn held(conn: &mut PgConnection, tenant: &str, id: &str, lock_token: &str) -> Result<Held> {
    let row: Option<HeldRow> = sqlx::query_as(
        "SELECT instance, park, state, lock_token, locked_until, attempt, retries, backoff_us,
                sutra_now() AS now
         FROM tasks WHERE tenant = $1 AND id = $2
         FOR UPDATE",
    )
    .bind(tenant)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await
    .map_err(db)?;
    let row = row.ok_or_else(|| Error::TaskNotFound(id.to_owned()))?;
    let lock = TaskLock {
        state: TaskState::parse(&row.state).ok_or_else(|| corrupt("a task state", &row.state))?,
        token: row.lock_token.as_deref(),
        until: row.locked_until.map(timestamp).transpose()?,
    };
    lock.check(id, lock_token, timestamp(row.now)?)?;
    Ok(Held {
        park: park_id(row.park)?,
        attempt: unsigned(row.attempt, "a task attempt")?,
        retries: unsigned(row.retries, "a task's retries")?,
        backoff: SignedDuration::from_micros(row.backoff_us),
        instance: row.instance,
    })
}

/// The lock ends: the task leaves `locked` for `state`.
async fn unlock(conn: &mut PgConnection, id: &str, state: TaskState) -> Result<()> {
    sqlx::query(
        "UPDATE tasks SET state = $2, lock_token = NULL, locked_until = NULL,
                          updated_at = sutra_now()
         WHERE id = $1",
    )
    .bind(id)
    .bind(state.as_str())
    .execute(conn)
    .await
    .map_err(db)?;
    Ok(())
}

/// The lock ends with a failed attempt within the budget: the next attempt is available once
/// `backoff` has passed.
async fn retry_after(conn: &mut PgConnection, id: &str, backoff: SignedDuration) -> Result<()> {
    sqlx::query(
        "UPDATE tasks
         SET state = $2, lock_token = NULL, locked_until = NULL, attempt = attempt + 1,
             available_at = sutra_after($3), updated_at = sutra_now()
         WHERE id = $1",
    )
    .bind(id)
    .bind(TaskState::Available.as_str())
    .bind(duration_micros(backoff))
    .execute(conn)
    .await
    .map_err(db)?;
    Ok(())
}

/// The park a task's outcome is delivered to.
struct Target<'a> {
    tenant: &'a str,
    instance: &'a str,
    park: ParkId,
}

impl Target<'_> {
    /// Records the outcome as a delivery due now, in the caller's transaction.
    async fn deliver(&self, conn: &mut PgConnection, kind: &DeliveryKind) -> Result<DeliveryId> {
        let row = NewDeliveryRow {
            tenant: self.tenant,
            instance: self.instance,
            park: self.park,
            kind,
            due_at: None,
        };
        insert_delivery(conn, row).await
    }
}

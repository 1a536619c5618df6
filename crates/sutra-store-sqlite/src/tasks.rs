//! The pull surface (SPEC §5.5) on SQLite: polls, completions, failures and extensions of
//! external tasks, and their listings. Steps write and cancel the task rows (see
//! [`crate::commit`]).
//!
//! PostgreSQL will poll with `FOR UPDATE SKIP LOCKED`; here SQLite's single writer plays that
//! role: every operation is one `BEGIN IMMEDIATE` transaction, so two pollers (two replicas on
//! one file) are serialized and the second sees the first's locks. Inside it, the task row is
//! read, judged by the rules `sutra_store` gives every backend ([`TaskLock::check`],
//! [`after_failure`], [`retry_backoff`]), and written together with the delivery that carries its
//! outcome to the instance: a completion and its delivery are one fact.

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use sqlx::{QueryBuilder, Sqlite, SqliteConnection, SqlitePool};
use sutra_core::snapshot::ParkId;
use sutra_core::step::TaskError;
use sutra_store::{
    DeliveryId, DeliveryKind, Error, LockedTask, NewDelivery, Polled, Result, TaskFailure,
    TaskFilter, TaskLock, TaskPoll, TaskRecord, TaskState, after_failure, lock_expired,
    retry_backoff,
};

use crate::codec::{corrupt, db, json, micros, now, park_id, timestamp, unsigned};
use crate::rows::TaskRow;
use crate::statements::{begin_write, insert_delivery};

/// The columns of a [`TaskRow`].
macro_rules! task_columns {
    () => {
        "id, instance, park, topic, input, state, attempt, retries, worker, locked_until,
         available_at, created_at"
    };
}

pub async fn poll(pool: &SqlitePool, poll: &TaskPoll) -> Result<Polled> {
    let now = now();
    let topics = topics_json(&poll.topics);
    let mut tx = begin_write(pool).await?;
    // First, so that what remains expired is within its budget and may be handed out.
    let due_now = exhaust_expired(&mut tx, &poll.tenant, &topics, now).await?;
    let candidates: Vec<Candidate> = sqlx::query_as(
        "SELECT id, instance, topic, input, state, attempt, lock_us FROM tasks
         WHERE tenant = ?1 AND topic IN (SELECT value FROM json_each(?2))
           AND ((state = ?3 AND available_at <= ?5) OR (state = ?4 AND locked_until <= ?5))
         ORDER BY CASE state WHEN ?4 THEN locked_until ELSE available_at END, id
         LIMIT ?6",
    )
    .bind(&poll.tenant)
    .bind(&topics)
    .bind(TaskState::Available.as_str())
    .bind(TaskState::Locked.as_str())
    .bind(micros(now))
    .bind(poll.max)
    .fetch_all(&mut *tx)
    .await
    .map_err(db)?;
    let mut tasks = Vec::with_capacity(candidates.len());
    for candidate in candidates {
        tasks.push(lock(&mut tx, candidate, poll, now).await?);
    }
    tx.commit().await.map_err(db)?;
    Ok(Polled { tasks, due_now })
}

/// A task a poll may lock.
#[derive(sqlx::FromRow)]
struct Candidate {
    id: String,
    instance: String,
    topic: String,
    input: String,
    state: String,
    attempt: i64,
    lock_us: i64,
}

async fn lock(
    conn: &mut SqliteConnection,
    candidate: Candidate,
    poll: &TaskPoll,
    now: Timestamp,
) -> Result<LockedTask> {
    // A lock that expired was a failed attempt: this lock is the next one.
    let expired = candidate.state == TaskState::Locked.as_str();
    let attempt = candidate.attempt + i64::from(expired);
    let lock = poll
        .lock
        .unwrap_or(SignedDuration::from_micros(candidate.lock_us));
    let until = later(now, lock)?;
    let token = uuid::Uuid::new_v4().to_string();
    sqlx::query(
        "UPDATE tasks
         SET state = ?2, lock_token = ?3, locked_until = ?4, worker = ?5, attempt = ?6,
             updated_at = ?7
         WHERE id = ?1",
    )
    .bind(&candidate.id)
    .bind(TaskState::Locked.as_str())
    .bind(&token)
    .bind(micros(until))
    .bind(&poll.worker)
    .bind(attempt)
    .bind(micros(now))
    .execute(&mut *conn)
    .await
    .map_err(db)?;
    Ok(LockedTask {
        input: json(&candidate.input)?,
        id: candidate.id,
        instance: candidate.instance,
        topic: candidate.topic,
        attempt: unsigned(attempt, "a task attempt")?,
        lock_token: token,
        lock_expires_at: until,
    })
}

/// Turns terminal every task of the topics whose last attempt's lock expired, recording the
/// exhausted delivery of each: a worker that keeps dying must not keep a task alive forever.
async fn exhaust_expired(
    conn: &mut SqliteConnection,
    tenant: &str,
    topics: &str,
    now: Timestamp,
) -> Result<Vec<DeliveryId>> {
    let expired: Vec<(String, i64, Option<String>, i64)> = sqlx::query_as(
        "UPDATE tasks SET state = ?3, lock_token = NULL, locked_until = NULL, updated_at = ?5
         WHERE tenant = ?1 AND topic IN (SELECT value FROM json_each(?2))
           AND state = ?4 AND locked_until <= ?5 AND attempt > retries
         RETURNING instance, park, worker, attempt",
    )
    .bind(tenant)
    .bind(topics)
    .bind(TaskState::Terminal.as_str())
    .bind(TaskState::Locked.as_str())
    .bind(micros(now))
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
        due_now.push(target.deliver(conn, exhausted, now).await?);
    }
    Ok(due_now)
}

pub async fn next_at(
    pool: &SqlitePool,
    tenant: &str,
    topics: &[String],
) -> Result<Option<Timestamp>> {
    let earliest: Option<i64> = sqlx::query_scalar(
        "SELECT MIN(CASE state WHEN ?4 THEN locked_until ELSE available_at END) FROM tasks
         WHERE tenant = ?1 AND topic IN (SELECT value FROM json_each(?2)) AND state IN (?3, ?4)",
    )
    .bind(tenant)
    .bind(topics_json(topics))
    .bind(TaskState::Available.as_str())
    .bind(TaskState::Locked.as_str())
    .fetch_one(pool)
    .await
    .map_err(db)?;
    earliest.map(timestamp).transpose()
}

pub async fn complete(
    pool: &SqlitePool,
    tenant: &str,
    id: &str,
    lock_token: &str,
    output: &Value,
) -> Result<()> {
    let now = now();
    let mut tx = begin_write(pool).await?;
    let held = held(&mut tx, tenant, id, lock_token, now).await?;
    unlock(&mut tx, id, TaskState::Completed, now).await?;
    let completed = DeliveryKind::TaskCompleted {
        output: output.clone(),
    };
    held.target(tenant).deliver(&mut tx, completed, now).await?;
    tx.commit().await.map_err(db)
}

pub async fn fail(
    pool: &SqlitePool,
    tenant: &str,
    id: &str,
    lock_token: &str,
    failure: &TaskFailure,
) -> Result<TaskState> {
    let now = now();
    let mut tx = begin_write(pool).await?;
    let held = held(&mut tx, tenant, id, lock_token, now).await?;
    let state = after_failure(held.attempt, held.retries, failure.retry);
    let TaskError { code, message } = failure.error.clone();
    let outcome = match state {
        TaskState::Available => None,
        TaskState::Failed => Some(DeliveryKind::TaskFailed { code, message }),
        // `after_failure` answers nothing else but terminal.
        _ => Some(DeliveryKind::TaskExhausted { code, message }),
    };
    match outcome {
        None => {
            let at = later(now, retry_backoff(held.backoff, held.attempt))?;
            retry_at(&mut tx, id, at, now).await?;
        }
        Some(outcome) => {
            unlock(&mut tx, id, state, now).await?;
            held.target(tenant).deliver(&mut tx, outcome, now).await?;
        }
    }
    tx.commit().await.map_err(db)?;
    Ok(state)
}

pub async fn extend(
    pool: &SqlitePool,
    tenant: &str,
    id: &str,
    lock_token: &str,
    lock: SignedDuration,
) -> Result<Timestamp> {
    let now = now();
    let mut tx = begin_write(pool).await?;
    held(&mut tx, tenant, id, lock_token, now).await?;
    let until = later(now, lock)?;
    sqlx::query("UPDATE tasks SET locked_until = ?2, updated_at = ?3 WHERE id = ?1")
        .bind(id)
        .bind(micros(until))
        .bind(micros(now))
        .execute(&mut *tx)
        .await
        .map_err(db)?;
    tx.commit().await.map_err(db)?;
    Ok(until)
}

pub async fn of_instance(
    pool: &SqlitePool,
    tenant: &str,
    instance: &str,
) -> Result<Vec<TaskRecord>> {
    let rows: Vec<TaskRow> = sqlx::query_as(concat!(
        "SELECT ",
        task_columns!(),
        " FROM tasks WHERE tenant = ?1 AND instance = ?2 ORDER BY park"
    ))
    .bind(tenant)
    .bind(instance)
    .fetch_all(pool)
    .await
    .map_err(db)?;
    rows.into_iter().map(TaskRow::decode).collect()
}

pub async fn list(pool: &SqlitePool, tenant: &str, filter: &TaskFilter) -> Result<Vec<TaskRecord>> {
    // Only the filters given appear in the SQL, so that SQLite can use the index of each.
    let mut sql = QueryBuilder::<Sqlite>::new(concat!(
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
        sql.push(" LIMIT ").push_bind(filter.limit);
    }
    let rows: Vec<TaskRow> = sql.build_query_as().fetch_all(pool).await.map_err(db)?;
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
}

/// Reads the task inside the write transaction and checks that `lock_token` holds it. A refusal
/// returns before anything is written.
async fn held(
    conn: &mut SqliteConnection,
    tenant: &str,
    id: &str,
    lock_token: &str,
    now: Timestamp,
) -> Result<Held> {
    let row: Option<HeldRow> = sqlx::query_as(
        "SELECT instance, park, state, lock_token, locked_until, attempt, retries, backoff_us
         FROM tasks WHERE tenant = ?1 AND id = ?2",
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
    lock.check(id, lock_token, now)?;
    Ok(Held {
        park: park_id(row.park)?,
        attempt: unsigned(row.attempt, "a task attempt")?,
        retries: unsigned(row.retries, "a task's retries")?,
        backoff: SignedDuration::from_micros(row.backoff_us),
        instance: row.instance,
    })
}

/// The lock ends: the task leaves `locked` for `state`.
async fn unlock(
    conn: &mut SqliteConnection,
    id: &str,
    state: TaskState,
    now: Timestamp,
) -> Result<()> {
    sqlx::query(
        "UPDATE tasks SET state = ?2, lock_token = NULL, locked_until = NULL, updated_at = ?3
         WHERE id = ?1",
    )
    .bind(id)
    .bind(state.as_str())
    .bind(micros(now))
    .execute(conn)
    .await
    .map_err(db)?;
    Ok(())
}

/// The lock ends with a failed attempt within the budget: the next attempt is available at `at`.
async fn retry_at(
    conn: &mut SqliteConnection,
    id: &str,
    at: Timestamp,
    now: Timestamp,
) -> Result<()> {
    sqlx::query(
        "UPDATE tasks
         SET state = ?2, lock_token = NULL, locked_until = NULL, attempt = attempt + 1,
             available_at = ?3, updated_at = ?4
         WHERE id = ?1",
    )
    .bind(id)
    .bind(TaskState::Available.as_str())
    .bind(micros(at))
    .bind(micros(now))
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
    async fn deliver(
        &self,
        conn: &mut SqliteConnection,
        kind: DeliveryKind,
        now: Timestamp,
    ) -> Result<DeliveryId> {
        let delivery = NewDelivery {
            tenant: self.tenant.to_owned(),
            instance: self.instance.to_owned(),
            park: self.park,
            kind,
            due_at: now,
        };
        insert_delivery(conn, &delivery, now).await
    }
}

/// `now + duration`, to the microsecond the store keeps, so that what a worker is told is what a
/// listing reads back; saturating at the end of time.
fn later(now: Timestamp, duration: SignedDuration) -> Result<Timestamp> {
    let at = now.saturating_add(duration).unwrap_or(Timestamp::MAX);
    timestamp(micros(at))
}

/// The topics as a JSON array, for `json_each`: one statement whatever their number.
fn topics_json(topics: &[String]) -> String {
    Value::from(topics.to_vec()).to_string()
}

//! The pull surface (SPEC §5.5) on SQLite: the statements of the shared scripts. Steps write and cancel the task rows (see [`crate::commit`]).
//!
//! PostgreSQL polls with `FOR UPDATE SKIP LOCKED`; here SQLite's single writer plays that role:
//! every operation is one `BEGIN IMMEDIATE` transaction, so two pollers (two replicas on one
//! file) are serialized and the second sees the first's locks, and a task row read inside one is
//! held by it until it ends. The clock is the process's, read when the transaction begins.

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use sqlx::types::Json;
use sutra_store::{LockedTask, Result, TaskPoll, TaskState};
use sutra_store_sql::TaskStatements;
use sutra_store_sql::rows::{CompletedRow, ExpiredRow, HeldRow};

use crate::codec::{db, later, micros, unsigned};
use crate::statements::{Session, Write};

/// A task a poll may lock.
#[derive(sqlx::FromRow)]
struct Candidate {
    id: String,
    instance: String,
    topic: String,
    input: Json<Value>,
    state: String,
    attempt: i64,
    lock_us: i64,
}

impl TaskStatements for Session {
    async fn exhaust_expired(&mut self, tenant: &str) -> Result<Vec<ExpiredRow>> {
        let tx = self.write().await?;
        let now = micros(tx.now());
        sqlx::query_as(
            "UPDATE tasks
             SET state = 'terminal', lock_token = NULL, locked_until = NULL, updated_at = ?2
             WHERE tenant = ?1 AND state = 'locked' AND locked_until <= ?2 AND attempt > retries
             RETURNING instance, park, worker, attempt",
        )
        .bind(tenant)
        .bind(now)
        .fetch_all(tx.connection())
        .await
        .map_err(db)
    }

    /// The candidates in the order they are handed out, then one update each: a lock token is
    /// minted here, not by the database.
    async fn lock_tasks(&mut self, poll: &TaskPoll) -> Result<(Vec<LockedTask>, Option<i64>)> {
        let tx = self.write().await?;
        let now = tx.now();
        let candidates: Vec<Candidate> = sqlx::query_as(
            "SELECT id, instance, topic, input, state, attempt, lock_us FROM tasks
             WHERE tenant = ?1 AND topic IN (SELECT value FROM json_each(?2))
               AND ((state = 'available' AND available_at <= ?3)
                    OR (state = 'locked' AND locked_until <= ?3 AND attempt <= retries))
             ORDER BY CASE state WHEN 'locked' THEN locked_until ELSE available_at END, id
             LIMIT ?4",
        )
        .bind(&poll.tenant)
        .bind(Json(&poll.topics))
        .bind(micros(now))
        .bind(poll.max)
        .fetch_all(tx.connection())
        .await
        .map_err(db)?;
        let mut tasks = Vec::with_capacity(candidates.len());
        for candidate in candidates {
            tasks.push(tx.lock(candidate, poll, now).await?);
        }
        let next_at = match tasks.len() < poll.max as usize {
            true => self.next_task_at(&poll.tenant, &poll.topics).await?,
            false => None,
        };
        Ok((tasks, next_at))
    }

    async fn held_task(&mut self, tenant: &str, id: &str) -> Result<Option<(HeldRow, Timestamp)>> {
        let tx = self.write().await?;
        let now = tx.now();
        let row: Option<HeldRow> = sqlx::query_as(
            "SELECT instance, park, state, lock_token, locked_until, attempt, retries, backoff_us
             FROM tasks WHERE tenant = ?1 AND id = ?2",
        )
        .bind(tenant)
        .bind(id)
        .fetch_optional(tx.connection())
        .await
        .map_err(db)?;
        Ok(row.map(|row| (row, now)))
    }

    async fn complete_locked(
        &mut self,
        tenant: &str,
        id: &str,
        lock_token: &str,
    ) -> Result<Option<CompletedRow>> {
        let tx = self.write().await?;
        let now = micros(tx.now());
        sqlx::query_as(
            "UPDATE tasks SET state = 'completed', lock_token = NULL, locked_until = NULL,
                              updated_at = ?4
             WHERE tenant = ?1 AND id = ?2
               AND state = 'locked' AND lock_token = ?3 AND locked_until > ?4
             RETURNING instance, park",
        )
        .bind(tenant)
        .bind(id)
        .bind(lock_token)
        .bind(now)
        .fetch_optional(tx.connection())
        .await
        .map_err(db)
    }

    async fn end_lock(&mut self, id: &str, state: TaskState) -> Result<()> {
        let tx = self.write().await?;
        let query = sqlx::query(
            "UPDATE tasks SET state = ?2, lock_token = NULL, locked_until = NULL, updated_at = ?3
             WHERE id = ?1",
        )
        .bind(id)
        .bind(state.as_str())
        .bind(micros(tx.now()));
        tx.execute(query).await.map(drop)
    }

    async fn reopen_task(&mut self, id: &str, spent: u32, after: SignedDuration) -> Result<()> {
        let tx = self.write().await?;
        let query = sqlx::query(
            "UPDATE tasks
             SET state = ?2, lock_token = NULL, locked_until = NULL, attempt = attempt + ?5,
                 available_at = ?3, updated_at = ?4
             WHERE id = ?1",
        )
        .bind(id)
        .bind(TaskState::Available.as_str())
        .bind(micros(later(tx.now(), after)?))
        .bind(micros(tx.now()))
        .bind(i64::from(spent));
        tx.execute(query).await.map(drop)
    }

    async fn extend_lock(&mut self, id: &str, lock: SignedDuration) -> Result<Timestamp> {
        let tx = self.write().await?;
        let until = later(tx.now(), lock)?;
        let query =
            sqlx::query("UPDATE tasks SET locked_until = ?2, updated_at = ?3 WHERE id = ?1")
                .bind(id)
                .bind(micros(until))
                .bind(micros(tx.now()));
        tx.execute(query).await?;
        Ok(until)
    }

    async fn next_task_at(&mut self, tenant: &str, topics: &[String]) -> Result<Option<i64>> {
        sqlx::query_scalar(
            // The aggregate, not the two-argument `min`, which is NULL when either side is.
            "SELECT MIN(at) FROM (
                 SELECT MIN(available_at) AS at FROM tasks
                 WHERE tenant = ?1 AND topic IN (SELECT value FROM json_each(?2))
                   AND state = 'available'
                 UNION ALL
                 SELECT MIN(locked_until) FROM tasks
                 WHERE tenant = ?1 AND topic IN (SELECT value FROM json_each(?2))
                   AND state = 'locked')",
        )
        .bind(tenant)
        .bind(Json(topics))
        .fetch_one(self.connection().await?)
        .await
        .map_err(db)
    }
}

impl Write {
    async fn lock(
        &mut self,
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
        let query = sqlx::query(
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
        .bind(micros(now));
        self.execute(query).await?;
        Ok(LockedTask {
            input: candidate.input.0,
            id: candidate.id,
            instance: candidate.instance,
            topic: candidate.topic,
            attempt: unsigned(attempt, "a task attempt")?,
            lock_token: token,
            lock_expires_at: until,
        })
    }
}

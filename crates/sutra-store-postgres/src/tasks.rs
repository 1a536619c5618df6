//! The pull surface (SPEC §5.5) on PostgreSQL: the statements of the shared scripts. Steps write and cancel the task rows (see [`crate::commit`]).
//!
//! Workers poll every replica at once. A poll picks its tasks `FOR UPDATE SKIP LOCKED`: a task
//! another poll is taking right now is skipped rather than waited for, and one it took and
//! committed no longer matches (a locked row is re-checked against its latest version), so no
//! task is handed to two pollers. A worker's answer reads its task `FOR UPDATE` — ordered with a
//! poll retaking an expired lock and with a step cancelling the task — against the database's
//! clock. Lock deadlines and backoffs are `sutra_after(span)`: the database's clock too, so
//! workers on different replicas are judged by one clock.

use std::sync::LazyLock;

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use sqlx::types::Json;
use sutra_store::codec::unsigned;
use sutra_store::{LockedTask, Result, TaskPoll, TaskState};
use sutra_store_sql::TaskStatements;
use sutra_store_sql::rows::{CompletedRow, ExpiredRow, HeldRow};

use crate::codec::{db, duration_micros, timestamp};
use crate::statements::Scoped;
use crate::test_switches;

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

/// A poll's answer row: one of its locks, or none when it locked nothing, with the next
/// availability of a short poll.
struct PolledRow {
    next_at: Option<i64>,
    locked: Option<LockedRow>,
}

impl<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> for PolledRow {
    fn from_row(row: &'r sqlx::postgres::PgRow) -> sqlx::Result<PolledRow> {
        use sqlx::Row;
        let next_at = row.try_get("next_at")?;
        let id: Option<String> = row.try_get("id")?;
        let locked = match id {
            Some(_) => Some(LockedRow::from_row(row)?),
            None => None,
        };
        Ok(PolledRow { next_at, locked })
    }
}

/// A task row read for a worker's answer, and the database's clock at the read.
#[derive(sqlx::FromRow)]
struct HeldNow {
    #[sqlx(flatten)]
    task: HeldRow,
    now: i64,
}

impl TaskStatements for Scoped {
    /// A task another transaction is exhausting (or a poll is locking) right now is skipped:
    /// that transaction decides it.
    async fn exhaust_expired(&mut self, tenant: &str) -> Result<Vec<ExpiredRow>> {
        sqlx::query_as(
            "WITH expired AS (
                 SELECT id FROM tasks
                 WHERE tenant = $1
                   AND state = 'locked' AND locked_until <= sutra_now() AND attempt > retries
                 FOR UPDATE SKIP LOCKED)
             UPDATE tasks
             SET state = 'terminal', lock_token = NULL, locked_until = NULL,
                 updated_at = sutra_now()
             FROM expired WHERE tasks.id = expired.id
             RETURNING instance, park, worker, attempt",
        )
        .bind(tenant)
        .fetch_all(self.connection())
        .await
        .map_err(db)
    }

    /// One statement: an expired lock was a failed attempt, so the lock taken now is the next
    /// one, if the budget has one left. Each kind of live task is read from its own partial
    /// index, oldest first, and locked `SKIP LOCKED` there, so a poll reads the few live rows
    /// rather than every task its topics ever had (one condition over both kinds let the planner
    /// scan them all: ~5 ms a poll after a few thousand tasks, against ~0.3 ms). A row locked
    /// beyond the batch is left as it was. The outer ORDER BY gives the batch the order it was
    /// picked in, which `RETURNING` alone would not.
    ///
    /// A short poll's next availability is read in the same statement, which sees the rows as
    /// they were before its own locks: the tasks it picked are left out of the snapshot's
    /// minimums and counted by their new deadlines instead. A row it skipped because another
    /// transaction held it still counts as available now, so the next poll looks.
    async fn lock_tasks(&mut self, poll: &TaskPoll) -> Result<(Vec<LockedTask>, Option<i64>)> {
        static SQL: LazyLock<String> = LazyLock::new(|| {
            test_switches::lock_tasks(
                "WITH available AS (
                 SELECT id, false AS expired, available_at AS since FROM tasks
                 WHERE tenant = $1 AND topic = ANY($2)
                   AND state = 'available' AND available_at <= sutra_now()
                 ORDER BY available_at, id
                 LIMIT $3
                 FOR UPDATE SKIP LOCKED),
             expired AS (
                 SELECT id, true AS expired, locked_until AS since FROM tasks
                 WHERE tenant = $1 AND topic = ANY($2)
                   AND state = 'locked' AND locked_until <= sutra_now() AND attempt <= retries
                 ORDER BY locked_until, id
                 LIMIT $3
                 FOR UPDATE SKIP LOCKED),
             picked AS (
                 SELECT * FROM available UNION ALL SELECT * FROM expired
                 ORDER BY since, id
                 LIMIT $3),
             locked AS (
                 UPDATE tasks
                 SET state = 'locked', lock_token = gen_random_uuid()::text,
                     locked_until = sutra_after(COALESCE($4, lock_us)), worker = $5,
                     attempt = attempt + picked.expired::int, updated_at = sutra_now()
                 FROM picked WHERE tasks.id = picked.id
                 RETURNING tasks.id, instance, topic, input, attempt, lock_token, locked_until,
                           picked.since),
             next AS (
                 SELECT CASE WHEN (SELECT count(*) FROM picked) < $3 THEN LEAST(
                     (SELECT MIN(available_at) FROM tasks
                      WHERE tenant = $1 AND topic = ANY($2) AND state = 'available'
                        AND id NOT IN (SELECT id FROM picked)),
                     (SELECT MIN(locked_until) FROM tasks
                      WHERE tenant = $1 AND topic = ANY($2) AND state = 'locked'
                        AND id NOT IN (SELECT id FROM picked)),
                     (SELECT MIN(locked_until) FROM locked)) END AS next_at)
             SELECT next.next_at, locked.id, instance, topic, input, attempt, lock_token,
                    locked_until
             FROM next LEFT JOIN locked ON true
             ORDER BY locked.since, locked.id",
            )
        });
        let rows: Vec<PolledRow> = sqlx::query_as(SQL.as_str())
            .bind(&poll.tenant)
            .bind(&poll.topics)
            .bind(i64::from(poll.max))
            .bind(poll.lock.map(duration_micros))
            .bind(&poll.worker)
            .fetch_all(self.connection())
            .await
            .map_err(db)?;
        let next_at = rows.first().and_then(|row| row.next_at);
        let tasks = rows
            .into_iter()
            .filter_map(|row| row.locked)
            .map(LockedRow::decode)
            .collect::<Result<_>>()?;
        Ok((tasks, next_at))
    }

    async fn held_task(&mut self, tenant: &str, id: &str) -> Result<Option<(HeldRow, Timestamp)>> {
        let row: Option<HeldNow> = sqlx::query_as(
            "SELECT instance, park, state, lock_token, locked_until, attempt, retries, backoff_us,
                    sutra_now() AS now
             FROM tasks WHERE tenant = $1 AND id = $2
             FOR UPDATE",
        )
        .bind(tenant)
        .bind(id)
        .fetch_optional(self.connection())
        .await
        .map_err(db)?;
        row.map(|row| Ok((row.task, timestamp(row.now)?)))
            .transpose()
    }

    /// A worker completing the task concurrently, or a poll retaking its expired lock, holds
    /// the row: this update waits for that transaction, then judges the row's latest version.
    async fn complete_locked(
        &mut self,
        tenant: &str,
        id: &str,
        lock_token: &str,
    ) -> Result<Option<CompletedRow>> {
        sqlx::query_as(
            "UPDATE tasks SET state = 'completed', lock_token = NULL, locked_until = NULL,
                              updated_at = sutra_now()
             WHERE tenant = $1 AND id = $2
               AND state = 'locked' AND lock_token = $3 AND locked_until > sutra_now()
             RETURNING instance, park",
        )
        .bind(tenant)
        .bind(id)
        .bind(lock_token)
        .fetch_optional(self.connection())
        .await
        .map_err(db)
    }

    async fn end_lock(&mut self, id: &str, state: TaskState) -> Result<()> {
        let query = sqlx::query(
            "UPDATE tasks SET state = $2, lock_token = NULL, locked_until = NULL,
                              updated_at = sutra_now()
             WHERE id = $1",
        )
        .bind(id)
        .bind(state.as_str());
        self.execute(query).await.map(drop)
    }

    async fn reopen_task(&mut self, id: &str, spent: u32, after: SignedDuration) -> Result<()> {
        let query = sqlx::query(
            "UPDATE tasks
             SET state = $2, lock_token = NULL, locked_until = NULL, attempt = attempt + $4,
                 available_at = sutra_after($3), updated_at = sutra_now()
             WHERE id = $1",
        )
        .bind(id)
        .bind(TaskState::Available.as_str())
        .bind(duration_micros(after))
        .bind(i64::from(spent));
        self.execute(query).await.map(drop)
    }

    async fn extend_lock(&mut self, id: &str, lock: SignedDuration) -> Result<Timestamp> {
        let until: i64 = sqlx::query_scalar(
            "UPDATE tasks SET locked_until = sutra_after($2), updated_at = sutra_now()
             WHERE id = $1
             RETURNING locked_until",
        )
        .bind(id)
        .bind(duration_micros(lock))
        .fetch_one(self.connection())
        .await
        .map_err(db)?;
        timestamp(until)
    }

    async fn next_task_at(&mut self, tenant: &str, topics: &[String]) -> Result<Option<i64>> {
        sqlx::query_scalar(
            "SELECT LEAST(
                 (SELECT MIN(available_at) FROM tasks
                  WHERE tenant = $1 AND topic = ANY($2) AND state = 'available'),
                 (SELECT MIN(locked_until) FROM tasks
                  WHERE tenant = $1 AND topic = ANY($2) AND state = 'locked'))",
        )
        .bind(tenant)
        .bind(topics)
        .fetch_one(self.connection())
        .await
        .map_err(db)
    }
}

//! A step's commit (SPEC §5.2): one transaction whose first statement decides whether the step
//! may land at all — the fenced release of the claim, or a start's inbox row — followed by every
//! row of the step. Any error returns before the commit, and dropping the transaction rolls it
//! back: a refused step has written nothing.
//!
//! Unlike SQLite, other writers run at the same time (READ COMMITTED). The fenced update holds
//! the instance's row lock to the end, so no claim, sweep or other commit interleaves with the
//! step; the one race left between transactions on different rows — a park and an early message
//! on the same correlation key — is ordered by an advisory lock (see [`StepWriter::lock_waits`]).

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use sqlx::types::Json;
use sutra_core::snapshot::{InstanceInfo, ParkId};
use sutra_core::step::Message;
use sutra_store::{
    Arm, ClaimToken, Committed, DeliveryId, DeliveryKind, Error, InboxEntry, Result, StepCommit,
    TaskState,
};

use crate::codec::{corrupt, db, duration_micros, history_kind, micros, park, signed};
use crate::scope::{Scope, Tx, begin};
use crate::statements::{
    LockOn, NewDeliveryRow, insert_delivery, insert_inbox_unless_consumed, lock,
};

pub async fn commit(pool: &sqlx::PgPool, step: &StepCommit) -> Result<Committed> {
    let instance = &step.snapshot.instance;
    let mut writer = StepWriter {
        tx: begin(pool, Scope::Tenant(&instance.tenant)).await?,
        step,
        instance,
    };
    match &step.claim {
        Some(token) => writer.settle(token).await?,
        None => writer.insert_start().await?,
    }
    writer.lock_waits().await?;
    writer.insert_history().await?;
    for park in &step.disarms {
        writer.disarm(*park).await?;
    }
    let mut due_now = Vec::new();
    for arm in &step.arms {
        due_now.extend(writer.arm(arm).await?);
    }
    writer.insert_outbox().await?;
    if let Some(taken) = step.taken {
        writer.take(taken).await?;
    }
    if step.claim.is_some()
        && let Some(entry) = &step.inbox
    {
        writer.record_consumed(entry).await?;
    }
    writer.tx.commit().await.map_err(db)?;
    Ok(Committed { due_now })
}

/// The fields of an [`Arm::Task`].
struct TaskArm<'a> {
    topic: &'a str,
    input: &'a Value,
    retries: u32,
    backoff: SignedDuration,
    lock: SignedDuration,
}

struct StepWriter<'s> {
    tx: Tx,
    step: &'s StepCommit,
    instance: &'s InstanceInfo,
}

impl StepWriter<'_> {
    /// Writes the snapshot and clears the owner, if and only if the claim is still ours: the
    /// fence makes a holder whose claim lapsed (and was taken) unable to commit. The row lock it
    /// takes is held until the commit.
    async fn settle(&mut self, token: &ClaimToken) -> Result<()> {
        let settled = sqlx::query(
            "UPDATE instances
             SET snapshot = $1, status = $2, owner = NULL, claimed_at = NULL, recoveries = 0,
                 updated_at = sutra_now()
             WHERE tenant = $3 AND id = $4 AND owner = $5 AND fence = $6",
        )
        .bind(Json(self.step.snapshot.to_json()))
        .bind(self.step.snapshot.status.as_str())
        .bind(&self.instance.tenant)
        .bind(&self.instance.id)
        .bind(&token.owner.0)
        .bind(token.fence)
        .execute(&mut *self.tx)
        .await
        .map_err(db)?
        .rows_affected();
        if settled == 0 {
            return Err(Error::ClaimLost);
        }
        Ok(())
    }

    /// Inserts a new, unowned instance, unless another start already consumed its message.
    async fn insert_start(&mut self) -> Result<()> {
        if let Some(entry) = &self.step.inbox {
            let consumed =
                insert_inbox_unless_consumed(&mut self.tx, &self.instance.tenant, entry).await?;
            if let Some(first) = consumed {
                return Err(Error::Duplicate(first));
            }
        }
        sqlx::query(
            "INSERT INTO instances
                 (id, tenant, deployment, version, flow, status, snapshot, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, sutra_now(), sutra_now())",
        )
        .bind(&self.instance.id)
        .bind(&self.instance.tenant)
        .bind(&self.instance.deployment)
        .bind(i64::from(self.instance.version))
        .bind(&self.instance.flow)
        .bind(self.step.snapshot.status.as_str())
        .bind(Json(self.step.snapshot.to_json()))
        .execute(&mut *self.tx)
        .await
        .map_err(db)?;
        Ok(())
    }

    /// Serializes this commit with any `buffer` of a message on a key one of its waits parks on.
    /// Without it, under READ COMMITTED each could miss the other's uncommitted row — the park
    /// its buffered message, `buffer` the park's wait — and the message would sit unmatched.
    /// Taken before the wait is inserted or the buffer read, so whichever transaction comes
    /// second reads after the first committed.
    async fn lock_waits(&mut self) -> Result<()> {
        let tenant = &self.instance.tenant;
        let correlations: Vec<LockOn> = self
            .step
            .arms
            .iter()
            .filter_map(|arm| match arm {
                Arm::Wait { channel, key, .. } => Some(LockOn::Correlation {
                    tenant,
                    channel,
                    key,
                }),
                _ => None,
            })
            .collect();
        lock(&mut self.tx, &correlations).await
    }

    /// The primary key `(instance, seq)` refuses a repeated sequence, failing the whole step.
    /// One statement for every event of the step.
    async fn insert_history(&mut self) -> Result<()> {
        let events = &self.step.history;
        if events.is_empty() {
            return Ok(());
        }
        let mut seqs = Vec::with_capacity(events.len());
        let mut tokens = Vec::with_capacity(events.len());
        for event in events {
            seqs.push(signed(event.seq, "a history sequence")?);
            tokens.push(
                event
                    .token
                    .map(|token| signed(token.0, "a token id"))
                    .transpose()?,
            );
        }
        let ats: Vec<i64> = events.iter().map(|event| micros(event.at)).collect();
        let kinds: Vec<String> = events
            .iter()
            .map(|event| history_kind(event.kind))
            .collect();
        let nodes: Vec<Option<&str>> = events.iter().map(|event| event.node.as_deref()).collect();
        let details: Vec<Json<&Value>> = events.iter().map(|event| Json(&event.detail)).collect();
        sqlx::query(
            "INSERT INTO history (tenant, instance, seq, at, kind, node, token, detail)
             SELECT $1, $2, seq, at, kind, node, token, detail
             FROM unnest($3::bigint[], $4::bigint[], $5::text[], $6::text[], $7::bigint[],
                         $8::jsonb[]) AS event (seq, at, kind, node, token, detail)",
        )
        .bind(&self.instance.tenant)
        .bind(&self.instance.id)
        .bind(seqs)
        .bind(ats)
        .bind(kinds)
        .bind(nodes)
        .bind(tokens)
        .bind(details)
        .execute(&mut *self.tx)
        .await
        .map_err(db)?;
        Ok(())
    }

    /// Resolves every row behind one park of this instance: its task if a worker may still take
    /// it, its wait, and its pending deliveries (timers among them). The task goes first: a
    /// worker completing it concurrently holds its row, so the update waits for that completion
    /// to commit, and the delete that follows — a new statement — then sees and resolves the
    /// delivery the completion wrote.
    async fn disarm(&mut self, park_id: ParkId) -> Result<()> {
        let park = park(park_id)?;
        sqlx::query(
            "UPDATE tasks SET state = $3, updated_at = sutra_now()
             WHERE instance = $1 AND park = $2 AND state IN ($4, $5)",
        )
        .bind(&self.instance.id)
        .bind(park)
        .bind(TaskState::Cancelled.as_str())
        .bind(TaskState::Available.as_str())
        .bind(TaskState::Locked.as_str())
        .execute(&mut *self.tx)
        .await
        .map_err(db)?;
        for resolve in [
            "DELETE FROM waits WHERE instance = $1 AND park = $2",
            "DELETE FROM deliveries WHERE instance = $1 AND park = $2",
        ] {
            sqlx::query(resolve)
                .bind(&self.instance.id)
                .bind(park)
                .execute(&mut *self.tx)
                .await
                .map_err(db)?;
        }
        Ok(())
    }

    /// Writes the row behind a park; returns the delivery of a buffered message it matched.
    async fn arm(&mut self, arm: &Arm) -> Result<Option<DeliveryId>> {
        match arm {
            Arm::Wait { park, channel, key } => self.arm_wait(*park, channel, key).await,
            Arm::Timer { park, due } => {
                self.deliver(*park, &DeliveryKind::Timer, Some(*due))
                    .await?;
                Ok(None)
            }
            Arm::Task {
                park,
                topic,
                input,
                retries,
                backoff,
                lock,
            } => {
                let task = TaskArm {
                    topic,
                    input,
                    retries: *retries,
                    backoff: *backoff,
                    lock: *lock,
                };
                self.arm_task(*park, task).await?;
                Ok(None)
            }
        }
    }

    /// Inserts the correlation alias, then takes the oldest live buffered message for it, in
    /// this same transaction: an early message and the park cannot miss each other. The alias
    /// stays: the relay delivery consumes it like any relay.
    async fn arm_wait(
        &mut self,
        park_id: ParkId,
        channel: &str,
        key: &str,
    ) -> Result<Option<DeliveryId>> {
        let inserted = sqlx::query(
            "INSERT INTO waits (tenant, channel, key, instance, park) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT DO NOTHING",
        )
        .bind(&self.instance.tenant)
        .bind(channel)
        .bind(key)
        .bind(&self.instance.id)
        .bind(park(park_id)?)
        .execute(&mut *self.tx)
        .await
        .map_err(db)?
        .rows_affected();
        if inserted == 0 {
            return Err(Error::AliasTaken {
                channel: channel.to_owned(),
                key: key.to_owned(),
            });
        }
        let early: Option<Json<Value>> = sqlx::query_scalar(
            "DELETE FROM buffered WHERE id = (
                 SELECT id FROM buffered
                 WHERE tenant = $1 AND channel = $2 AND key = $3 AND expires_at > sutra_now()
                 ORDER BY id LIMIT 1)
             RETURNING message",
        )
        .bind(&self.instance.tenant)
        .bind(channel)
        .bind(key)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db)?;
        let Some(Json(early)) = early else {
            return Ok(None);
        };
        let message: Message =
            serde_json::from_value(early).map_err(|e| corrupt("a buffered message", e))?;
        let relay = DeliveryKind::Relay { message };
        self.deliver(park_id, &relay, None).await.map(Some)
    }

    /// Re-arming a park (a restore) replaces its earlier, resolved task row: the task id is
    /// `{instance}:{park}`.
    async fn arm_task(&mut self, park_id: ParkId, task: TaskArm<'_>) -> Result<()> {
        sqlx::query(
            "INSERT INTO tasks (id, tenant, instance, park, topic, input, state, attempt, retries,
                                backoff_us, lock_us, available_at, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8, $9, $10,
                     sutra_now(), sutra_now(), sutra_now())
             ON CONFLICT (id) DO UPDATE SET
                 topic = excluded.topic, input = excluded.input, state = excluded.state,
                 attempt = 1, retries = excluded.retries, backoff_us = excluded.backoff_us,
                 lock_us = excluded.lock_us, lock_token = NULL, locked_until = NULL,
                 available_at = excluded.available_at, updated_at = excluded.updated_at",
        )
        .bind(format!("{}:{park_id}", self.instance.id))
        .bind(&self.instance.tenant)
        .bind(&self.instance.id)
        .bind(park(park_id)?)
        .bind(task.topic)
        .bind(Json(task.input))
        .bind(TaskState::Available.as_str())
        .bind(i64::from(task.retries))
        .bind(duration_micros(task.backoff))
        .bind(duration_micros(task.lock))
        .execute(&mut *self.tx)
        .await
        .map_err(db)?;
        Ok(())
    }

    async fn deliver(
        &mut self,
        park: ParkId,
        kind: &DeliveryKind,
        due_at: Option<Timestamp>,
    ) -> Result<DeliveryId> {
        let row = NewDeliveryRow {
            tenant: &self.instance.tenant,
            instance: &self.instance.id,
            park,
            kind,
            due_at,
        };
        insert_delivery(&mut self.tx, row).await
    }

    async fn insert_outbox(&mut self) -> Result<()> {
        for entry in &self.step.outbox {
            sqlx::query(
                "INSERT INTO outbox (tenant, instance, deployment, version, channel, payload,
                                     message_key, idempotency_key, next_attempt_at, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, sutra_now(), sutra_now())",
            )
            .bind(&self.instance.tenant)
            .bind(&self.instance.id)
            .bind(&self.instance.deployment)
            .bind(i64::from(self.instance.version))
            .bind(&entry.channel)
            .bind(Json(&entry.payload))
            .bind(&entry.message_key)
            .bind(&entry.idempotency_key)
            .execute(&mut *self.tx)
            .await
            .map_err(db)?;
        }
        Ok(())
    }

    /// Consumes the delivery the step applied ("asked is taken").
    async fn take(&mut self, taken: DeliveryId) -> Result<()> {
        sqlx::query("DELETE FROM deliveries WHERE id = $1 AND instance = $2")
            .bind(taken.0)
            .bind(&self.instance.id)
            .execute(&mut *self.tx)
            .await
            .map_err(db)?;
        Ok(())
    }

    /// Records the answer to the message a resumed step consumed, over the row a buffered
    /// message left (which had no instance yet).
    async fn record_consumed(&mut self, entry: &InboxEntry) -> Result<()> {
        sqlx::query(
            "INSERT INTO inbox (tenant, channel, event_id, instance, status, received_at)
             VALUES ($1, $2, $3, $4, $5, sutra_now())
             ON CONFLICT (tenant, channel, event_id)
             DO UPDATE SET instance = excluded.instance, status = excluded.status",
        )
        .bind(&self.instance.tenant)
        .bind(&entry.channel)
        .bind(&entry.event_id)
        .bind(&entry.answer.instance)
        .bind(&entry.answer.status)
        .execute(&mut *self.tx)
        .await
        .map_err(db)?;
        Ok(())
    }
}

//! A step's commit on PostgreSQL: the statements of the shared script, in one transaction scoped
//! to the instance's tenant.
//!
//! Unlike SQLite, other writers run at the same time (READ COMMITTED). The fenced update
//! ([`StepStatements::settle`]) holds the instance's row lock to the end, so no claim, sweep or
//! other commit interleaves with the step; a park and an early message on the same correlation
//! key are ordered by advisory locks ([`sutra_store_sql::Statements::serialize`]).

use serde_json::Value;
use sqlx::types::Json;
use sutra_core::snapshot::{InstanceInfo, ParkId, Snapshot};
use sutra_core::step::HistoryEvent;
use sutra_store::{ClaimToken, DeliveryId, InboxEntry, OutboxEntry, Result};
use sutra_store_sql::{Correlation, StepStatements, TaskArm, WaitArm, params};

use crate::codec::{db, history_kind, micros, park, signed};
use crate::notices;
use crate::statements::Scoped;

impl StepStatements for Scoped {
    /// The row lock this update takes is held until the commit.
    async fn settle(
        &mut self,
        token: &ClaimToken,
        snapshot: &Snapshot,
        held_by: Option<&str>,
    ) -> Result<bool> {
        let query = sqlx::query(
            "UPDATE instances
             SET snapshot = $1, status = $2, owner = NULL, claimed_at = NULL, recoveries = 0,
                 fence = fence + $7, updated_at = sutra_now(), held_by = COALESCE($8, held_by),
                 version = $9,
                 ended_at = CASE WHEN $2 IN ('completed', 'cancelled') THEN sutra_now() END
             WHERE tenant = $3 AND id = $4 AND ($5::text IS NULL OR owner = $5) AND fence = $6",
        );
        let query = params::settle(query, token, snapshot, held_by);
        Ok(self.execute(query).await? == 1)
    }

    async fn insert_instance(&mut self, snapshot: &Snapshot, held_by: Option<&str>) -> Result<()> {
        let query = sqlx::query(
            "INSERT INTO instances (id, tenant, deployment, version, flow, status, snapshot,
                                    held_by, created_at, updated_at, ended_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, sutra_now(), sutra_now(),
                     CASE WHEN $6 IN ('completed', 'cancelled') THEN sutra_now() END)",
        );
        let query = params::instance(query, snapshot, held_by);
        self.execute(query).await.map(drop)
    }

    /// One `NOTIFY` per payload, in one statement; PostgreSQL delivers them only if this
    /// transaction commits. A pending `NOTIFY` serialises every committer that has one on a
    /// global lock, which is why only steps ending instances held elsewhere send any.
    async fn announce_ended(&mut self, instances: &[String]) -> Result<()> {
        let query = sqlx::query("SELECT pg_notify($1, payload) FROM unnest($2::text[]) AS payload")
            .bind(notices::ENDED)
            .bind(notices::ended_payloads(instances));
        self.execute(query).await.map(drop)
    }

    /// One statement for every event of the step. The primary key `(instance, seq)` refuses a
    /// repeated sequence, failing the whole step.
    async fn insert_history(
        &mut self,
        instance: &InstanceInfo,
        events: &[HistoryEvent],
    ) -> Result<()> {
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
        let query = sqlx::query(
            "INSERT INTO history (tenant, instance, seq, at, kind, node, token, detail)
             SELECT $1, $2, seq, at, kind, node, token, detail
             FROM unnest($3::bigint[], $4::bigint[], $5::text[], $6::text[], $7::bigint[],
                         $8::jsonb[]) AS event (seq, at, kind, node, token, detail)",
        )
        .bind(&instance.tenant)
        .bind(&instance.id)
        .bind(seqs)
        .bind(ats)
        .bind(kinds)
        .bind(nodes)
        .bind(tokens)
        .bind(details);
        self.execute(query).await.map(drop)
    }

    /// A worker completing the task concurrently holds its row: this update waits for that
    /// completion to commit, so that the deletes after it, new statements under READ COMMITTED,
    /// see the delivery the completion wrote.
    async fn cancel_task(&mut self, instance: &str, park_id: ParkId) -> Result<()> {
        let query = sqlx::query(
            "UPDATE tasks SET state = $3, updated_at = sutra_now()
             WHERE instance = $1 AND park = $2 AND state IN ($4, $5)",
        );
        let query = params::cancel_task(query, instance, park_id)?;
        self.execute(query).await.map(drop)
    }

    /// One statement for both tables: they hold different rows, so one snapshot for both
    /// deletes is the same as two.
    async fn delete_park_rows(&mut self, instance: &str, park_id: ParkId) -> Result<()> {
        let query = sqlx::query(
            "WITH waited AS (DELETE FROM waits WHERE instance = $1 AND park = $2)
             DELETE FROM deliveries WHERE instance = $1 AND park = $2",
        )
        .bind(instance)
        .bind(park(park_id)?);
        self.execute(query).await.map(drop)
    }

    async fn insert_wait(&mut self, wait: &WaitArm<'_>) -> Result<bool> {
        let query = sqlx::query(
            "INSERT INTO waits (tenant, channel, key, instance, park) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT DO NOTHING",
        );
        let query = params::wait(query, wait)?;
        Ok(self.execute(query).await? == 1)
    }

    async fn take_buffered(&mut self, on: Correlation<'_>) -> Result<Option<Value>> {
        let query = sqlx::query_scalar(
            "DELETE FROM buffered WHERE id = (
                 SELECT id FROM buffered
                 WHERE tenant = $1 AND channel = $2 AND key = $3 AND expires_at > sutra_now()
                 ORDER BY id LIMIT 1)
             RETURNING message",
        );
        let early: Option<Json<Value>> = params::correlation(query, on)
            .fetch_optional(self.connection())
            .await
            .map_err(db)?;
        Ok(early.map(|Json(message)| message))
    }

    async fn insert_task(&mut self, task: &TaskArm<'_>) -> Result<()> {
        let query = sqlx::query(
            "INSERT INTO tasks (id, tenant, instance, park, topic, input, state, attempt, retries,
                                backoff_us, lock_us, available_at, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8, $9, $10,
                     sutra_now(), sutra_now(), sutra_now())
             ON CONFLICT (id) DO UPDATE SET
                 topic = excluded.topic, input = excluded.input, state = excluded.state,
                 attempt = 1, retries = excluded.retries, backoff_us = excluded.backoff_us,
                 lock_us = excluded.lock_us, lock_token = NULL, locked_until = NULL,
                 available_at = excluded.available_at, updated_at = excluded.updated_at",
        );
        let query = params::task(query, task)?;
        self.execute(query).await.map(drop)
    }

    async fn insert_outbox(
        &mut self,
        instance: &InstanceInfo,
        entries: &[OutboxEntry],
    ) -> Result<()> {
        for entry in entries {
            let query = sqlx::query(
                "INSERT INTO outbox (tenant, instance, deployment, version, channel, payload,
                                     message_key, idempotency_key, next_attempt_at, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, sutra_now(), sutra_now())",
            );
            let query = params::outbox(query, instance, entry);
            self.execute(query).await?;
        }
        Ok(())
    }

    async fn take_delivery(&mut self, instance: &str, delivery: DeliveryId) -> Result<()> {
        let query = sqlx::query("DELETE FROM deliveries WHERE id = $1 AND instance = $2")
            .bind(delivery.0)
            .bind(instance);
        self.execute(query).await.map(drop)
    }

    async fn record_consumed(&mut self, tenant: &str, entry: &InboxEntry) -> Result<()> {
        let query = sqlx::query(
            "INSERT INTO inbox (tenant, channel, event_id, instance, status, received_at)
             VALUES ($1, $2, $3, $4, $5, sutra_now())
             ON CONFLICT (tenant, channel, event_id)
             DO UPDATE SET instance = excluded.instance, status = excluded.status",
        );
        let query = params::inbox(query, tenant, entry);
        self.execute(query).await.map(drop)
    }
}

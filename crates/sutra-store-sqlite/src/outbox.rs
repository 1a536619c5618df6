//! The outbox worker's side of the outbox (SPEC §5.4) on SQLite.
//!
//! PostgreSQL claims with `FOR UPDATE SKIP LOCKED`; here SQLite's single writer plays that role:
//! the claim is one `UPDATE … RETURNING` inside a `BEGIN IMMEDIATE` transaction, so two senders
//! (two replicas on one file) are serialized and the second finds the first's rows claimed. A
//! claim is a timestamp, not an owner: it is stale by age alone, like an instance's claim under
//! the sweep, and whoever scans next takes the row over.

use jiff::SignedDuration;
use sutra_store::{OutboxId, OutboxRetry, Result};
use sutra_store_sql::rows::ClaimedOutboxRow;
use sutra_store_sql::{OutboxStatements, next_attempt};

use crate::codec::{db, micros, micros_before};
use crate::statements::Session;

impl OutboxStatements for Session {
    async fn claim_outbox(
        &mut self,
        batch: u32,
        stale_after: SignedDuration,
    ) -> Result<Vec<ClaimedOutboxRow>> {
        let tx = self.write().await?;
        let now = tx.now();
        let mut claimed: Vec<ClaimedOutboxRow> = sqlx::query_as(
            "UPDATE outbox SET claimed_at = ?1
             WHERE id IN (
                 SELECT id FROM outbox
                 WHERE sent_at IS NULL AND poisoned = 0 AND next_attempt_at <= ?1
                   AND (claimed_at IS NULL OR claimed_at < ?2)
                 ORDER BY next_attempt_at, id
                 LIMIT ?3)
             RETURNING id, tenant, instance, deployment, version, channel, payload, message_key,
                       idempotency_key, attempts, next_attempt_at",
        )
        .bind(micros(now))
        .bind(micros_before(now, stale_after))
        .bind(batch)
        .fetch_all(tx.connection())
        .await
        .map_err(db)?;
        claimed.sort_by_key(ClaimedOutboxRow::order);
        Ok(claimed)
    }

    async fn outbox_sent(&mut self, id: OutboxId) -> Result<()> {
        let query = sqlx::query(
            "UPDATE outbox
             SET sent_at = ?2, attempts = attempts + 1, claimed_at = NULL, poisoned = 0,
                 last_error = NULL
             WHERE id = ?1 AND sent_at IS NULL",
        )
        .bind(id.0)
        .bind(micros(self.now()));
        self.execute(query).await.map(drop)
    }

    async fn outbox_failed(&mut self, id: OutboxId, error: &str, retry: OutboxRetry) -> Result<()> {
        let query = sqlx::query(
            "UPDATE outbox
             SET attempts = attempts + 1, last_error = ?2, claimed_at = NULL,
                 next_attempt_at = COALESCE(?3, next_attempt_at), poisoned = ?4
             WHERE id = ?1 AND sent_at IS NULL AND poisoned = 0",
        );
        let (next_attempt_at, poisoned) = next_attempt(retry);
        let query = query
            .bind(id.0)
            .bind(error)
            .bind(next_attempt_at)
            .bind(poisoned);
        self.execute(query).await.map(drop)
    }
}

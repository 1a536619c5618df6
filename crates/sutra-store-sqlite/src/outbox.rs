//! The outbox worker's side of the outbox (SPEC §5.4): claim a batch, then mark each row sent or
//! failed. Steps write the rows (see [`crate::commit`]).
//!
//! PostgreSQL claims with `FOR UPDATE SKIP LOCKED`; here SQLite's single writer plays that role:
//! the claim is one `UPDATE … RETURNING` inside a `BEGIN IMMEDIATE` transaction, so two senders
//! (two replicas on one file) are serialized and the second finds the first's rows claimed. A
//! claim is a timestamp, not an owner: it is stale by age alone, like an instance's claim under
//! the sweep, and whoever scans next takes the row over.

use jiff::SignedDuration;
use sutra_store::{Outbox, OutboxId, OutboxRetry, OutboxRow, Result};
use sutra_store_sql::Statements;
use sutra_store_sql::rows::ClaimedOutboxRow;

use crate::SqliteStore;
use crate::codec::{db, micros, micros_before, now};

#[async_trait::async_trait]
impl Outbox for SqliteStore {
    async fn claim_outbox(
        &self,
        batch: u32,
        stale_after: SignedDuration,
    ) -> Result<Vec<OutboxRow>> {
        let mut tx = self.begin_write().await?;
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
        tx.commit().await?;
        claimed.sort_by_key(ClaimedOutboxRow::order);
        claimed.into_iter().map(ClaimedOutboxRow::decode).collect()
    }

    /// The last send did not fail, so no failure is kept. A row that was poisoned meanwhile (its
    /// claim went stale while this send was still in flight, and the next sender gave up on it)
    /// was delivered after all: sent wins.
    async fn outbox_sent(&self, id: OutboxId) -> Result<()> {
        sqlx::query(
            "UPDATE outbox
             SET sent_at = ?2, attempts = attempts + 1, claimed_at = NULL, poisoned = 0,
                 last_error = NULL
             WHERE id = ?1 AND sent_at IS NULL",
        )
        .bind(id.0)
        .bind(micros(now()))
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    async fn outbox_failed(&self, id: OutboxId, error: &str, retry: OutboxRetry) -> Result<()> {
        let (next_attempt_at, poisoned) = match retry {
            OutboxRetry::At(at) => (Some(micros(at)), false),
            OutboxRetry::Poison => (None, true),
        };
        sqlx::query(
            "UPDATE outbox
             SET attempts = attempts + 1, last_error = ?2, claimed_at = NULL,
                 next_attempt_at = COALESCE(?3, next_attempt_at), poisoned = ?4
             WHERE id = ?1 AND sent_at IS NULL AND poisoned = 0",
        )
        .bind(id.0)
        .bind(error)
        .bind(next_attempt_at)
        .bind(poisoned)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }
}

//! The outbox worker's side of the outbox (SPEC §5.4) on PostgreSQL.
//!
//! Every replica runs a sender. The batch is picked `FOR UPDATE SKIP LOCKED`: a row another
//! sender is stamping right now is skipped, not waited for, and a row it stamped and committed no
//! longer matches (a locked row is re-checked against the latest version before it is taken), so
//! two senders never take one row. A claim is a timestamp on the database's clock, not an
//! owner: it goes stale by age, and whoever scans next takes the row over.

use jiff::SignedDuration;
use sutra_store::{OutboxId, OutboxRetry, Result};
use sutra_store_sql::rows::ClaimedOutboxRow;
use sutra_store_sql::{OutboxStatements, next_attempt};

use crate::codec::{age, db};
use crate::statements::Scoped;

impl OutboxStatements for Scoped {
    async fn claim_outbox(
        &mut self,
        batch: u32,
        stale_after: SignedDuration,
    ) -> Result<Vec<ClaimedOutboxRow>> {
        // The CTE runs once (a locking CTE is never inlined); the ORDER BY on the outside gives
        // the batch its order, which `RETURNING` alone would not.
        sqlx::query_as(
            "WITH picked AS (
                 SELECT id FROM outbox
                 WHERE sent_at IS NULL AND NOT poisoned AND next_attempt_at <= sutra_now()
                   AND (claimed_at IS NULL OR claimed_at < sutra_now() - $1)
                 ORDER BY next_attempt_at, id
                 LIMIT $2
                 FOR UPDATE SKIP LOCKED),
             stamped AS (
                 UPDATE outbox SET claimed_at = sutra_now()
                 FROM picked WHERE outbox.id = picked.id
                 RETURNING outbox.id, tenant, instance, deployment, version, channel, payload,
                           message_key, idempotency_key, attempts, next_attempt_at)
             SELECT * FROM stamped ORDER BY next_attempt_at, id",
        )
        .bind(age(stale_after))
        .bind(i64::from(batch))
        .fetch_all(self.connection())
        .await
        .map_err(db)
    }

    async fn outbox_sent(&mut self, id: OutboxId) -> Result<()> {
        let query = sqlx::query(
            "UPDATE outbox
             SET sent_at = sutra_now(), attempts = attempts + 1, claimed_at = NULL,
                 poisoned = false, last_error = NULL
             WHERE id = $1 AND sent_at IS NULL",
        )
        .bind(id.0);
        self.execute(query).await.map(drop)
    }

    async fn outbox_failed(&mut self, id: OutboxId, error: &str, retry: OutboxRetry) -> Result<()> {
        let query = sqlx::query(
            "UPDATE outbox
             SET attempts = attempts + 1, last_error = $2, claimed_at = NULL,
                 next_attempt_at = COALESCE($3, next_attempt_at), poisoned = $4
             WHERE id = $1 AND sent_at IS NULL AND NOT poisoned",
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

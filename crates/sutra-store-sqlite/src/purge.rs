//! The history purger's deletions (SPEC §3 `sutra.history.retention`), in one write transaction.
//!
//! Each kind of row is chosen by the same subquery twice — once to delete the inbox rows that
//! depend on it, once to delete it — which picks the same rows both times because nothing else
//! writes while this transaction holds SQLite's write lock. Waits, deliveries, tasks and history
//! go with their instance by `ON DELETE CASCADE`. The status and `sent_at` predicates are
//! literals so that the partial indexes of migration 0004 serve them.

use jiff::SignedDuration;
use sutra_store::Result;
use sutra_store_sql::PurgeStatements;

use crate::codec::{micros, micros_before};
use crate::statements::{Session, Write};

/// `?1` the retention's cutoff, `?2` the batch.
const OLD_TERMINAL_INSTANCES: &str = "SELECT tenant, id FROM instances
     WHERE status IN ('completed', 'cancelled') AND updated_at < ?1
     ORDER BY updated_at, id LIMIT ?2";

/// `?1` now, `?2` the batch.
const EXPIRED_BUFFERED: &str = "SELECT id FROM buffered
     WHERE expires_at < ?1 ORDER BY expires_at, id LIMIT ?2";

impl PurgeStatements for Session {
    async fn purge_instances(&mut self, retention: SignedDuration, batch: u32) -> Result<u64> {
        let tx = self.write().await?;
        let cutoff = micros_before(tx.now(), retention);
        delete(
            tx,
            format!("DELETE FROM inbox WHERE (tenant, instance) IN ({OLD_TERMINAL_INSTANCES})"),
            cutoff,
            batch,
        )
        .await?;
        delete(
            tx,
            format!(
                "DELETE FROM instances WHERE id IN (SELECT id FROM ({OLD_TERMINAL_INSTANCES}))"
            ),
            cutoff,
            batch,
        )
        .await
    }

    /// A buffered message's inbox row says only that it was buffered until a step consumes it;
    /// once the message expired, nothing will.
    async fn purge_buffered(&mut self, batch: u32) -> Result<u64> {
        let tx = self.write().await?;
        let now = micros(tx.now());
        delete(
            tx,
            format!(
                "DELETE FROM inbox WHERE instance IS NULL AND (tenant, channel, event_id) IN
                     (SELECT tenant, channel, event_id FROM buffered WHERE id IN ({EXPIRED_BUFFERED}))"
            ),
            now,
            batch,
        )
        .await?;
        delete(
            tx,
            format!("DELETE FROM buffered WHERE id IN ({EXPIRED_BUFFERED})"),
            now,
            batch,
        )
        .await
    }

    async fn purge_outbox(&mut self, retention: SignedDuration, batch: u32) -> Result<u64> {
        let tx = self.write().await?;
        let cutoff = micros_before(tx.now(), retention);
        delete(
            tx,
            "DELETE FROM outbox WHERE id IN (
                 SELECT id FROM outbox WHERE sent_at IS NOT NULL AND sent_at < ?1
                 ORDER BY sent_at, id LIMIT ?2)"
                .to_owned(),
            cutoff,
            batch,
        )
        .await
    }
}

/// Runs a deletion bound to `?1` `before` and `?2` the batch; how many rows it deleted.
async fn delete(tx: &mut Write, statement: String, before: i64, batch: u32) -> Result<u64> {
    let query = sqlx::query(sqlx::AssertSqlSafe(statement))
        .bind(before)
        .bind(batch);
    tx.execute(query).await
}

//! The history purger's deletions (SPEC §3 `sutra.history.retention`), in one write transaction.
//!
//! Each kind of row is chosen by the same subquery twice — once to delete the inbox rows that
//! depend on it, once to delete it — which picks the same rows both times because nothing else
//! writes while this transaction holds SQLite's write lock. Waits, deliveries, tasks and history
//! go with their instance by `ON DELETE CASCADE`. The status and `sent_at` predicates are
//! literals so that the partial indexes of migration 0004 serve them.

use jiff::SignedDuration;
use sutra_store::{Purge, Purged, Result};
use sutra_store_sql::Statements;

use crate::SqliteStore;
use crate::codec::{micros, micros_before};

/// `?1` the retention's cutoff, `?2` the batch.
const OLD_TERMINAL_INSTANCES: &str = "SELECT tenant, id FROM instances
     WHERE status IN ('completed', 'cancelled') AND updated_at < ?1
     ORDER BY updated_at, id LIMIT ?2";

/// `?1` now, `?2` the batch.
const EXPIRED_BUFFERED: &str = "SELECT id FROM buffered
     WHERE expires_at < ?1 ORDER BY expires_at, id LIMIT ?2";

#[async_trait::async_trait]
impl Purge for SqliteStore {
    async fn purge(&self, retention: SignedDuration, batch: u32) -> Result<Purged> {
        let mut tx = self.begin_write().await?;
        let cutoff = micros_before(tx.now(), retention);
        let now = micros(tx.now());
        let mut delete = async |statement: String, before: i64| -> Result<u64> {
            let query = sqlx::query(sqlx::AssertSqlSafe(statement))
                .bind(before)
                .bind(batch);
            tx.execute(query).await
        };
        delete(
            format!("DELETE FROM inbox WHERE (tenant, instance) IN ({OLD_TERMINAL_INSTANCES})"),
            cutoff,
        )
        .await?;
        let instances = delete(
            format!(
                "DELETE FROM instances WHERE id IN (SELECT id FROM ({OLD_TERMINAL_INSTANCES}))"
            ),
            cutoff,
        )
        .await?;
        // A buffered message's inbox row says only that it was buffered until a step consumes it;
        // once the message expired, nothing will.
        delete(
            format!(
                "DELETE FROM inbox WHERE instance IS NULL AND (tenant, channel, event_id) IN
                     (SELECT tenant, channel, event_id FROM buffered WHERE id IN ({EXPIRED_BUFFERED}))"
            ),
            now,
        )
        .await?;
        let buffered = delete(
            format!("DELETE FROM buffered WHERE id IN ({EXPIRED_BUFFERED})"),
            now,
        )
        .await?;
        let outbox = delete(
            "DELETE FROM outbox WHERE id IN (
                 SELECT id FROM outbox WHERE sent_at IS NOT NULL AND sent_at < ?1
                 ORDER BY sent_at, id LIMIT ?2)"
                .to_owned(),
            cutoff,
        )
        .await?;
        tx.commit().await?;
        Ok(Purged {
            instances,
            buffered,
            outbox,
        })
    }
}

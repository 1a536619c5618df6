//! The history purger's deletions (SPEC §3 `sutra.history.retention`), in one system-scoped
//! transaction.
//!
//! Rows are picked `FOR UPDATE SKIP LOCKED`, so a purge never waits on a row another transaction
//! holds (an instance being claimed, a buffered message being matched by a park) and two purgers
//! never pick the same rows. The rows that hang off a purged instance — waits, deliveries, tasks,
//! history — go by `ON DELETE CASCADE`; its inbox rows, which have no foreign key, go in the same
//! statement. Terminal instances are found by `ended_at`, which the ending step stamps (migration
//! 0010: so that no step's update touches an indexed column); the `sent_at` predicate is a literal
//! so that the partial index of migration 0003 serves it.

use jiff::SignedDuration;
use sutra_store::Result;
use sutra_store_sql::PurgeStatements;

use crate::codec::{age, db, unsigned};
use crate::statements::Scoped;

impl PurgeStatements for Scoped {
    /// Old terminal instances, never `failed` ones, and the inbox rows of the messages they
    /// consumed.
    async fn purge_instances(&mut self, retention: SignedDuration, batch: u32) -> Result<u64> {
        let query = sqlx::query(
            "WITH doomed AS (
                 SELECT tenant, id FROM instances
                 WHERE ended_at < sutra_now() - $1
                 ORDER BY ended_at, id LIMIT $2
                 FOR UPDATE SKIP LOCKED
             ), consumed AS (
                 DELETE FROM inbox USING doomed
                 WHERE inbox.tenant = doomed.tenant AND inbox.instance = doomed.id
             )
             DELETE FROM instances USING doomed WHERE instances.id = doomed.id",
        )
        .bind(age(retention))
        .bind(i64::from(batch));
        self.execute(query).await
    }

    /// Expired buffered messages, and their inbox rows while those say only that the message was
    /// buffered: no step will consume it now.
    async fn purge_buffered(&mut self, batch: u32) -> Result<u64> {
        let deleted: i64 = sqlx::query_scalar(
            "WITH expired AS (
                 DELETE FROM buffered WHERE id IN (
                     SELECT id FROM buffered WHERE expires_at < sutra_now()
                     ORDER BY expires_at, id LIMIT $1
                     FOR UPDATE SKIP LOCKED)
                 RETURNING tenant, channel, event_id
             ), forgotten AS (
                 DELETE FROM inbox USING expired
                 WHERE inbox.tenant = expired.tenant AND inbox.channel = expired.channel
                   AND inbox.event_id = expired.event_id AND inbox.instance IS NULL
             )
             SELECT count(*) FROM expired",
        )
        .bind(i64::from(batch))
        .fetch_one(self.connection())
        .await
        .map_err(db)?;
        unsigned(deleted, "a count")
    }

    /// Outbox rows sent longer ago than the retention; pending and poisoned rows stay.
    async fn purge_outbox(&mut self, retention: SignedDuration, batch: u32) -> Result<u64> {
        let query = sqlx::query(
            "DELETE FROM outbox WHERE id IN (
                 SELECT id FROM outbox WHERE sent_at < sutra_now() - $1
                 ORDER BY sent_at, id LIMIT $2
                 FOR UPDATE SKIP LOCKED)",
        )
        .bind(age(retention))
        .bind(i64::from(batch));
        self.execute(query).await
    }
}

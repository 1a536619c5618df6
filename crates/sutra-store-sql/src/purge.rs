//! The history purger's deletions (SPEC §3 `sutra.history.retention`), in one system-scoped
//! transaction. The rows that hang off a purged instance — waits, deliveries, tasks, history —
//! go with it by `ON DELETE CASCADE`; its inbox rows, which have no foreign key, are each
//! backend's statement to delete with it.

use std::future::Future;

use jiff::SignedDuration;
use sutra_store::{Purge, Purged, Result};

use crate::statements::{Backend, Scope, Statements};
use crate::store::SqlStore;

#[async_trait::async_trait]
impl<B: Backend> Purge for SqlStore<B> {
    async fn purge(&self, retention: SignedDuration, batch: u32) -> Result<Purged> {
        self.once(Scope::System, async |tx| {
            Ok(Purged {
                instances: tx.purge_instances(retention, batch).await?,
                buffered: tx.purge_buffered(batch).await?,
                outbox: tx.purge_outbox(retention, batch).await?,
            })
        })
        .await
    }
}

/// The purger's deletions (`purge`), each of at most `batch` rows; each returns how many
/// it deleted.
pub trait PurgeStatements: Statements {
    /// Terminal instances last updated longer ago than `retention` (never `failed` ones), with
    /// the inbox rows of the messages they consumed.
    fn purge_instances(
        &mut self,
        retention: SignedDuration,
        batch: u32,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Expired buffered messages, and their inbox rows while those say only that the message was
    /// buffered.
    fn purge_buffered(&mut self, batch: u32) -> impl Future<Output = Result<u64>> + Send;

    /// Outbox rows sent longer ago than `retention`; pending and poisoned rows stay.
    fn purge_outbox(
        &mut self,
        retention: SignedDuration,
        batch: u32,
    ) -> impl Future<Output = Result<u64>> + Send;
}

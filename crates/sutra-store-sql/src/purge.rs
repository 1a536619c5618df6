//! The history purger's deletions (SPEC §3 `sutra.history.retention`), in one system-scoped
//! transaction. The rows that hang off a purged instance — waits, deliveries, tasks, history —
//! go with it by `ON DELETE CASCADE`; its inbox rows, which have no foreign key, are each
//! backend's statement to delete with it.

use jiff::SignedDuration;
use sutra_store::{Purge, Purged, Result};

use crate::statements::{Backend, PurgeStatements, Scope, Statements};
use crate::store::SqlStore;

#[async_trait::async_trait]
impl<B: Backend> Purge for SqlStore<B> {
    async fn purge(&self, retention: SignedDuration, batch: u32) -> Result<Purged> {
        let mut tx = self.begin(Scope::System).await?;
        let purged = Purged {
            instances: tx.purge_instances(retention, batch).await?,
            buffered: tx.purge_buffered(batch).await?,
            outbox: tx.purge_outbox(retention, batch).await?,
        };
        tx.commit().await?;
        Ok(purged)
    }
}

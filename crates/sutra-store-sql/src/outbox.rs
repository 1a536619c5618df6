//! The outbox worker's side of the outbox (SPEC §5.4): claim a batch, then mark each row sent or
//! failed, in the system scope (a sender serves every tenant). Steps write the rows (see
//! `commit`). A claim is a timestamp on the store's clock, not an owner: it goes stale by
//! age, and whoever scans next takes the row over.

use std::future::Future;

use jiff::SignedDuration;
use sutra_store::codec::micros;
use sutra_store::{Outbox, OutboxId, OutboxRetry, OutboxRow, Result};

use crate::rows::ClaimedOutboxRow;
use crate::statements::{Backend, Scope, Statements};
use crate::store::SqlStore;

#[async_trait::async_trait]
impl<B: Backend> Outbox for SqlStore<B> {
    async fn claim_outbox(
        &self,
        batch: u32,
        stale_after: SignedDuration,
    ) -> Result<Vec<OutboxRow>> {
        let claimed = self
            .once(Scope::System, async |tx| {
                tx.claim_outbox(batch, stale_after).await
            })
            .await?;
        claimed.into_iter().map(ClaimedOutboxRow::decode).collect()
    }

    /// The last send did not fail, so no failure is kept. A row that was poisoned meanwhile (its
    /// claim went stale while this send was still in flight, and the next sender gave up on it)
    /// was delivered after all: sent wins.
    async fn outbox_sent(&self, id: OutboxId) -> Result<()> {
        self.once(Scope::System, async |tx| tx.outbox_sent(id).await)
            .await
    }

    async fn outbox_failed(&self, id: OutboxId, error: &str, retry: OutboxRetry) -> Result<()> {
        self.once(Scope::System, async |tx| {
            tx.outbox_failed(id, error, retry).await
        })
        .await
    }
}

/// A failed send's next attempt as the row keeps it: when (`None`: never), and whether the row
/// is poisoned.
pub fn next_attempt(retry: OutboxRetry) -> (Option<i64>, bool) {
    match retry {
        OutboxRetry::At(at) => (Some(micros(at)), false),
        OutboxRetry::Poison => (None, true),
    }
}

/// The statements of the outbox worker's side (`outbox`); steps write the rows
/// ([`crate::StepStatements::insert_outbox`]).
pub trait OutboxStatements: Statements {
    /// Stamps up to `batch` rows due for sending whose claim is missing or older than
    /// `stale_after`; returns them in the order they are handed out: oldest due first, then in
    /// the order they were written.
    fn claim_outbox(
        &mut self,
        batch: u32,
        stale_after: SignedDuration,
    ) -> impl Future<Output = Result<Vec<ClaimedOutboxRow>>> + Send;

    fn outbox_sent(&mut self, id: OutboxId) -> impl Future<Output = Result<()>> + Send;

    /// Records a failed send of a row neither sent nor poisoned.
    fn outbox_failed(
        &mut self,
        id: OutboxId,
        error: &str,
        retry: OutboxRetry,
    ) -> impl Future<Output = Result<()>> + Send;
}

//! The history purger's deletions (SPEC §3 `sutra.history.retention`).

use jiff::SignedDuration;

use crate::Result;

/// What one [`Purge::purge`] deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    /// Terminal instances, each with every row that hangs off it.
    pub instances: u64,
    /// Buffered messages past their expiry.
    pub buffered: u64,
    /// Outbox rows sent longer ago than the retention.
    pub outbox: u64,
}

impl Purged {
    /// Whether any kind of row filled its batch: more may be waiting.
    pub fn filled(&self, batch: u32) -> bool {
        [self.instances, self.buffered, self.outbox]
            .into_iter()
            .any(|deleted| deleted >= u64::from(batch))
    }
}

/// Deleting what retention no longer keeps.
#[async_trait::async_trait]
pub trait Purge: Send + Sync {
    /// Deletes, in one transaction, up to `batch` each of: terminal instances (`completed`,
    /// `cancelled` — never `failed`) not updated for `retention`, with their waits, deliveries,
    /// tasks, history and inbox rows; buffered messages past their expiry, with the inbox rows
    /// that recorded only their buffering; outbox rows sent longer than `retention` ago. Ages are
    /// by the store's clock.
    async fn purge(&self, retention: SignedDuration, batch: u32) -> Result<Purged>;
}

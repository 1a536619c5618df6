//! The outbox area (SPEC §5.4): the rows a step's `emit`s leave behind, and the port they leave
//! the process by. [`Sender`] lives here, beside the row it sends, so that a transport implements
//! it knowing only this seam — not the runtime that drives it, nor any store behind it.

use jiff::{SignedDuration, Timestamp};
use sutra_core::model::Channel;

use crate::{OutboxEntry, Result};

/// An outbox row (SPEC §5.4), as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxRecord {
    pub entry: OutboxEntry,
    pub instance: String,
    pub deployment: String,
    pub version: u32,
    /// Sends tried whose outcome was recorded (a send cut short by a crash is not counted).
    pub attempts: u32,
    pub sent_at: Option<Timestamp>,
    /// Past the channel's `max-attempts`: kept, visible, never sent.
    pub poisoned: bool,
    /// Why the last send failed; `None` before any failure and once sent.
    pub last_error: Option<String>,
    /// When the row is due for its next send (its creation time until a send fails).
    pub next_attempt_at: Timestamp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OutboxId(pub i64);

/// An outbox row claimed for sending by [`Outbox::claim_outbox`]: what a sender needs to address
/// and send it, and what the engine needs to decide what follows a failure.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxRow {
    pub id: OutboxId,
    pub tenant: String,
    pub instance: String,
    /// The deployment version that minted the row: its channel definitions address the send,
    /// even once the version is draining.
    pub deployment: String,
    pub version: u32,
    pub entry: OutboxEntry,
    /// Sends tried so far whose outcome was recorded.
    pub attempts: u32,
}

/// What follows a failed send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutboxRetry {
    /// Send again once this time has come.
    At(Timestamp),
    /// Never send again (past the channel's `max-attempts`): the row stays, visible, and no
    /// longer counts as pending.
    Poison,
}

/// The outbox worker's side: claiming rows for sending and recording how each send went.
#[async_trait::async_trait]
pub trait Outbox: Send + Sync {
    /// Claims up to `batch` rows due for sending, oldest due first, in one transaction: rows
    /// neither sent nor poisoned whose next attempt has come, and which are unclaimed or whose
    /// claim is older than `stale_after` (their sender died). Stamps their claim, so that no
    /// other sender takes them until it goes stale. Rows of every tenant.
    async fn claim_outbox(&self, batch: u32, stale_after: SignedDuration)
    -> Result<Vec<OutboxRow>>;

    /// Marks a row sent, counts the attempt, clears its claim and its last error; never claimed
    /// again.
    async fn outbox_sent(&self, id: OutboxId) -> Result<()>;

    /// Records a failed send: counts the attempt, keeps `error`, clears the claim, and either
    /// schedules the next attempt or poisons the row.
    async fn outbox_failed(&self, id: OutboxId, error: &str, retry: OutboxRetry) -> Result<()>;
}

/// Sends outbox rows over their channels' transports.
#[async_trait::async_trait]
pub trait Sender: Send + Sync + 'static {
    /// Sends `row` as `channel` defines it. `Ok` means the receiving side accepted the message;
    /// anything else is retried later with the same idempotency key.
    async fn send(&self, channel: &Channel, row: &OutboxRow) -> Result<(), SendError>;
}

/// Why a send failed, in a few words: kept on the row, where operators see it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SendError(pub String);

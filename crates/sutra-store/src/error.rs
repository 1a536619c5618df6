//! The store's errors, shared by every area: each says whether a retry can help, so that the
//! engine and the API map them to a code without reading messages.

use crate::InboxAnswer;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// Another owner holds a live claim on the instance. Nothing was read or written.
    #[error("the instance is claimed by another owner")]
    ClaimHeld,
    /// The claim this commit or release relied on was swept and possibly taken by another owner;
    /// nothing of the step is visible.
    #[error("the claim was lost (swept after the claim timeout); the step was rolled back")]
    ClaimLost,
    #[error("no instance {0}")]
    InstanceNotFound(String),
    /// Another instance already waits on this channel and key.
    #[error("another instance already waits on channel `{channel}` with key `{key}`")]
    AliasTaken { channel: String, key: String },
    /// A start's message is correlated to an instance that waits on its key: it is a relay,
    /// not a start. Nothing was written.
    #[error("an instance waits on channel `{channel}` with key `{key}`: the message is a relay")]
    Waited { channel: String, key: String },
    /// The start's inbox row already existed: another delivery of the same message started (or
    /// is starting) the instance. Answer as the first delivery was answered.
    #[error("the message was already consumed")]
    Duplicate(InboxAnswer),
    /// The database could not be reached, or refused the transaction. Retry-safe: nothing was
    /// half-written.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A row could not be decoded, or a write broke one of the schema's constraints (a repeated
    /// history sequence, a repeated outbox key): a bug or a manual edit, never a retryable
    /// condition.
    #[error("corrupt store data: {0}")]
    Corrupt(String),
    #[error("no task {0}")]
    TaskNotFound(String),
    /// The worker's lock token does not hold the task (wrong, expired, or the task moved on).
    /// Nothing was written.
    #[error("{0}")]
    LockLost(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

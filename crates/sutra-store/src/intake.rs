//! Intake and the inbox (SPEC §5.3): finding the park a message correlates to, answering a
//! redelivered message as it was first answered, and keeping an early message until its
//! `receive` parks.

use jiff::Timestamp;
use sutra_core::snapshot::ParkId;
use sutra_core::step::Message;

use crate::Result;

/// How a consumed message was answered, kept so that a redelivery is answered the same way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxAnswer {
    pub instance: Option<String>,
    pub status: String,
}

impl InboxAnswer {
    /// The answer recorded for a message kept by [`crate::Intake::buffer`]: no instance has it yet.
    pub fn buffered() -> InboxAnswer {
        InboxAnswer {
            instance: None,
            status: "buffered".to_owned(),
        }
    }
}

/// The inbox row a step writes for the message it consumed: `(tenant, channel, event id)`.
#[derive(Debug, Clone, PartialEq)]
pub struct InboxEntry {
    pub channel: String,
    pub event_id: String,
    pub answer: InboxAnswer,
    /// The message's correlation key, when its channel computes one and the step starts an
    /// instance: the start refuses itself ([`crate::Error::Waited`]) if an instance waits on
    /// the key, for the message is that instance's. Ignored by every other step.
    pub key: Option<String>,
}

/// A message kept for a `receive` that has not parked yet (channel `buffer`).
#[derive(Debug, Clone, PartialEq)]
pub struct BufferedMessage {
    pub channel: String,
    pub key: String,
    pub message: Message,
    pub expires_at: Timestamp,
}

/// What intake learns of a message before it runs a step: how it was answered, if it was
/// consumed already, and otherwise the park its correlation key names, if any.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Lookup {
    pub answer: Option<InboxAnswer>,
    pub wait: Option<WaitTarget>,
}

/// A correlation alias found for a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitTarget {
    pub instance: String,
    pub park: ParkId,
}

/// What intake asks of the store before a step runs.
#[async_trait::async_trait]
pub trait Intake: Send + Sync {
    /// The wait on a correlation key, read alone: for the conformance suite, which checks what
    /// steps and intake left ([`Intake::look_up`] reads it for intake).
    #[cfg(feature = "conformance")]
    async fn find_wait(&self, tenant: &str, channel: &str, key: &str)
    -> Result<Option<WaitTarget>>;

    /// A message's inbox answer, read alone: for the conformance suite, like
    /// [`Intake::find_wait`].
    #[cfg(feature = "conformance")]
    async fn inbox_answer(
        &self,
        tenant: &str,
        channel: &str,
        event_id: &str,
    ) -> Result<Option<InboxAnswer>>;

    /// The message's inbox answer, then, unless the message was consumed, the wait on its
    /// correlation `key`: the two reads of a message's intake in one round of the store's.
    async fn look_up(
        &self,
        tenant: &str,
        channel: &str,
        event_id: &str,
        key: Option<&str>,
    ) -> Result<Lookup>;

    /// Keeps an uncorrelated message until a `receive` parks on its key or it expires. Also
    /// records its inbox row; returns the earlier answer if the message was already consumed.
    /// If a wait on the key was armed since the caller looked for one, the message becomes a
    /// relay delivery for that park instead, due now: early messages are never lost to a race
    /// with the park, whichever of the two transactions comes first.
    async fn buffer(&self, tenant: &str, message: &BufferedMessage) -> Result<Option<InboxAnswer>>;
}
